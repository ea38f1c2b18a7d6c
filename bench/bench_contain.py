#!/usr/bin/env python
"""Containment, measured: what a hostile sandbox costs its neighbours and the host.

    .venv/bin/python bench/bench_contain.py [--n 200] [--rounds 5] [--kills 30] [--json PATH]
                                            [--skip-rss] [--skip-kills]

Measured, all in one run:
- a neighbour sandbox's `true` exec (through Boxyard's services, as bench_core measures it),
  p50 and p99, alone and while the sandbox beside it runs each bomb: a background fork bomb,
  a memory bomb, a CPU spin, a /workspace fill, a /tmp fill and an output flood, each against
  a baseline measured just before it; target: p99 under 2x the baseline's;
- writing 512 MiB to /workspace (`dd … conv=fsync`) in a Boxyard sandbox, on its disk with
  the quota, against the same write in a raw docker-py container on a plain named volume
  (same image, same hardening), interleaved; target: at least 0.8x;
- the time from `docker kill` to the sandbox's row saying `lost` (`_events_lost.py`, a served
  Boxyard); target: at most 1 s;
- the server's RSS before, at the peak of, and 60 s after 200 MB output floods and 16 MiB file
  transfers (`_server_rss.py`, a served Boxyard); target: back under 300 MB within 60 s.

Nothing is asserted: this measures, and prints PASS or FAIL against each target.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import (
    DEFAULT_IMAGE,
    RawDocker,
    Stats,
    configure_django,
    environment,
    print_environment,
    remove_deployment,
)

WRITE_MIB = 512
# Each bomb runs in the background in the attacked sandbox while the neighbour is measured.
BOMBS = {
    "fork bomb": "bomb(){ bomb | bomb & }; bomb; sleep 600",
    "memory bomb": "while :; do sh -c 'x=a; while :; do x=$x$x; done'; done",
    "CPU spin": "while :; do :; done",
    "/workspace fill": "while :; do dd if=/dev/zero of=/workspace/fill bs=1M count=4096 2>/dev/null; rm -f /workspace/fill; done",
    "/tmp fill": "while :; do dd if=/dev/zero of=/tmp/fill bs=1M count=4096 2>/dev/null; rm -f /tmp/fill; done",
    "output flood": "while :; do cat /dev/zero | head -c 100000000 | tr '\\0' a; done",
}


# The same floods in a raw docker-py container (same image and hardening, no Boxyard): what the
# machine itself does to a neighbour, for comparison.
RAW_BOMBS = {
    "output flood, raw container": BOMBS["output flood"],
    "CPU spin, raw container": BOMBS["CPU spin"],
}


def neighbour_latency(n: int, raw: RawDocker) -> dict[str, Any]:
    from pipelines.models import Pipeline
    from sandboxes import services
    from sandboxes.models import Sandbox
    from sandboxes.services import Actor

    actor = Actor("bot", "bench")
    attacked_pipeline = Pipeline.objects.create(
        slug="attacked",
        image=DEFAULT_IMAGE,
        pids_limit=128,
        memory_mb=128,
        workspace_mb=256,
        tmp_mb=64,
        cpus=1.0,
    )
    neighbour_pipeline = Pipeline.objects.create(slug="neighbour", image=DEFAULT_IMAGE)
    attacked = services.open_sandbox(
        attacked_pipeline, {"launcher_type": "bench", "launcher_id": "a"}, actor
    ).sandbox
    neighbour = services.open_sandbox(
        neighbour_pipeline, {"launcher_type": "bench", "launcher_id": "n"}, actor
    ).sandbox

    def measure(label: str) -> Stats:
        stats = Stats(label)
        request = services.clean_request(neighbour, cmd=["true"], timeout_seconds=30)
        for _ in range(10):  # warm-up
            services.run_exec(neighbour, request, actor)
        for _ in range(n):
            started = time.perf_counter()
            record = services.run_exec(neighbour, request, actor)
            stats.add(time.perf_counter() - started)
            if record.exit_code != 0:
                raise RuntimeError(f"the neighbour's true failed during {label}: {record.error}")
        return stats

    results: dict[str, Any] = {}
    for name, script in BOMBS.items():
        # Its own baseline, just before: the machine's state drifts over minutes.
        baseline = measure(f"baseline before {name}")
        attacked = Sandbox.objects.select_related("pipeline").get(pk=attacked.pk)
        bomb = services.run_exec(
            attacked,
            services.clean_request(attacked, cmd=script, background=True, timeout_seconds=600),
            actor,
        )
        time.sleep(2)  # the bomb reaches its limit
        during = measure(name)
        services.kill_exec(bomb, actor)
        services.reset_sandbox(attacked, actor, reason="benchmark")
        results[name] = {
            **during.summary(),
            "baseline": baseline.summary(),
            "p50_ratio": round(during.percentile(50) / baseline.percentile(50), 2),
            "p99_ratio": round(during.percentile(99) / baseline.percentile(99), 2),
        }
        print(
            f"  {name}: p50 {during.percentile(50):.1f} ms, p99 {during.percentile(99):.1f} ms "
            f"({results[name]['p99_ratio']:.2f}x the p99 of {baseline.percentile(99):.1f} ms "
            "just before)",
            file=sys.stderr,
        )
    for name, script in RAW_BOMBS.items():
        baseline = measure(f"baseline before {name}")
        container, volume = raw.create_and_start(DEFAULT_IMAGE)
        try:
            created = raw.api.exec_create(container, ["sh", "-c", script])
            raw.api.exec_start(created["Id"], detach=True)
            time.sleep(2)
            during = measure(name)
        finally:
            raw.remove(container, volume)
        results[name] = {
            **during.summary(),
            "baseline": baseline.summary(),
            "p50_ratio": round(during.percentile(50) / baseline.percentile(50), 2),
            "p99_ratio": round(during.percentile(99) / baseline.percentile(99), 2),
        }
    return results


def write_throughput(rounds: int, raw: RawDocker) -> dict[str, Any]:
    """MiB/s of a 512 MiB write with fsync: on a Boxyard workspace (its disk, with the quota)
    and on a raw container's plain named volume, alternately."""
    from pipelines.models import Pipeline
    from sandboxes import services
    from sandboxes.services import Actor

    actor = Actor("bot", "bench")
    pipeline = Pipeline.objects.create(slug="writer", image=DEFAULT_IMAGE, workspace_mb=2048)
    sandbox = services.open_sandbox(
        pipeline, {"launcher_type": "bench", "launcher_id": "w"}, actor
    ).sandbox
    raw_container, raw_volume = raw.create_and_start(DEFAULT_IMAGE)
    write = f"dd if=/dev/zero of=/workspace/w bs=1M count={WRITE_MIB} conv=fsync 2>&1; rm -f /workspace/w"
    figures: dict[str, list[float]] = {"boxyard": [], "raw": []}
    try:
        for _ in range(rounds + 1):  # the first round warms both up and is discarded
            for side in ("boxyard", "raw"):
                started = time.perf_counter()
                if side == "boxyard":
                    request = services.clean_request(sandbox, cmd=write, timeout_seconds=600)
                    output = services.run_exec(sandbox, request, actor).stdout
                else:
                    created = raw.api.exec_create(raw_container, ["sh", "-c", write])
                    output = raw.api.exec_start(created["Id"]).decode()
                seconds = time.perf_counter() - started
                if f"{WRITE_MIB}+0 records out" not in output:
                    raise RuntimeError(f"the {side} write failed: {output[-300:]}")
                figures[side].append(WRITE_MIB / seconds)
    finally:
        raw.remove(raw_container, raw_volume)
    boxyard = sorted(figures["boxyard"][1:])
    plain = sorted(figures["raw"][1:])

    def median(values: list[float]) -> float:
        return values[len(values) // 2]

    return {
        "mib": WRITE_MIB,
        "rounds": rounds,
        "boxyard_mib_s": [round(v, 1) for v in figures["boxyard"][1:]],
        "raw_mib_s": [round(v, 1) for v in figures["raw"][1:]],
        "boxyard_median": round(median(boxyard), 1),
        "raw_median": round(median(plain), 1),
        "ratio": round(median(boxyard) / median(plain), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="neighbour execs per phase (200)")
    parser.add_argument("--rounds", type=int, default=5, help="write rounds per side (5)")
    parser.add_argument("--kills", type=int, default=30, help="docker kills timed (30)")
    parser.add_argument("--skip-rss", action="store_true", help="leave out the server RSS profile")
    parser.add_argument("--skip-kills", action="store_true", help="leave out kill → lost")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)

    deployment = f"bench-contain-{uuid.uuid4().hex[:8]}"
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="boxyard-bench-contain-") as data:
        configure_django(Path(data), deployment)
        import docker

        from sandboxes.runtime.agent import agent_build

        if agent_build() is None:
            print("the agent is not built: run bin/setup first", file=sys.stderr)
            return 1
        api = docker.APIClient(version="auto", timeout=600)
        results["environment"] = environment(api)
        print_environment(results["environment"], "Boxyard containment benchmark")
        from django.conf import settings

        raw = RawDocker(api, deployment, _profile(), settings.BOXYARD_SANDBOX_USER)
        try:
            print("neighbour latency, alone and beside each bomb", file=sys.stderr)
            results["neighbour"] = neighbour_latency(args.n, raw)
            print("workspace write throughput", file=sys.stderr)
            results["write"] = write_throughput(args.rounds, raw)
        finally:
            remove_deployment(api, deployment)
    if not args.skip_kills:
        from _events_lost import kill_to_lost_seconds

        print("docker kill → lost", file=sys.stderr)
        kills = Stats("kill to lost")
        for seconds in kill_to_lost_seconds(args.kills):
            kills.add(seconds)
        results["kill_to_lost"] = kills.summary()
    if not args.skip_rss:
        from _server_rss import server_rss_profile

        print("server RSS across floods and transfers", file=sys.stderr)
        results["server_rss"] = server_rss_profile()
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _profile() -> Any:
    from pipelines.models import Pipeline

    return Pipeline(slug="raw", image=DEFAULT_IMAGE)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(results: dict[str, Any]) -> None:
    neighbour = results["neighbour"]
    print(
        f"Neighbour `true` exec, n={neighbour[next(iter(BOMBS))]['n']} per phase; each bomb "
        "against a baseline measured just before it"
    )
    print(
        f"{'beside':<28} {'base p50':>8} {'base p99':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'p50 x':>6} {'p99 x':>6}  target p99 < 2x"
    )
    for name in [*BOMBS, *RAW_BOMBS]:
        row, base = neighbour[name], neighbour[name]["baseline"]
        print(
            f"{name:<28} {base['p50_ms']:>8.1f} {base['p99_ms']:>8.1f} {row['p50_ms']:>8.1f} "
            f"{row['p99_ms']:>8.1f} {row['p50_ratio']:>6.2f} {row['p99_ratio']:>6.2f}  "
            f"{verdict(row['p99_ratio'] < 2)}"
        )
    write = results["write"]
    print(
        f"\n/workspace write, {write['mib']} MiB with fsync, median of {write['rounds']}: "
        f"Boxyard (disk, quota) {write['boxyard_median']} MiB/s, raw (plain volume) "
        f"{write['raw_median']} MiB/s, {write['ratio']:.2f}x  target >= 0.8x: {verdict(write['ratio'] >= 0.8)}"
    )
    if "kill_to_lost" in results:
        kills = results["kill_to_lost"]
        print(
            f"\ndocker kill → lost, n={kills['n']}: p50 {kills['p50_ms']:.0f} ms, p99 "
            f"{kills['p99_ms']:.0f} ms, max {kills['max_ms']:.0f} ms  target <= 1 s: "
            f"{verdict(kills['max_ms'] <= 1000)}"
        )
    if "server_rss" in results:
        rss = results["server_rss"]
        print(
            f"\nserver RSS: before {rss['before_mb']} MB, peak {rss['peak_mb']} MB, after 60 s "
            f"{rss['final_mb']} MB  target < 300 MB within 60 s: "
            f"{verdict(rss['under_300_within_s'] is not None)}"
        )
        print("  " + ", ".join(f"+{s} s {mb:.0f} MB" for s, mb in rss["after_mb"]))


if __name__ == "__main__":
    sys.exit(main())
