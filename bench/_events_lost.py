#!/usr/bin/env python
"""How soon a sandbox whose container is killed behind Boxyard's back is marked lost.

A served Boxyard (`manage.py serve`, as `bin/run` runs it: uvicorn, the embedded worker and
scheduler, and the engine-event follower, all in one process) on a throw-away data directory
opens sandboxes through the bot API. Each in turn has its container killed with docker-py's
`kill` (what `docker kill` asks of the engine), timed from the call to the moment the server's
database says the sandbox is stopped for reason `lost` (read from this process, read-only,
every millisecond). Beside it, from the same kill: the moment the engine's `die` event reaches
a docker-py `events()` subscriber in this process, what any watcher of the engine could know
at best. The reconciler cannot be the one that marks them: it leaves anything younger than
its grace period (30 s) alone.

    .venv/bin/python bench/_events_lost.py [--samples 30] [--image boxyard/busybox:1] [--json PATH]

`kill_to_lost_seconds(samples)` returns Boxyard's figures (seconds) for `bench_contain.py`;
`kill_to_lost(samples)` returns both series and the environment. Nothing is asserted: this
measures; the target (1 s) is printed as PASS or FAIL.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, manage, served, server_env, throwaway
from bench_core import DEFAULT_IMAGE, Stats, environment

TARGET_SECONDS = 1.0
WARMUP = 2
SAMPLE_TIMEOUT = 30.0
POLL_SECONDS = 0.001


def kill_to_lost_seconds(samples: int, image: str = DEFAULT_IMAGE) -> list[float]:
    """Seconds from `docker kill` of a running sandbox's container to its row saying `lost`,
    with the follower running as in production; `samples` figures (after a short warm-up)."""
    seconds: list[float] = kill_to_lost(samples, image)["boxyard"]
    return seconds


def kill_to_lost(samples: int, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """{"boxyard": [s…], "raw_die_event": [s…], "environment": {…}}, from the same kills."""
    import docker
    import docker.utils
    import httpx

    with throwaway("boxyard-bench-events-") as (deployment, data_dir):
        env = server_env(data_dir, deployment)
        env["BOXYARD_LOG_LEVEL"] = "INFO"  # production's default; the follower says when it reads
        manage(env, "migrate", "--verbosity", "0")
        printed = manage(env, "create_pipeline", PIPELINE, "--image", image, "--print-token")
        token = printed.strip().splitlines()[-1]
        api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
        arrivals = _die_events(api, deployment)
        database = sqlite3.connect(f"file:{data_dir / 'bench-api.sqlite3'}?mode=ro", uri=True)
        boxyard: list[float] = []
        raw: list[float] = []
        with served(env, data_dir, embedded_worker=True) as server:
            client = httpx.Client(
                base_url=f"{server.base_url}/api/v1",
                timeout=120,
                headers={"Authorization": f"Bearer {token}"},
            )
            _wait_following(server.log)
            for index in range(WARMUP + samples):
                lost, died = _one_kill(client, api, database, arrivals, server.tail)
                if index >= WARMUP:
                    boxyard.append(lost)
                    raw.append(died)
            client.close()
        database.close()
        return {"boxyard": boxyard, "raw_die_event": raw, "environment": environment(api)}


def _wait_following(log: Path) -> None:
    """The server logs when its follower reads the engine's stream: the first kill must not
    race the server's start."""
    deadline = time.monotonic() + 60
    while "following the engine's events" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server's follower did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def _die_events(api: Any, deployment: str) -> dict[str, float]:
    """A raw docker-py subscriber: when each container's `die` reached this process."""
    arrivals: dict[str, float] = {}
    stream = api.events(
        decode=True,
        filters={
            "type": ["container"],
            "event": ["die"],
            "label": [f"io.boxyard.deployment={deployment}"],
        },
    )

    def follow() -> None:
        for event in stream:
            arrivals[event.get("id", "")] = time.perf_counter()

    threading.Thread(target=follow, name="raw-docker-events", daemon=True).start()
    return arrivals


def _one_kill(
    client: Any, api: Any, database: sqlite3.Connection, arrivals: dict[str, float], tail: Any
) -> tuple[float, float]:
    """Open a new sandbox, kill its container: (seconds to lost, seconds to the raw event)."""
    variables = {"launcher_type": "bench", "launcher_id": uuid.uuid4().hex[:12]}
    answer = client.post("/sandboxes/open", json={"pipeline": PIPELINE, "variables": variables})
    if answer.status_code != 200:
        raise RuntimeError(f"open: {answer.status_code} {answer.text[:300]}")
    sandbox_id = answer.json()["sandbox_id"]
    [container] = api.containers(filters={"label": [f"io.boxyard.sandbox={sandbox_id}"]})
    row_id = uuid.UUID(sandbox_id).hex  # how Django keeps a UUID in SQLite
    time.sleep(0.2)  # the open's own writes settle
    started = time.perf_counter()
    api.kill(container["Id"])
    while True:
        found = database.execute(
            "SELECT stop_reason FROM sandboxes_sandbox WHERE id = ?", (row_id,)
        ).fetchone()
        if found and found[0] == "lost":
            lost = time.perf_counter() - started
            break
        if time.perf_counter() - started > SAMPLE_TIMEOUT:
            raise RuntimeError(f"{sandbox_id} not lost within {SAMPLE_TIMEOUT} s\n{tail()}")
        time.sleep(POLL_SECONDS)
    died = arrivals.get(container["Id"])
    return lost, (died - started) if died is not None else float("nan")


def report(result: dict[str, Any]) -> None:
    boxyard = Stats("boxyard", [value * 1000 for value in result["boxyard"]])
    raw = Stats("raw", [value * 1000 for value in result["raw_die_event"]])
    env = result["environment"]
    print(
        f"docker kill -> row lost, n={boxyard.n} (Docker {env['docker_server']}, "
        f"{env['cpu_count']} CPUs, {env['storage_driver']}, SQLite {env['sqlite']})"
    )
    print(f"  {'':<56} {'p50':>9} {'p90':>9} {'max':>9}")
    for label, stats in (
        ("Boxyard: kill -> the sandbox's row says lost", boxyard),
        ("raw Docker: kill -> die event at an events() subscriber", raw),
    ):
        p50, p90, _ = stats.percentiles()
        print(f"  {label:<56} {p50:>7.1f}ms {p90:>7.1f}ms {max(stats.samples_ms):>7.1f}ms")
    worst = max(result["boxyard"])
    verdict = "PASS" if worst <= TARGET_SECONDS else "FAIL"
    print(
        f"  target: every kill marked lost within {TARGET_SECONDS:.0f} s: {verdict} "
        f"(max {worst * 1000:.0f} ms)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=30, help="measured kills (30)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args(argv)
    result = kill_to_lost(args.samples, args.image)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
