#!/usr/bin/env python
"""Boxyard's core operations measured side by side with raw docker-py.

Every Boxyard figure has a raw docker-py counterpart doing the same engine work, measured in
the same run and interleaved with it (each round runs every variant once, in a new random
order), so that Boxyard's cost is read against what Docker itself costs on the same machine,
under the same load, at the same moment. Boxyard's overhead is mostly a fixed number of
milliseconds, so the ratio is larger on a faster engine: read it with the p50 difference.

    .venv/bin/python bench/bench_core.py [--n-open 30] [--n-exec 100] [--image IMAGE] [--json PATH]

Measured:
- open a new sandbox (cold): `services.open_sandbox` until its container runs, against
  `create_volume` + `create_container` + `start` with the same hardening;
- exec `true` in a running sandbox: `services.run_exec` against what docker-py's
  `Container.exec_run` does (`exec_create` + `exec_start` + `exec_inspect`): in the default
  session (argv and shell-string forms) and fresh (outside any session), all through the
  sandbox's agent.

The benchmark uses its own SQLite database in a temporary directory and its own deployment
label; every container and volume carrying that label is removed at the end, even on failure.
Nothing is asserted about the times: this measures, it does not judge.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_IMAGE = "boxyard/busybox:1"
EXTRA_EXEC_IMAGE = "boxyard/default:1"
DEPLOYMENT_LABEL = "io.boxyard.deployment"
WORKSPACE = "/workspace"


# --- statistics -------------------------------------------------------------------------------


@dataclass
class Stats:
    """The samples of one variant, in milliseconds, and their percentiles."""

    name: str
    samples_ms: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.samples_ms.append(seconds * 1000)

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    def percentile(self, p: float) -> float:
        """Linear interpolation between the closest ranks (numpy's default method)."""
        ordered = sorted(self.samples_ms)
        if not ordered:
            return float("nan")
        rank = (len(ordered) - 1) * p / 100
        low = int(rank)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

    def percentiles(self) -> tuple[float, float, float]:
        return self.percentile(50), self.percentile(90), self.percentile(99)

    def ratios_to(self, base: Stats) -> tuple[float, float, float]:
        (ours50, ours90, ours99), (base50, base90, base99) = self.percentiles(), base.percentiles()
        return ours50 / base50, ours90 / base90, ours99 / base99

    def summary(self) -> dict[str, Any]:
        p50, p90, p99 = self.percentiles()
        samples = self.samples_ms
        return {
            "n": self.n,
            "p50_ms": round(p50, 3),
            "p90_ms": round(p90, 3),
            "p99_ms": round(p99, 3),
            "min_ms": round(min(samples), 3) if samples else None,
            "max_ms": round(max(samples), 3) if samples else None,
            "mean_ms": round(sum(samples) / len(samples), 3) if samples else None,
            "samples_ms": [round(value, 3) for value in samples],
        }


@dataclass
class Section:
    """One interleaved comparison: its variants' figures, measured in the same rounds."""

    kind: str  # "open" or "exec"
    image: str
    stats: dict[str, Stats]


@dataclass(frozen=True)
class Comparison:
    operation: str
    image: str
    raw: Stats
    boxyard: Stats


# A variant does its own set-up and clean-up and returns the seconds of its timed part only.
Variant = Callable[[], float]


def timed(operation: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = operation()
    return time.perf_counter() - start, result


def run_interleaved(
    variants: dict[str, Variant], rounds: int, warmup: int, rng: random.Random, label: str
) -> dict[str, Stats]:
    """Run every variant once per round, in a new random order each round (A B, B A, ...)."""
    stats = {name: Stats(name) for name in variants}
    order = list(variants)
    total = warmup + rounds
    show_progress = sys.stderr.isatty()
    for round_no in range(total):
        rng.shuffle(order)
        for name in order:
            seconds = variants[name]()
            if round_no >= warmup:
                stats[name].add(seconds)
        if show_progress:
            print(f"\r  {label}: round {round_no + 1}/{total}", end="", file=sys.stderr, flush=True)
    print(f"\r  {label}: {total} rounds, the first {warmup} discarded", file=sys.stderr)
    return stats


# --- set-up -----------------------------------------------------------------------------------


def print_percentiles(stats: dict[str, Stats]) -> None:
    """Each variant's p50/p90/p99, one line each."""
    print(f"  {'variant':<28} {'n':>4} {'p50/p90/p99 ms':>22}")
    for name, figures in stats.items():
        p50, p90, p99 = figures.percentiles()
        print(f"  {name:<28} {figures.n:>4} {p50:>8.1f}/{p90:.1f}/{p99:.1f}")
    print()


def print_targets(checks: list[tuple[str, float, str, float]]) -> None:
    """An issue's targets as PASS or FAIL lines (text, value, "<=" or ">=", limit); they never
    change a run's exit status."""
    print("targets (reported only; they never fail the run)")
    for text, value, sign, limit in checks:
        passed = value <= limit if sign == "<=" else value >= limit
        print(f"  {'PASS' if passed else 'FAIL'}  {text}: {value:.2f} (target {sign} {limit})")


def configure_django(data_dir: Path, deployment: str) -> None:
    """A private database and deployment label; runs before anything imports Django models."""
    os.environ["BOXYARD_DATA_DIR"] = str(data_dir)
    os.environ["DATABASE_URL"] = f"sqlite:///{data_dir / 'bench.sqlite3'}"
    os.environ["BOXYARD_DEPLOYMENT"] = deployment
    os.environ["BOXYARD_IMAGE_ALLOWLIST"] = "boxyard/*"
    os.environ.setdefault("BOXYARD_LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def environment(api: Any) -> dict[str, Any]:
    import django
    import docker

    info = api.info()
    version = api.version()
    return {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "docker_server": version.get("Version"),
        "docker_api": version.get("ApiVersion"),
        "storage_driver": info.get("Driver"),
        "cgroup": f"v{info.get('CgroupVersion', '?')} ({info.get('CgroupDriver', '?')})",
        "rootless_docker": any("rootless" in o for o in info.get("SecurityOptions") or []),
        "python": platform.python_version(),
        "django": django.get_version(),
        "docker_py": docker.__version__,
        "sqlite": sqlite3.sqlite_version,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_environment(
    env: dict[str, Any], title: str = "Boxyard core benchmark", more_versions: str = ""
) -> None:
    rootless = ", rootless" if env["rootless_docker"] else ""
    print(title)
    print(f"  date      {env['date']}")
    print(f"  cpu       {env['cpu_model']} x {env['cpu_count']}")
    print(f"  kernel    {env['kernel']}")
    print(
        f"  docker    {env['docker_server']} (API {env['docker_api']}), storage "
        f"{env['storage_driver']}, cgroup {env['cgroup']}{rootless}"
    )
    print(
        f"  python    {env['python']}, Django {env['django']}, docker-py {env['docker_py']}, "
        f"SQLite {env['sqlite']}{more_versions}"
    )
    print()


# --- raw docker-py: the baseline --------------------------------------------------------------


class RawDocker:
    """What a careful user of docker-py would write: the same hardening, no control plane.

    Keep in step with `DockerRuntime._host_config` and `ensure_container`; `parity_problems`
    reports any drift at the start of a run.
    """

    def __init__(self, api: Any, deployment: str, profile: Any, user: str) -> None:
        self.api = api
        self.profile = profile  # a Pipeline: cpus, memory_mb, pids_limit, tmp_mb
        self.user = user
        self.labels = {"io.boxyard.managed": "1", DEPLOYMENT_LABEL: deployment}
        self._ids = itertools.count()

    def host_config(self, volume: str) -> dict[str, Any]:
        from docker.types import LogConfig, Mount, Ulimit

        from sandboxes.runtime.docker.engine import cpu_limit

        memory = f"{self.profile.memory_mb}m"
        host_config: dict[str, Any] = self.api.create_host_config(
            mounts=[Mount(target=WORKSPACE, source=volume, type="volume", read_only=False)],
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            privileged=False,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,exec,size={self.profile.tmp_mb}m,mode=1777"},
            pids_limit=self.profile.pids_limit,
            mem_limit=memory,
            memswap_limit=memory,
            **cpu_limit(self.profile.cpus),
            network_mode="none",
            ipc_mode="private",
            init=True,
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
        )
        return host_config

    def create_and_start(self, image: str) -> tuple[str, str]:
        """A named volume and a running container on it; returns (container id, volume)."""
        suffix = f"{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        volume = f"bench-raw-ws-{suffix}"
        self.api.create_volume(name=volume, labels=self.labels)
        container = self.api.create_container(
            image,
            ["sleep", "infinity"],
            name=f"bench-raw-{suffix}",
            user=self.user,
            labels={**self.labels, "io.boxyard.sandbox": suffix},
            environment={"HOME": WORKSPACE, "LANG": "C.UTF-8"},
            working_dir=WORKSPACE,
            hostname="sandbox",
            host_config=self.host_config(volume),
            network_disabled=True,
            stop_signal="SIGKILL",
        )
        self.api.start(container["Id"])
        return container["Id"], volume

    def remove(self, container_id: str, volume: str) -> None:
        self.api.remove_container(container_id, force=True)
        self.api.remove_volume(volume, force=True)

    def exec_run(self, container_id: str, cmd: list[str]) -> int:
        """Exactly what docker-py's `Container.exec_run(cmd)` does; returns the exit code."""
        created = self.api.exec_create(container_id, cmd, stdout=True, stderr=True)
        self.api.exec_start(created["Id"])
        exit_code: int = self.api.exec_inspect(created["Id"])["ExitCode"]
        return exit_code


def parity_problems(raw: RawDocker, sandbox: Any) -> list[str]:
    """Differences between the raw host config and the one Boxyard builds for `sandbox`."""
    from hosts.engines import get_runtime
    from sandboxes.runtime.docker.engine import DockerRuntime
    from sandboxes.services import specs

    runtime = get_runtime()
    try:
        assert isinstance(runtime, DockerRuntime)  # the bench measures the Docker Engine
        image_labels = runtime.image_labels(sandbox.image) or {}
        ours = runtime._host_config(specs.build_spec(sandbox, image_labels))
    except Exception as error:  # internal API drift must not stop the measurements
        return [f"could not build Boxyard's host config to compare ({error!r})"]
    theirs = raw.host_config(sandbox.volume_name)
    return [
        f"HostConfig.{key}: boxyard={ours.get(key)!r} raw={theirs.get(key)!r}"
        for key in sorted(set(ours) | set(theirs))
        if ours.get(key) != theirs.get(key)
    ]


def remove_deployment(api: Any, deployment: str) -> tuple[int, int]:
    """Remove every container and volume labelled with this run's deployment."""
    filters = {"label": [f"{DEPLOYMENT_LABEL}={deployment}"]}
    containers = volumes = 0
    for container in api.containers(all=True, filters=filters):
        try:
            api.remove_container(container["Id"], force=True)
            containers += 1
        except Exception as error:  # keep cleaning up the rest
            print(f"could not remove container {container['Id'][:12]}: {error}", file=sys.stderr)
    from sandboxes.runtime.docker.disks import LABEL_DISK, WorkspaceDisks

    disks = WorkspaceDisks(api)
    for volume in api.volumes(filters=filters).get("Volumes") or []:
        try:
            if LABEL_DISK in (volume.get("Labels") or {}):
                disks.remove(volume["Name"])  # a workspace: its disk goes with it
            else:
                api.remove_volume(volume["Name"], force=True)
            volumes += 1
        except Exception as error:
            print(f"could not remove volume {volume['Name']}: {error}", file=sys.stderr)
    return containers, volumes


# --- the benchmarks ---------------------------------------------------------------------------

# Exec variants: key, what it runs. The first is the baseline of the breakdown.
EXEC_VARIANTS = {
    "raw argv": 'docker-py exec_run(["true"])',
    "raw sh -c": 'docker-py exec_run(["sh", "-c", "true"])',
    "boxyard fresh": 'services.run_exec(cmd=["true"], fresh)',
    "boxyard argv": 'services.run_exec(cmd=["true"])',
    "boxyard shell": 'services.run_exec(cmd="true")',
}


def pipeline_for(image: str) -> Any:
    """The pipeline of `image`: `bench` for the first image, `bench-2`... for others."""
    from pipelines.models import Pipeline

    if existing := Pipeline.objects.filter(image=image).first():
        return existing
    count = Pipeline.objects.count()
    slug = "bench" if count == 0 else f"bench-{count + 1}"
    return Pipeline.objects.create(slug=slug, image=image, max_live_sandboxes=1000)


@dataclass
class Bench:
    raw: RawDocker
    actor: Any
    rng: random.Random
    keys: Iterator[int] = field(default_factory=itertools.count)

    def open_sandbox(self, pipeline: Any) -> Any:
        """A new sandbox under a key never used before, so the open is always cold."""
        from sandboxes import services
        from sandboxes.models import State

        variables = {"launcher_type": "bench", "launcher_id": str(next(self.keys))}
        opened = services.open_sandbox(pipeline, variables, self.actor)
        if not opened.created or opened.sandbox.state != State.RUNNING:
            raise RuntimeError(f"open_sandbox gave a {opened.sandbox.state} sandbox")
        return opened.sandbox

    def close_sandbox(self, sandbox: Any) -> None:
        from sandboxes import services

        services.close_sandbox(sandbox, self.actor, delete_workspace=True)

    # open a new sandbox (cold)

    def open_variants(self, pipeline: Any) -> dict[str, Variant]:
        def boxyard() -> float:
            seconds, sandbox = timed(lambda: self.open_sandbox(pipeline))
            self.close_sandbox(sandbox)
            return seconds

        def raw() -> float:
            seconds, created = timed(lambda: self.raw.create_and_start(pipeline.effective_image))
            self.raw.remove(*created)
            return seconds

        return {"raw": raw, "boxyard": boxyard}

    def run_open(self, image: str, n: int, warmup: int) -> Section:
        variants = self.open_variants(pipeline_for(image))
        return Section("open", image, run_interleaved(variants, n, warmup, self.rng, "open"))

    # exec `true` in a running sandbox

    def exec_variants(self, sandbox: Any, raw_container: str) -> dict[str, Variant]:
        from sandboxes import services

        def raw(cmd: list[str], container: str = raw_container) -> int:
            return self.raw.exec_run(container, cmd)

        def boxyard(cmd: list[str] | str, *, one_shot: bool = False) -> int | None:
            request = services.clean_request(sandbox, cmd=cmd, one_shot=one_shot)
            return services.run_exec(sandbox, request, self.actor).exit_code

        operations: dict[str, Callable[[], int | None]] = {
            "raw argv": lambda: raw(["true"]),
            "raw sh -c": lambda: raw(["sh", "-c", "true"]),
            "boxyard fresh": lambda: boxyard(["true"], one_shot=True),
            "boxyard argv": lambda: boxyard(["true"]),
            "boxyard shell": lambda: boxyard("true"),
        }
        return {name: _expect_success(operation) for name, operation in operations.items()}

    def run_exec(self, image: str, n: int, warmup: int) -> Section:
        sandbox = self.open_sandbox(pipeline_for(image))
        raw_container = self.raw.create_and_start(image)
        try:
            variants = self.exec_variants(sandbox, raw_container[0])
            return Section("exec", image, run_interleaved(variants, n, warmup, self.rng, "exec"))
        finally:
            self.close_sandbox(sandbox)
            self.raw.remove(*raw_container)


def _expect_success(operation: Callable[[], int | None]) -> Variant:
    """Time an exec; one that fails would time the wrong thing, so it stops the run."""

    def variant() -> float:
        seconds, exit_code = timed(operation)
        if exit_code != 0:
            raise RuntimeError(f"the benchmarked exec exited {exit_code}")
        return seconds

    return variant


def run_all(bench: Bench, args: argparse.Namespace) -> list[Section]:
    sandbox = bench.open_sandbox(pipeline_for(args.image))
    for problem in parity_problems(bench.raw, sandbox):
        print(f"warning: the raw baseline differs from Boxyard: {problem}", file=sys.stderr)
    bench.close_sandbox(sandbox)

    print(f"{args.image}:", file=sys.stderr)
    sections = [
        bench.run_open(args.image, args.n_open, args.warmup_open),
        bench.run_exec(args.image, args.n_exec, args.warmup_exec),
    ]
    extra = args.extra_exec_image
    if extra and extra != args.image:
        if bench.raw.api.images(name=extra):
            print(f"{extra}:", file=sys.stderr)
            sections.append(bench.run_exec(extra, args.n_exec, args.warmup_exec))
        else:
            print(f"{extra} is not in the engine: its exec comparison is skipped", file=sys.stderr)
    return sections


# --- reporting --------------------------------------------------------------------------------


def comparisons(sections: list[Section]) -> list[Comparison]:
    rows = []
    for section in sections:
        stats, image = section.stats, section.image
        if section.kind == "open":
            rows.append(Comparison("open a new sandbox", image, stats["raw"], stats["boxyard"]))
        else:
            argv, shell = stats["boxyard argv"], stats["boxyard shell"]
            rows.append(Comparison('exec ["true"]', image, stats["raw argv"], argv))
            rows.append(Comparison('exec "true" (shell)', image, stats["raw sh -c"], shell))
            rows.append(Comparison("exec fresh", image, stats["raw argv"], stats["boxyard fresh"]))
    return rows


def _triple(values: tuple[float, ...], fmt: str) -> str:
    return "/".join(format(value, fmt) for value in values)


def print_results(rows: list[Comparison]) -> None:
    header = (
        f"{'operation':<20} {'image':<18} {'n':>4}  {'raw p50/p90/p99 ms':>19}  "
        f"{'boxyard p50/p90/p99 ms':>22}  {'boxyard/raw':>14}  {'+p50 ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row.operation:<20} {row.image:<18} {row.boxyard.n:>4}  "
            f"{_triple(row.raw.percentiles(), '.1f'):>19}  "
            f"{_triple(row.boxyard.percentiles(), '.1f'):>22}  "
            f"{_triple(row.boxyard.ratios_to(row.raw), '.2f'):>14}  "
            f"{row.boxyard.percentile(50) - row.raw.percentile(50):>+7.1f}"
        )
    print()


def print_breakdown(sections: list[Section]) -> None:
    for section in sections:
        if section.kind != "exec":
            continue
        base = section.stats["raw argv"]
        print(f"Exec breakdown, {section.image} (ratios against {EXEC_VARIANTS['raw argv']})")
        for name, description in EXEC_VARIANTS.items():
            stats = section.stats[name]
            print(
                f"  {description:<62} {_triple(stats.percentiles(), '.1f'):>17} ms  "
                f"x {_triple(stats.ratios_to(base), '.2f')}"
            )
        print()


def write_json(
    path: Path, env: dict[str, Any], config: dict[str, Any], sections: list[Section]
) -> None:
    payload = {
        "environment": env,
        "config": config,
        "sections": [
            {
                "kind": section.kind,
                "image": section.image,
                "variants": {name: stats.summary() for name, stats in section.stats.items()},
            }
            for section in sections
        ],
        "ratios_boxyard_over_raw": [
            {
                "operation": row.operation,
                "image": row.image,
                **dict(
                    zip(
                        ("p50", "p90", "p99"), _rounded(row.boxyard.ratios_to(row.raw)), strict=True
                    )
                ),
            }
            for row in comparisons(sections)
        ],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def _rounded(values: tuple[float, ...]) -> list[float]:
    return [round(value, 3) for value in values]


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-open", type=int, default=30, help="measured opens per variant (30)")
    parser.add_argument("--n-exec", type=int, default=100, help="measured execs per variant (100)")
    parser.add_argument("--warmup-open", type=int, default=2, help="discarded open rounds (2)")
    parser.add_argument("--warmup-exec", type=int, default=5, help="discarded exec rounds (5)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"image measured ({DEFAULT_IMAGE})")
    parser.add_argument(
        "--extra-exec-image",
        default=EXTRA_EXEC_IMAGE,
        help=f"second image for the exec comparison, when present ({EXTRA_EXEC_IMAGE}; '' skips)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    deployment = f"bench-{uuid.uuid4().hex[:8]}"
    data_dir = Path(tempfile.mkdtemp(prefix="boxyard-bench-"))
    configure_django(data_dir, deployment)

    import docker
    import docker.utils
    from django.conf import settings

    from sandboxes.services import Actor

    api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
    env = environment(api)
    print_environment(env)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    config = {key: str(v) if isinstance(v, Path) else v for key, v in vars(args).items()}
    config |= {"seed": seed, "deployment": deployment}

    try:
        user = settings.BOXYARD_SANDBOX_USER
        raw = RawDocker(api, deployment, pipeline_for(args.image), user)
        bench = Bench(raw=raw, actor=Actor("bot", "bench"), rng=random.Random(seed))
        sections = run_all(bench, args)
    finally:
        containers, volumes = remove_deployment(api, deployment)
        shutil.rmtree(data_dir, ignore_errors=True)
        print(
            f"cleanup: removed {containers} containers, {volumes} volumes ({deployment})\n",
            file=sys.stderr,
        )

    print_results(comparisons(sections))
    print_breakdown(sections)
    if args.json:
        write_json(args.json, env, config, sections)
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
