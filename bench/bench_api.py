#!/usr/bin/env python
"""The bot API's exec, over HTTP to a real server, side by side with raw docker-py.

A bot runs a command with `POST /api/v1/sandboxes/{id}/exec {"cmd": ["true"]}` (in the
sandbox's default session, through its agent); what a docker-py user would do instead is
`exec_run(["true"])` (`exec_create` + `exec_start` + `exec_inspect`) on a running container of
the same image. Both are measured in the same run, interleaved (each round runs every variant
once, in a new random order; see `bench_core.py`). `bench_exec.py` goes further (fresh
commands, first execs, concurrency) with these helpers.

    .venv/bin/python bench/bench_api.py [--n 100] [--warmup 10] [--image IMAGE] [--json PATH]

Two more variants place the floor under the API figure: `GET /healthz` (a plain Django view:
HTTP and ASGI only) and `GET /api/v1/sandboxes/{id}` (the same plus django-ninja, token
authentication, the thread pool and two queries, but no engine call). Each exec answer also
carries `duration_ms`, the server's own measure of the command in the sandbox, reported
alongside.

The server is uvicorn serving `config.asgi:application` on 127.0.0.1 at a free port, with a
throw-away data directory (SQLite database), the deployment label `bench-<random>` and its own
pipeline and token (`manage.py migrate`, `manage.py create_pipeline --print-token`). At the end
the server is stopped and every container and volume carrying that label is removed, even on
failure. Nothing is asserted about the times: this measures, it does not judge.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import (  # bench/ is not a package: found through sys.path above
    DEFAULT_IMAGE,
    REPO,
    RawDocker,
    Stats,
    Variant,
    environment,
    remove_deployment,
    run_interleaved,
    timed,
)
from bench_core import print_environment as core_print_environment

PIPELINE = "bench"
SERVER_START_TIMEOUT = 60.0

VARIANTS = {
    "raw": 'docker-py exec_run(["true"])',
    "api": 'POST /api/v1/sandboxes/{id}/exec {"cmd": ["true"]}',
    "api get": "GET /api/v1/sandboxes/{id} (no engine call)",
    "healthz": "GET /healthz (plain Django view)",
}


# --- the server ---------------------------------------------------------------------------------


def server_env(data_dir: Path, deployment: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "BOXYARD_DATA_DIR": str(data_dir),
            "DATABASE_URL": f"sqlite:///{data_dir / 'bench-api.sqlite3'}",
            "BOXYARD_DEPLOYMENT": deployment,
            "BOXYARD_IMAGE_ALLOWLIST": "boxyard/*",
            "BOXYARD_ALLOWED_HOSTS": "127.0.0.1",
            "BOXYARD_LOG_LEVEL": env.get("BOXYARD_LOG_LEVEL", "WARNING"),
            "PYTHONUNBUFFERED": "1",
            # A benchmark's one token calls as fast as it can (bench_tenants.py measures
            # the server with its rate limit).
            "BOXYARD_RATE_LIMIT": "off",
        }
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@contextmanager
def served(
    env: dict[str, str], data_dir: Path, *, embedded_worker: bool = False
) -> Iterator[Server]:
    """The server (`config.serving`) on 127.0.0.1 at a free port; stopped (SIGTERM, then
    SIGKILL) on the way out. With `embedded_worker`, the way `bin/run` serves: `manage.py serve`, whose process also
    runs the Celery worker and scheduler."""
    import httpx

    port = free_port()
    log = data_dir / "server.log"
    if embedded_worker:
        command = [
            sys.executable,
            str(REPO / "manage.py"),
            "serve",
            "--no-build",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "config.serving",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}:\n{server.tail()}")
            try:
                if httpx.get(f"{server.base_url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the server did not answer within {SERVER_START_TIMEOUT:.0f} s:\n{server.tail()}"
                )
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --- the measurement ----------------------------------------------------------------------------


def pipeline_profile(env: dict[str, str]) -> tuple[Any, str]:
    """The bench pipeline's limits and the sandbox user, for the raw container's hardening.

    Read through Django from the server's database (this process only reads it).
    """
    for key in (
        "DJANGO_SETTINGS_MODULE",
        "BOXYARD_DATA_DIR",
        "DATABASE_URL",
        "BOXYARD_DEPLOYMENT",
        "BOXYARD_IMAGE_ALLOWLIST",
        "BOXYARD_ALLOWED_HOSTS",
        "BOXYARD_LOG_LEVEL",
    ):
        os.environ[key] = env[key]
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.conf import settings

    from pipelines.models import Pipeline

    return Pipeline.objects.get(slug=PIPELINE), settings.BOXYARD_SANDBOX_USER


def variants(
    client: Any, sandbox_id: str, raw: RawDocker, container: str, server_exec_ms: list[float]
) -> dict[str, Variant]:
    exec_path = f"/api/v1/sandboxes/{sandbox_id}/exec"

    def api_exec() -> float:
        seconds, response = timed(lambda: client.post(exec_path, json={"cmd": ["true"]}))
        body = response.json()
        if response.status_code != 200 or body.get("exit_code") != 0:
            raise RuntimeError(f"the benchmarked exec failed: {response.status_code} {body}")
        server_exec_ms.append(float(body["duration_ms"]))
        return seconds

    def raw_exec() -> float:
        seconds, exit_code = timed(lambda: raw.exec_run(container, ["true"]))
        if exit_code != 0:
            raise RuntimeError(f"the raw exec exited {exit_code}")
        return seconds

    def getter(path: str) -> Callable[[], float]:
        def get() -> float:
            seconds, response = timed(lambda: client.get(path))
            if response.status_code != 200:
                raise RuntimeError(f"GET {path} answered {response.status_code}")
            return seconds

        return get

    return {
        "raw": raw_exec,
        "api": api_exec,
        "api get": getter(f"/api/v1/sandboxes/{sandbox_id}"),
        "healthz": getter("/healthz"),
    }


def prepare(
    image: str,
    deployment: str,
    data_dir: Path,
    title: str = "Boxyard bot API benchmark: exec over HTTP",
) -> tuple[dict[str, str], str, RawDocker, dict[str, Any]]:
    """The server's database, pipeline and token, the raw baseline with the same profile, and
    the environment (printed): (server env, token, raw docker, environment)."""
    import docker
    import docker.utils
    import httpx

    env = server_env(data_dir, deployment)
    manage(env, "migrate", "--verbosity", "0")
    printed = manage(env, "create_pipeline", PIPELINE, "--image", image, "--print-token")
    token = printed.strip().splitlines()[-1]
    profile, user = pipeline_profile(env)

    api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
    env_info = environment(api)
    env_info["uvicorn"] = _version("uvicorn")
    env_info["httpx"] = httpx.__version__
    print_environment(env_info, title)
    return env, token, RawDocker(api, deployment, profile, user), env_info


def measure(
    args: argparse.Namespace, deployment: str, data_dir: Path
) -> tuple[dict[str, Any], dict[str, Stats], list[float]]:
    """Run the server and the rounds: (environment, figures per variant, server exec ms)."""
    import httpx

    env, token, raw, env_info = prepare(args.image, deployment, data_dir)
    server_exec_ms: list[float] = []
    with served(env, data_dir) as server:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(
            base_url=server.base_url, headers=headers, timeout=120
        ) as client:  # keep-alive
            opened = client.post(
                "/api/v1/sandboxes/open",
                json={
                    "pipeline": PIPELINE,
                    "variables": {"launcher_type": "bench", "launcher_id": "1"},
                },
            )
            if opened.status_code != 200 or opened.json().get("status") != "running":
                raise RuntimeError(
                    f"open failed: {opened.status_code} {opened.text}\n{server.tail()}"
                )
            sandbox_id = opened.json()["sandbox_id"]
            container, volume = raw.create_and_start(args.image)
            try:
                stats = run_interleaved(
                    variants(client, sandbox_id, raw, container, server_exec_ms),
                    args.n,
                    args.warmup,
                    random.Random(args.seed),
                    "exec over the API",
                )
            finally:
                raw.remove(container, volume)
                client.delete(
                    f"/api/v1/sandboxes/{sandbox_id}", params={"delete_workspace": "true"}
                )
    # The API variant ran warm-up rounds too: keep the server's figures of the measured rounds.
    return env_info, stats, server_exec_ms[args.warmup :]


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "?"


# --- reporting ----------------------------------------------------------------------------------


def print_environment(env: dict[str, Any], title: str) -> None:
    core_print_environment(env, title, f", uvicorn {env['uvicorn']}, httpx {env['httpx']}")


def _triple(values: tuple[float, ...], fmt: str) -> str:
    return "/".join(format(value, fmt) for value in values)


def print_results(stats: dict[str, Stats], server_exec: Stats, image: str) -> None:
    raw, api = stats["raw"], stats["api"]
    ratios = api.ratios_to(raw)
    print(f'exec ["true"] on {image}, n={api.n} per variant')
    header = f"  {'variant':<58} {'p50/p90/p99 ms':>19}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, description in VARIANTS.items():
        print(f"  {description:<58} {_triple(stats[name].percentiles(), '.1f'):>19}")
    print(
        f"  {'  of which the command, as the server measured it':<58} "
        f"{_triple(server_exec.percentiles(), '.1f'):>19}"
    )
    print()
    print(f"  API / raw, p50/p90/p99: {_triple(ratios, '.2f')}")
    print(
        f"  API - raw: {api.percentile(50) - raw.percentile(50):+.1f} ms at p50, "
        f"{api.percentile(90) - raw.percentile(90):+.1f} ms at p90, "
        f"{api.percentile(99) - raw.percentile(99):+.1f} ms at p99"
    )
    print()


def write_json(
    path: Path,
    env: dict[str, Any],
    config: dict[str, Any],
    stats: dict[str, Stats],
    server_exec: Stats,
) -> None:
    raw, api = stats["raw"], stats["api"]
    payload = {
        "environment": env,
        "config": config,
        "variants": {
            name: {"description": VARIANTS[name], **s.summary()} for name, s in stats.items()
        },
        "server_exec_duration": server_exec.summary(),
        "api_over_raw": dict(
            zip(("p50", "p90", "p99"), (round(r, 3) for r in api.ratios_to(raw)), strict=True)
        ),
        "api_minus_raw_ms": {
            f"p{p}": round(api.percentile(p) - raw.percentile(p), 3) for p in (50, 90, 99)
        },
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100, help="measured rounds (100)")
    parser.add_argument("--warmup", type=int, default=10, help="discarded rounds (10)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    return parser.parse_args(argv)


@contextmanager
def throwaway(prefix: str) -> Iterator[tuple[str, Path]]:
    """A deployment label and a data directory for one run; afterwards every container and
    volume of that label is removed and the directory deleted, whatever happened."""
    deployment = f"bench-{uuid.uuid4().hex[:8]}"
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    failed = True
    try:
        yield deployment, data_dir
        failed = False
    finally:
        import docker
        import docker.utils

        api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
        containers, volumes = remove_deployment(api, deployment)
        if failed:  # the server's log says why
            print(f"the run failed: its data directory is kept in {data_dir}", file=sys.stderr)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
        print(
            f"cleanup: server stopped; removed {containers} containers, {volumes} volumes ({deployment})\n",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    with throwaway("boxyard-bench-api-") as (deployment, data_dir):
        env_info, stats, server_exec_ms = measure(args, deployment, data_dir)

    server_exec = Stats("server-measured exec", list(server_exec_ms))
    print_results(stats, server_exec, args.image)
    if args.json:
        config = {key: str(v) if isinstance(v, Path) else v for key, v in vars(args).items()}
        write_json(args.json, env_info, config | {"deployment": deployment}, stats, server_exec)
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
