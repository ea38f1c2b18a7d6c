#!/usr/bin/env python
"""How fast one token grows the database, with and without retention, in the same run; and
what a signed link's download writes.

One pipeline's token runs commands that each print 256 KiB on stdout and on stderr (what an
exec's answer carries by default, all of it stored with the exec), four at a time, on a served
Boxyard (`manage.py serve`: the embedded worker and scheduler) with its own SQLite database:

1. `without pruning`: the periodic pass is set to once a day, so none runs;
2. `with pruning`: the same server restarted on the same database with a pass every
   `--interval` seconds (60 by default in the product) and `BOXYARD_OUTPUT_KEEP_MB=--keep-mb`.

For each phase it prints the database's live bytes (pages in use, read with SQLite's own
counts) before and after, and the growth extrapolated to an hour: without pruning, the
phase's slope; with pruning, the output stored (held within the budget plus what one interval
writes) and the slope of everything else (the rows kept), both sampled every half second once
the passes have cut what phase 1 left (least squares). Then,
with no command running, anyone (no token) downloads a file through a signed link
(`GET` and `HEAD`, four at a time) and it prints the rows written per download (events and
every other table but the minute jobs' own) and whether the sandbox's last activity moved.

    .venv/bin/python bench/bench_growth.py [--seconds 25] [--interval 5] [--keep-mb 32]
        [--downloads 100]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import DEFAULT_IMAGE

MB = 1_000_000
STREAM = 256 * 1024
COMMAND = f"head -c {STREAM} /dev/zero | tr '\\0' o; head -c {STREAM} /dev/zero | tr '\\0' e >&2"
# Written by the periodic jobs whatever the requests do (a minute's fleet sample, their locks).
JOB_TABLES = {"sandboxes_fleetsample", "sandboxes_periodicjob", "sandboxes_metrictotal"}


class Database:
    """The server's SQLite database, read with a connection of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self, sql: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30) as db:
            return list(db.execute(sql))

    def live_bytes(self) -> int:
        """Bytes of the pages in use (freed pages are reused, not returned to the disk)."""
        pages = self._read("PRAGMA page_count")[0][0]
        free = self._read("PRAGMA freelist_count")[0][0]
        return int((pages - free) * self._read("PRAGMA page_size")[0][0])

    def rows(self) -> dict[str, int]:
        tables = [
            name
            for (name,) in self._read("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not name.startswith("sqlite_")
        ]
        return {name: int(self._read(f'SELECT count(*) FROM "{name}"')[0][0]) for name in tables}

    def one(self, sql: str) -> Any:
        found = self._read(sql)
        return found[0][0] if found else None


def run_commands(client: Any, sandbox_id: str, seconds: float, on_tick: Any) -> int:
    """Commands with large output, four at a time, for `seconds`; `on_tick` every 0.5 s."""
    stop = time.monotonic() + seconds
    done = [0]
    lock = threading.Lock()

    def worker() -> None:
        while time.monotonic() < stop:
            answer = client.post(f"/api/v1/sandboxes/{sandbox_id}/exec", json={"cmd": COMMAND})
            if answer.status_code != 200 or answer.json().get("exit_code") != 0:
                raise RuntimeError(f"exec: {answer.status_code} {answer.text[:300]}")
            with lock:
                done[0] += 1

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(worker) for _ in range(4)]
        while not all(future.done() for future in futures):
            on_tick()
            time.sleep(0.5)
        for future in futures:
            future.result()
    return done[0]


def open_sandbox(client: Any) -> str:
    opened = client.post(
        "/api/v1/sandboxes/open",
        json={"pipeline": PIPELINE, "variables": {"launcher_type": "bench", "launcher_id": "1"}},
    )
    if opened.status_code != 200:
        raise RuntimeError(f"open: {opened.status_code} {opened.text}")
    return str(opened.json()["sandbox_id"])


def phase_without(env: dict[str, str], data_dir: Path, token: str, seconds: float) -> None:
    import httpx

    db = Database(data_dir / "bench-api.sqlite3")
    with (
        served(
            {**env, "BOXYARD_PRUNE_INTERVAL_SECONDS": "86400"}, data_dir, embedded_worker=True
        ) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as client,
    ):
        sandbox_id = open_sandbox(client)
        before, started = db.live_bytes(), time.monotonic()
        count = run_commands(client, sandbox_id, seconds, lambda: None)
        elapsed, after = time.monotonic() - started, db.live_bytes()
    rate = (after - before) / elapsed
    print(f"without pruning: {count} commands in {elapsed:.1f} s ({count / elapsed:.1f}/s)")
    print(f"  live database   {before / MB:8.1f} MB before, {after / MB:8.1f} MB after")
    print(f"  growth          {rate / MB:8.2f} MB/s = {rate * 3600 / 1e9:.1f} GB an hour")


def phase_with(
    env: dict[str, str],
    data_dir: Path,
    token: str,
    seconds: float,
    interval: float,
    keep: int,
    downloads: int,
) -> None:
    import httpx

    db = Database(data_dir / "bench-api.sqlite3")
    settings = {
        **env,
        "BOXYARD_PRUNE_INTERVAL_SECONDS": str(interval),
        "BOXYARD_OUTPUT_KEEP_MB": str(keep),
    }
    samples: list[tuple[float, int, int]] = []  # (when, live bytes, stored output bytes)
    passes: set[Any] = set()

    def tick() -> None:
        passes.add(db.one("SELECT last_finished_at FROM sandboxes_periodicjob WHERE name='prune'"))
        if len(passes) > 2:  # a pass has ended since the first one that cut phase 1's output
            output = db.one("SELECT sum(output_size) FROM sandboxes_exec") or 0
            samples.append((time.monotonic(), db.live_bytes(), int(output)))

    with (
        served(settings, data_dir, embedded_worker=True) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as client,
    ):
        sandbox_id = open_sandbox(client)
        before, started = db.live_bytes(), time.monotonic()
        count = run_commands(client, sandbox_id, seconds, tick)
        elapsed, after = time.monotonic() - started, db.live_bytes()
        links = link_reads(client, sandbox_id, db, downloads)
    print(
        f"with pruning (a pass every {interval:g} s, BOXYARD_OUTPUT_KEEP_MB={keep}): "
        f"{count} commands in {elapsed:.1f} s ({count / elapsed:.1f}/s)"
    )
    print(f"  live database   {before / MB:8.1f} MB before, {after / MB:8.1f} MB after")
    if len(samples) < 4:
        print("  too few passes during the phase to tell: run it longer (--seconds)")
        print(links)
        return
    print(
        f"  stored output   {samples[-1][2] / MB:8.1f} MB at the end, at most "
        f"{max(output for _, _, output in samples) / MB:.1f} MB (the budget and one interval's); "
        f"database at most {max(live for _, live, _ in samples) / MB:.1f} MB"
    )
    rate = _slope([(when, live - output) for when, live, output in samples])
    print(
        f"  growth          {rate / MB:8.3f} MB/s = {rate * 3600 / 1e9:.3f} GB an hour "
        "(the rows kept; the output stays within its budget)"
    )
    print(links)


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares bytes per second."""
    mean_t = sum(t for t, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points) or 1.0
    return sum((t - mean_t) * (y - mean_y) for t, y in points) / spread


def link_reads(client: Any, sandbox_id: str, db: Database, downloads: int) -> str:
    import httpx

    files = f"/api/v1/sandboxes/{sandbox_id}/files"
    written = client.put(files, json={"path": "out/report.txt", "contents": "x" * 4096})
    if written.status_code not in (200, 201):
        raise RuntimeError(f"write: {written.status_code} {written.text}")
    made = client.post(f"{files}/links", json={"path": "out/report.txt"})
    if made.status_code != 201:
        raise RuntimeError(f"link: {made.status_code} {made.text}")
    url = made.json()["url"]
    time.sleep(6)  # the commands' last counts are flushed (every 5 s)
    activity = (
        f"SELECT last_activity_at FROM sandboxes_sandbox WHERE id = '{sandbox_id.replace('-', '')}'"
    )
    before, active_before = db.rows(), db.one(activity)
    started = time.monotonic()

    def hit(number: int) -> int:
        with httpx.Client(timeout=30) as anyone:  # no token
            answer = anyone.head(url) if number % 4 == 0 else anyone.get(url)
            return answer.status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(hit, range(downloads)))
    elapsed = time.monotonic() - started
    after, active_after = db.rows(), db.one(activity)
    if set(statuses) != {200}:
        raise RuntimeError(f"link answers: {sorted(set(statuses))}")
    events = after["sandboxes_event"] - before["sandboxes_event"]
    others = (
        sum(after[name] - before.get(name, 0) for name in after if name not in JOB_TABLES) - events
    )
    moved = "moved" if active_after != active_before else "did not move"
    return (
        f"signed link: {len(statuses)} downloads (GET and HEAD, no token) in {elapsed:.1f} s "
        f"({len(statuses) / elapsed:.0f}/s)\n"
        f"  rows written    {events / len(statuses):g} events and {others / len(statuses):g} "
        f"other rows per download; the sandbox's last activity {moved}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=25, help="of commands per phase (25)")
    parser.add_argument("--interval", type=float, default=5, help="seconds between passes (5)")
    parser.add_argument("--keep-mb", type=int, default=32, help="output kept, MB (32)")
    parser.add_argument("--downloads", type=int, default=100, help="through the link (100)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    args = parser.parse_args(argv)
    with throwaway("boxyard-bench-growth-") as (deployment, data_dir):
        env, token, _raw, _info = prepare(
            args.image, deployment, data_dir, "Boxyard growth benchmark: retention and links"
        )
        phase_without(env, data_dir, token, args.seconds)
        phase_with(env, data_dir, token, args.seconds, args.interval, args.keep_mb, args.downloads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
