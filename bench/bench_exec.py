#!/usr/bin/env python
"""The exec engine over HTTP to a real server: sessions, one-shot and concurrency, side by side
with raw docker-py.

A sandbox runs its commands through an in-sandbox agent over one long-lived channel: a
command in a shell session (`POST /api/v1/sandboxes/{id}/exec {"cmd": "true"}`, or
`{"cmd": ["true"]}` for argv) is a line written on that channel, with no engine exec per
command; `{"cmd": ["true"], "fresh": true}` is the one-shot path, a new engine exec per
command. The engine work a careful docker-py user would do instead is `exec_run(["true"])`
(`exec_create` + `exec_start` + `exec_inspect`) on a running container of the same image.
All are measured in the same run, interleaved (each round runs every variant once, in a new
random order; see `bench_core.py`), with `GET /healthz` (a plain Django view: HTTP and ASGI
only) and `GET /api/v1/sandboxes/{id}` (the API's path without an engine call) as floors.
Each exec answer's `duration_ms`, the server's own measure of the command inside the sandbox,
is reported alongside, so the HTTP round trip can be split into the command and the rest.

    .venv/bin/python bench/bench_exec.py [--n 200] [--warmup 20] [--image IMAGE] [--json PATH]

Measured separately:
- the server's CPU per request of each API variant: 200 requests sent one after another, the
  server process's user + system CPU (from /proc) before and after;
- the first exec of a new sandbox: a sandbox opened for a scope never used before, then its
  first `{"cmd": "true"}` timed (this includes opening the channel to the agent and starting
  the default session's shell), interleaved with raw docker-py's first `exec_run(["true"])`
  in a container it has just started;
- concurrency: 100 foreground `sleep 5` execs sent at once from 100 threads (one httpx client
  allowing 110 connections), one per session in 4 sandboxes of 25 sessions each (the sessions
  of a sandbox run in parallel; the commands of one session run one after another). Reported:
  the wall time until the last one answers; when each one started in its shell (it first
  echoes the kernel's uptime with a shell builtin, a clock the host and the containers share);
  and, from about 1 s after they were sent until they end, the latency of a quick `true` in
  the default session of a fifth sandbox. The channels to the five agents are opened (one
  `true` each) before the clock starts; the 100 sessions' shells start at their first command.

The issue's targets are checked and printed as PASS or FAIL lines; they never change the exit
status: reused session p50 <= max(10 ms, 0.5 x raw p50); one-shot p50 <= 1.2 x raw p50 + 5 ms;
the 100 concurrent `sleep 5` all done within 7 s.

The server is uvicorn serving `config.asgi:application` on 127.0.0.1 at a free port, with a
throw-away data directory (SQLite), the deployment label `bench-<random>` and its own pipeline
and token, set up as in `bench_api.py` (whose helpers this reuses). At the end the server is
stopped and every container and volume carrying that label is removed, even on failure.
Nothing is asserted about the times: this measures, it does not judge.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import (  # bench/ is not a package: found through sys.path above
    PIPELINE,
    prepare,
    served,
    throwaway,
)
from bench_core import (
    DEFAULT_IMAGE,
    RawDocker,
    Stats,
    Variant,
    run_interleaved,
    timed,
)

VARIANTS = {
    "raw": 'docker-py exec_run(["true"])',
    "api session": 'POST exec {"cmd": "true"} (default session, reused)',
    "api session argv": 'POST exec {"cmd": ["true"]} (through the agent)',
    "api one-shot": 'POST exec {"cmd": ["true"], "fresh": true}',
    "api get": "GET /api/v1/sandboxes/{id} (no engine call)",
    "healthz": "GET /healthz (plain Django view)",
}
API_EXECS = ("api session", "api session argv", "api one-shot")

# The concurrency test: sandboxes x sessions foreground `sleep SLEEP_SECONDS` execs at once.
# A pipeline allows 32 sessions per sandbox besides the default one, 50 live sandboxes, 256
# pids and 1024 MiB by default: 25 sleeping shells per sandbox and 6 sandboxes at once fit.
CONCURRENT_SANDBOXES = 4
SESSIONS_PER_SANDBOX = 25
SLEEP_SECONDS = 5
CONCURRENCY_TARGET_SECONDS = 7.0
PROBE_START_SECONDS = 1.0
PROBE_PAUSE_SECONDS = 0.1
# Each sleep first prints the kernel's uptime (a shell builtin reading /proc/uptime, no new
# process; resolution 10 ms), to tell when it started from when it was sent.
STAMP = "read up _ </proc/uptime; echo $up; "


# --- the API client ---------------------------------------------------------------------------


@dataclass
class Api:
    """The bench pipeline's calls over one keep-alive httpx client (shared by the threads)."""

    client: Any
    tail: Callable[[], str]
    opened: list[str] = field(default_factory=list)

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.client.request(method, path, **kwargs)
        if response.status_code != 200:
            raise RuntimeError(f"{method} {path} answered {response.status_code}: {response.text}")
        answer: dict[str, Any] = response.json()
        return answer

    def open(self, launcher_id: str) -> str:
        variables = {"launcher_type": "bench", "launcher_id": launcher_id}
        body = self.call(
            "POST", "/api/v1/sandboxes/open", json={"pipeline": PIPELINE, "variables": variables}
        )
        if body.get("status") != "running":
            raise RuntimeError(f"open gave a {body.get('status')} sandbox: {body}\n{self.tail()}")
        self.opened.append(body["sandbox_id"])
        return str(body["sandbox_id"])

    def close(self, sandbox_id: str) -> None:
        self.call("DELETE", f"/api/v1/sandboxes/{sandbox_id}", params={"delete_workspace": "true"})
        self.opened.remove(sandbox_id)

    def close_all(self) -> None:
        """Best effort on the way out; whatever is left is removed by the deployment label."""
        for sandbox_id in list(self.opened):
            try:
                self.close(sandbox_id)
            except Exception as error:
                print(f"could not close sandbox {sandbox_id}: {error}", file=sys.stderr)

    def exec(self, sandbox_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Run a command; one that does not complete with exit code 0 stops the run."""
        answer = self.call("POST", f"/api/v1/sandboxes/{sandbox_id}/exec", json=body)
        if answer.get("status") != "completed" or answer.get("exit_code") != 0:
            raise RuntimeError(f"exec {body} did not succeed: {answer}")
        return answer


# --- 1-5: the interleaved rounds ----------------------------------------------------------------


def variants(
    api: Api, sandbox_id: str, raw: RawDocker, container: str, server_ms: dict[str, list[float]]
) -> dict[str, Variant]:
    def api_exec(name: str, body: dict[str, Any]) -> Variant:
        def run() -> float:
            seconds, answer = timed(lambda: api.exec(sandbox_id, body))
            server_ms[name].append(float(answer["duration_ms"]))
            return seconds

        return run

    def raw_exec() -> float:
        seconds, exit_code = timed(lambda: raw.exec_run(container, ["true"]))
        if exit_code != 0:
            raise RuntimeError(f"the raw exec exited {exit_code}")
        return seconds

    def getter(path: str) -> Variant:
        def get() -> float:
            seconds, _ = timed(lambda: api.call("GET", path))
            return seconds

        return get

    return {
        "raw": raw_exec,
        "api session": api_exec("api session", {"cmd": "true"}),
        "api session argv": api_exec("api session argv", {"cmd": ["true"]}),
        "api one-shot": api_exec("api one-shot", {"cmd": ["true"], "fresh": True}),
        "api get": getter(f"/api/v1/sandboxes/{sandbox_id}"),
        "healthz": getter("/healthz"),
    }


def measure_rounds(
    args: argparse.Namespace, api: Api, raw: RawDocker, rng: random.Random
) -> tuple[dict[str, Stats], dict[str, Stats]]:
    """(figures per variant, the server's duration_ms per API exec variant), measured rounds."""
    sandbox_id = api.open("rounds")
    container, volume = raw.create_and_start(args.image)
    server_ms: dict[str, list[float]] = {name: [] for name in API_EXECS}
    try:
        stats = run_interleaved(
            variants(api, sandbox_id, raw, container, server_ms),
            args.n,
            args.warmup,
            rng,
            "exec rounds",
        )
    finally:
        raw.remove(container, volume)
        api.close(sandbox_id)
    # Every variant ran once per round, warm-up rounds included: keep the measured rounds.
    server = {name: Stats(name, samples[args.warmup :]) for name, samples in server_ms.items()}
    return stats, server


# --- the server's CPU per request -------------------------------------------------------------

CPU_REQUESTS = 200


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_server_cpu(api: Api, server_pid: int) -> dict[str, float]:
    """CPU the server spends per request of each API variant (ms), over CPU_REQUESTS sent one
    after another: the resource a burst of requests contends for."""
    sandbox_id = api.open("cpu")
    requests: dict[str, Callable[[], object]] = {
        "api session": lambda: api.exec(sandbox_id, {"cmd": "true"}),
        "api session argv": lambda: api.exec(sandbox_id, {"cmd": ["true"]}),
        "api one-shot": lambda: api.exec(sandbox_id, {"cmd": ["true"], "fresh": True}),
        "api get": lambda: api.call("GET", f"/api/v1/sandboxes/{sandbox_id}"),
        "healthz": lambda: api.call("GET", "/healthz"),
    }
    per_request: dict[str, float] = {}
    try:
        for name, request in requests.items():
            for _ in range(10):  # warm
                request()
            before = process_cpu_seconds(server_pid)
            for _ in range(CPU_REQUESTS):
                request()
            per_request[name] = (process_cpu_seconds(server_pid) - before) * 1000 / CPU_REQUESTS
    finally:
        api.close(sandbox_id)
    return per_request


# --- 6: the first exec of a new sandbox ---------------------------------------------------------


def measure_first_exec(
    args: argparse.Namespace, api: Api, raw: RawDocker, rng: random.Random
) -> tuple[dict[str, Stats], Stats]:
    """First exec in a just-opened sandbox vs in a just-started raw container (open untimed)."""
    keys = iter(range(1_000_000))
    server_ms: list[float] = []

    def api_first() -> float:
        sandbox_id = api.open(f"first-{next(keys)}")
        try:
            seconds, answer = timed(lambda: api.exec(sandbox_id, {"cmd": "true"}))
            server_ms.append(float(answer["duration_ms"]))
        finally:
            api.close(sandbox_id)
        return seconds

    def raw_first() -> float:
        container, volume = raw.create_and_start(args.image)
        try:
            seconds, exit_code = timed(lambda: raw.exec_run(container, ["true"]))
        finally:
            raw.remove(container, volume)
        if exit_code != 0:
            raise RuntimeError(f"the raw exec exited {exit_code}")
        return seconds

    stats = run_interleaved(
        {"raw first": raw_first, "api first": api_first},
        args.n_first,
        args.warmup_first,
        rng,
        "first exec",
    )
    return stats, Stats("api first, server", server_ms[args.warmup_first :])


# --- 7: concurrency -----------------------------------------------------------------------------


@dataclass
class Concurrency:
    execs: int
    wall_seconds: float
    latency: Stats  # each sleep's HTTP round trip
    server: Stats  # each sleep's duration_ms
    probe: Stats  # quick `true` execs in another sandbox while the sleeps run
    probe_server: Stats
    start_delay: Stats  # from sending the sleeps to each one starting in its shell
    failures: list[str]

    def summary(self) -> dict[str, Any]:
        return {
            "execs": self.execs,
            "wall_ms": round(self.wall_seconds * 1000, 1),
            "failures": self.failures,
            "sleep_round_trip": self.latency.summary(),
            "sleep_server_duration": self.server.summary(),
            "probe_round_trip": self.probe.summary(),
            "probe_server_duration": self.probe_server.summary(),
            "sleep_start_delay": self.start_delay.summary(),
        }


def measure_concurrency(api: Api) -> Concurrency:
    sandboxes = [api.open(f"conc-{index}") for index in range(CONCURRENT_SANDBOXES)]
    probe_sandbox = api.open("probe")
    sessions = [f"s{index + 1}" for index in range(SESSIONS_PER_SANDBOX)]
    for sandbox_id in [*sandboxes, probe_sandbox]:
        api.exec(sandbox_id, {"cmd": "true"})  # the channel to the agent is open before it starts
        for name in sessions if sandbox_id != probe_sandbox else []:
            api.call("POST", f"/api/v1/sandboxes/{sandbox_id}/sessions", json={"name": name})
    jobs = [(sandbox_id, name) for sandbox_id in sandboxes for name in sessions]

    latency, server = Stats("sleep round trip"), Stats("sleep duration_ms")
    failures: list[str] = []
    lock = threading.Lock()

    def sleep(sandbox_id: str, session: str) -> None:
        body = {"cmd": f"{STAMP}sleep {SLEEP_SECONDS}", "session": session, "timeout_seconds": 30}
        seconds, answer = timed(lambda: api.exec(sandbox_id, body))
        with lock:
            latency.add(seconds)
            server.samples_ms.append(float(answer["duration_ms"]))
            started.append(float(answer["stdout"].split()[0]))

    probe, probe_server = Stats("probe round trip"), Stats("probe duration_ms")
    started: list[float] = []  # the kernel's uptime when each sleep started, as its shell read it
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="sleep") as pool:
        start = time.perf_counter()
        launched = _uptime()
        futures = [pool.submit(sleep, *job) for job in jobs]
        # The probe runs while every sleep is still running (they end about SLEEP_SECONDS in).
        time.sleep(PROBE_START_SECONDS)
        probe_until = start + SLEEP_SECONDS - 0.5
        while time.perf_counter() < probe_until and not all(f.done() for f in futures):
            seconds, answer = timed(lambda: api.exec(probe_sandbox, {"cmd": "true"}))
            probe.add(seconds)
            probe_server.samples_ms.append(float(answer["duration_ms"]))
            time.sleep(PROBE_PAUSE_SECONDS)
        for future in as_completed(futures):
            if (error := future.exception()) is not None:
                failures.append(repr(error)[:300])
        wall = time.perf_counter() - start
    for sandbox_id in [*sandboxes, probe_sandbox]:
        api.close(sandbox_id)
    start_delay = Stats("start delay", [(value - launched) * 1000 for value in started])
    return Concurrency(len(jobs), wall, latency, server, probe, probe_server, start_delay, failures)


def _uptime() -> float:
    """The kernel's uptime: containers share the host's kernel, so they read the same clock."""
    return float(Path("/proc/uptime").read_text().split()[0])


# --- targets -----------------------------------------------------------------------------------


def targets(stats: dict[str, Stats], concurrency: Concurrency | None) -> list[dict[str, Any]]:
    raw_p50 = stats["raw"].percentile(50)
    session_limit = max(10.0, 0.5 * raw_p50)
    checks = [
        (
            f"{name} p50 <= max(10 ms, 0.5 x raw p50)",
            stats[name].percentile(50),
            session_limit,
            "ms",
        )
        for name in ("api session", "api session argv")
    ]
    checks.append(
        (
            "api one-shot p50 <= 1.2 x raw p50 + 5 ms",
            stats["api one-shot"].percentile(50),
            1.2 * raw_p50 + 5,
            "ms",
        )
    )
    if concurrency is not None:
        wall = concurrency.wall_seconds if not concurrency.failures else float("inf")
        label = (
            f"{concurrency.execs} concurrent sleep {SLEEP_SECONDS} done within "
            f"{CONCURRENCY_TARGET_SECONDS:.0f} s"
        )
        checks.append((label, wall, CONCURRENCY_TARGET_SECONDS, "s"))
    return [
        {
            "target": label,
            "value": round(value, 3),
            "limit": round(limit, 3),
            "unit": unit,
            "pass": value <= limit,
        }
        for label, value, limit, unit in checks
    ]


# --- reporting ----------------------------------------------------------------------------------


def _triple(values: tuple[float, ...], fmt: str) -> str:
    return "/".join(format(value, fmt) for value in values)


def print_rounds(stats: dict[str, Stats], server: dict[str, Stats], image: str) -> None:
    raw = stats["raw"]
    print(f"exec `true` on {image}, n={raw.n} per variant")
    header = (
        f"  {'variant':<54} {'p50/p90/p99 ms':>17}  {'x raw p50/p90/p99':>17}  "
        f"{'server p50 ms':>13}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, description in VARIANTS.items():
        figures = stats[name]
        server_p50 = f"{server[name].percentile(50):.1f}" if name in server else ""
        print(
            f"  {description:<54} {_triple(figures.percentiles(), '.1f'):>17}  "
            f"{_triple(figures.ratios_to(raw), '.2f'):>17}  {server_p50:>13}"
        )
    print()


def print_cpu(cpu: dict[str, float]) -> None:
    print(f"server CPU per request ({CPU_REQUESTS} sent one after another)")
    for name, milliseconds in cpu.items():
        print(f"  {VARIANTS[name]:<54} {milliseconds:>6.2f} ms")
    print()


def print_first(first: dict[str, Stats], first_server: Stats, raw_warm: Stats) -> None:
    api, raw = first["api first"], first["raw first"]
    print(f"first exec of a new sandbox, n={api.n}")
    print(
        f'  api first {{"cmd": "true"}}      {_triple(api.percentiles(), ".1f"):>17} ms'
        f"  (server duration_ms p50 {first_server.percentile(50):.1f})"
    )
    print(f'  raw first exec_run(["true"])    {_triple(raw.percentiles(), ".1f"):>17} ms')
    print(f"  raw exec_run, warm (rounds)     {_triple(raw_warm.percentiles(), '.1f'):>17} ms")
    print()


def print_concurrency(result: Concurrency) -> None:
    print(
        f"concurrency: {result.execs} x sleep {SLEEP_SECONDS} in {CONCURRENT_SANDBOXES} "
        f"sandboxes x {SESSIONS_PER_SANDBOX} sessions"
    )
    print(f"  wall time until the last answered   {result.wall_seconds * 1000:.0f} ms")
    if result.latency.n:
        trip, server, delay = result.latency, result.server.samples_ms, result.start_delay
        print(
            f"  each sleep's round trip min/p50/max  {min(trip.samples_ms):.0f}/"
            f"{trip.percentile(50):.0f}/{max(trip.samples_ms):.0f} ms; "
            f"duration_ms min/max {min(server):.0f}/{max(server):.0f}"
        )
        print(
            f"  started in their shells after        min/p50/p90/max {min(delay.samples_ms):.0f}/"
            f"{delay.percentile(50):.0f}/{delay.percentile(90):.0f}/"
            f"{max(delay.samples_ms):.0f} ms"
        )
    if result.probe.n:
        print(
            f"  quick `true` elsewhere meanwhile     n={result.probe.n}, p50 "
            f"{result.probe.percentile(50):.1f} ms, max {max(result.probe.samples_ms):.1f} ms "
            f"(server p50 {result.probe_server.percentile(50):.1f} ms)"
        )
    for failure in result.failures:
        print(f"  failed: {failure}")
    print()


def print_targets(checks: list[dict[str, Any]]) -> None:
    print("targets (reported only; they never fail the run)")
    for check in checks:
        verdict = "PASS" if check["pass"] else "FAIL"
        print(
            f"  {verdict}  {check['target']}: {check['value']:.1f} {check['unit']} "
            f"(limit {check['limit']:.1f} {check['unit']})"
        )
    print()


def _rounded(values: tuple[float, ...]) -> list[float]:
    return [round(value, 3) for value in values]


def write_json(
    path: Path,
    env: dict[str, Any],
    config: dict[str, Any],
    stats: dict[str, Stats],
    server: dict[str, Stats],
    cpu: dict[str, float],
    first: dict[str, Stats],
    first_server: Stats,
    concurrency: Concurrency | None,
    checks: list[dict[str, Any]],
) -> None:
    raw = stats["raw"]
    payload = {
        "environment": env,
        "config": config,
        "variants": {
            name: {
                "description": VARIANTS[name],
                **figures.summary(),
                "over_raw": dict(
                    zip(("p50", "p90", "p99"), _rounded(figures.ratios_to(raw)), strict=True)
                ),
            }
            for name, figures in stats.items()
        },
        "server_duration": {name: figures.summary() for name, figures in server.items()},
        "server_cpu_ms_per_request": {name: round(value, 3) for name, value in cpu.items()},
        "first_exec": {
            **{name: figures.summary() for name, figures in first.items()},
            "api first, server duration": first_server.summary(),
        },
        "concurrency": concurrency.summary() if concurrency else None,
        "targets": checks,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


# --- main ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Any]:
    import httpx

    env, token, raw, env_info = prepare(
        args.image,
        deployment,
        data_dir,
        "Boxyard exec engine benchmark: sessions, one-shot, concurrency",
    )
    # 100 foreground commands from one token at once: past a pipeline's default cap of long
    # calls (64); this measures the engine's concurrency, not the cap.
    env["BOXYARD_LONG_CALLS_PER_PIPELINE"] = "128"
    rng = random.Random(args.seed)
    concurrency = None
    with served(env, data_dir) as server:
        limits = httpx.Limits(max_connections=110, max_keepalive_connections=110)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(
            base_url=server.base_url, headers=headers, timeout=120, limits=limits
        ) as client:
            api = Api(client, server.tail)
            try:
                stats, server_ms = measure_rounds(args, api, raw, rng)
                cpu = measure_server_cpu(api, server.process.pid)
                first, first_server = measure_first_exec(args, api, raw, rng)
                if not args.skip_concurrency:
                    print("  concurrency: 100 x sleep 5 ...", file=sys.stderr)
                    concurrency = measure_concurrency(api)
            finally:
                api.close_all()
    return {
        "env": env_info,
        "stats": stats,
        "server": server_ms,
        "cpu": cpu,
        "first": first,
        "first_server": first_server,
        "concurrency": concurrency,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="measured rounds (200)")
    parser.add_argument("--warmup", type=int, default=20, help="discarded rounds (20)")
    parser.add_argument("--n-first", type=int, default=10, help="measured first execs (10)")
    parser.add_argument(
        "--warmup-first", type=int, default=1, help="discarded first-exec rounds (1)"
    )
    parser.add_argument(
        "--skip-concurrency", action="store_true", help="skip the 100 x sleep 5 test"
    )
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    with throwaway("boxyard-bench-exec-") as (deployment, data_dir):
        result = run(args, deployment, data_dir)

    stats, concurrency = result["stats"], result["concurrency"]
    print_rounds(stats, result["server"], args.image)
    print_cpu(result["cpu"])
    print_first(result["first"], result["first_server"], stats["raw"])
    if concurrency is not None:
        print_concurrency(concurrency)
    checks = targets(stats, concurrency)
    print_targets(checks)
    if args.json:
        config = {key: str(v) if isinstance(v, Path) else v for key, v in vars(args).items()}
        write_json(
            args.json,
            result["env"],
            config | {"deployment": deployment},
            stats,
            result["server"],
            result["cpu"],
            result["first"],
            result["first_server"],
            concurrency,
            checks,
        )
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
