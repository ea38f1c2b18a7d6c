#!/usr/bin/env python
"""Another pipeline's latency while one pipeline (or a caller without a token) attacks the
server they share, and the server's memory and disk before, during and after.

A served Boxyard as `bin/run` serves it (`manage.py serve`: uvicorn with the embedded worker,
SQLite) on a throw-away data directory. Two pipelines: the victim, a bot that lists its
sandboxes and runs `true` in its sandbox every 0.25 s, and the attacker. The victim's p50 and
p99 are measured quiet, then during each attack, in the same run:

- `bodies`: callers without a token send 2 GiB bodies to `POST /sandboxes/open` as fast as the
  server takes them, and the attacker's token keeps 16 uploads open sending a byte a second;
- `waits`: the attacker sends 300 `POST …/execs/{id}/wait` (timeout 900 s) at once and again
  every 5 s, each client keeping its connection until answered or gone after 5 s, as issue 26
  found them holding every thread of the server;
- `rows`: the attacker runs commands printing 1 MB each, 4 at a time, and reads each back;
- `flood`: the attacker's token sends `GET /sandboxes` from 64 connections as fast as the server
  answers, whatever it answers (past the rate limit, 429).

The server runs with its defaults (the rate limit among them: the victim's 8 calls a second are
within it). The attacker runs in a process of its own at the lowest CPU priority (`nice` 19): on
this machine its client shares the server's cores, where a real attacker's runs elsewhere; it
takes what the server and the victim leave, and the CPU each used is printed. The server's resident
memory (its process, /proc) and the disk it wrote (the data directory and its temporary
directory) are read before, at the end of each attack, and 60 s after the last. Nothing is
asserted: it prints the figures and the ratio of each phase's p50 and p99 to the quiet ones
(the target: within 2x).

    .venv/bin/python bench/bench_tenants.py [--seconds 30] [--after 60] [--phases bodies,waits,rows,flood]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from bench_api import manage, served, server_env
from bench_core import DEFAULT_IMAGE, Stats, remove_deployment

CHAT = {"launcher_type": "bench", "launcher_id": "1"}
PACE_SECONDS = 0.25


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def disk_mb(*roots: Path) -> float:
    total = 0
    for root in roots:
        for path in root.rglob("*"):
            try:
                if path.is_file():
                    total += path.stat().st_size
            except OSError:
                pass
    return total / 1024 / 1024


def victim(url: str, token: str, sandbox: str, seconds: float) -> tuple[Stats, Stats]:
    """The quiet bot: (list, exec) latencies over `seconds`, one call of each every 0.25 s."""
    listing, running = Stats("list"), Stats("exec")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            began = time.monotonic()
            answer = client.get("/api/v1/sandboxes")
            listing.add(time.monotonic() - began)
            assert answer.status_code == 200, answer.text
            began = time.monotonic()
            answer = client.post(f"/api/v1/sandboxes/{sandbox}/exec", json={"cmd": ["true"]})
            running.add(time.monotonic() - began)
            assert answer.status_code == 200, answer.text
            time.sleep(max(0.0, PACE_SECONDS - (time.monotonic() - began)))
    return listing, running


# --- the attacks, each in a process of its own ---------------------------------------------------


def _forever(stop: Any, work: Any, count: int) -> None:
    def loop() -> None:
        while not stop.is_set():
            try:
                work()
            except Exception:
                time.sleep(0.05)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    stop.wait()


def attack_bodies(url: str, token: str, sandbox: str, stop: Any) -> None:
    host, port = url.removeprefix("http://").split(":")
    junk = b"x" * 65536

    def big() -> None:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(
                b"POST /api/v1/sandboxes/open HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 2147483648\r\n\r\n"
            )
            try:
                for _ in range(32768):
                    sock.sendall(junk)
            except OSError:
                pass  # closed by the server: start again

    def slow() -> None:
        with socket.create_connection((host, int(port)), timeout=120) as sock:
            sock.sendall(
                f"PUT /api/v1/sandboxes/{sandbox}/files/raw?path=slow.bin HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                "Content-Length: 1000000\r\n\r\n".encode()
            )
            try:
                while not stop.is_set():
                    sock.sendall(b"x")
                    time.sleep(1)
            except OSError:
                pass

    threading.Thread(target=_forever, args=(stop, slow, 16), daemon=True).start()
    _forever(stop, big, 8)


def attack_waits(url: str, token: str, sandbox: str, stop: Any) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    started = httpx.post(
        f"{url}/api/v1/sandboxes/{sandbox}/exec",
        headers=headers,
        json={"cmd": "sleep 3600", "background": True},
        timeout=60,
    ).json()
    path = f"/api/v1/sandboxes/{sandbox}/execs/{started['exec_id']}/wait"
    body = b'{"timeout_seconds": 900}'
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    host, port = url.removeprefix("http://").split(":")

    def wait() -> None:
        # A connection of its own each time, left after 5 s whatever the answer (the
        # attacker's sockets cost it next to nothing: its CPU is on the victim's machine).
        began = time.monotonic()
        try:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(request)
                sock.recv(4096)
        except OSError:
            pass
        time.sleep(max(0.0, 5 - (time.monotonic() - began)))

    _forever(stop, wait, 300)


def attack_rows(url: str, token: str, sandbox: str, stop: Any) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    client = httpx.Client(base_url=url, headers=headers, timeout=120)

    def flood() -> None:
        client.post(
            f"/api/v1/sandboxes/{sandbox}/exec",
            json={"cmd": "head -c 1000000 /dev/zero | tr '\\0' a"},
        )

    _forever(stop, flood, 4)


def attack_flood(url: str, token: str, sandbox: str, stop: Any) -> None:
    local = threading.local()

    def get() -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
        local.client.get("/api/v1/sandboxes")

    _forever(stop, get, 64)


def attack(how: Any, url: str, token: str, sandbox: str, stop: Any) -> None:
    """Run an attack at the lowest CPU priority: on this machine the attacker's client shares
    the server's cores, where a real one has its own; it takes what the server leaves."""
    os.nice(19)
    how(url, token, sandbox, stop)


ATTACKS = {
    "bodies": attack_bodies,
    "waits": attack_waits,
    "rows": attack_rows,
    "flood": attack_flood,
}


def open_sandbox(url: str, token: str, slug: str) -> str:
    answer = httpx.post(
        f"{url}/api/v1/sandboxes/open",
        headers={"Authorization": f"Bearer {token}"},
        json={"pipeline": slug, "variables": CHAT},
        timeout=180,
    )
    answer.raise_for_status()
    return str(answer.json()["sandbox_id"])


def row(name: str, stats: tuple[Stats, Stats], quiet: tuple[Stats, Stats] | None) -> str:
    cells = [f"{name:<10}"]
    for index, measured in enumerate(stats):
        p50, _, p99 = measured.percentiles()
        cells.append(f"{measured.name} p50 {p50:7.1f} ms p99 {p99:7.1f} ms")
        if quiet is not None:
            q50, _, q99 = quiet[index].percentiles()
            cells.append(f"({p50 / q50:4.1f}x, {p99 / q99:4.1f}x)")
    return "  ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="each phase's length")
    parser.add_argument("--after", type=float, default=60, help="seconds watched after")
    parser.add_argument("--phases", default="bodies,waits,rows,flood")
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    args = parser.parse_args()
    deployment = f"bench-{uuid.uuid4().hex[:8]}"
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as scratch:
        data_dir = Path(scratch) / "data"
        spool = Path(scratch) / "tmp"
        data_dir.mkdir()
        spool.mkdir()
        env = server_env(data_dir, deployment)
        env["TMPDIR"] = str(spool)
        env["BOXYARD_RATE_LIMIT"] = os.environ.get("BOXYARD_RATE_LIMIT", "600/minute")
        manage(env, "migrate", "--verbosity", "0")
        tokens = {
            slug: manage(env, "create_pipeline", slug, "--image", args.image, "--print-token")
            .strip()
            .splitlines()[-1]
            for slug in ("victim", "attacker")
        }
        try:
            with served(env, data_dir, embedded_worker=True) as server:
                url, pid = server.base_url, server.process.pid
                mine = open_sandbox(url, tokens["victim"], "victim")
                theirs = open_sandbox(url, tokens["attacker"], "attacker")
                print(f"server RSS {rss_mb(pid):.0f} MB, disk {disk_mb(data_dir, spool):.1f} MB")
                quiet = victim(url, tokens["victim"], mine, args.seconds)
                print(row("quiet", quiet, None), flush=True)
                for phase in args.phases.split(","):
                    stop = spawn.Event()
                    attacker = spawn.Process(
                        target=attack,
                        args=(ATTACKS[phase], url, tokens["attacker"], theirs, stop),
                    )
                    attacker.start()
                    assert attacker.pid is not None
                    time.sleep(2)  # the attack under way
                    began = time.monotonic()
                    spent = cpu_seconds(pid), cpu_seconds(attacker.pid)
                    during = victim(url, tokens["victim"], mine, args.seconds)
                    took = time.monotonic() - began
                    served_cpu = (cpu_seconds(pid) - spent[0]) / took * 100
                    attack_cpu = (cpu_seconds(attacker.pid) - spent[1]) / took * 100
                    memory, disk = rss_mb(pid), disk_mb(data_dir, spool)
                    stop.set()
                    attacker.join(30)
                    if attacker.is_alive():
                        attacker.kill()
                    print(
                        row(phase, during, quiet) + f"  RSS {memory:.0f} MB disk {disk:.1f} MB"
                        f"  CPU server {served_cpu:.0f}% attacker {attack_cpu:.0f}%",
                        flush=True,
                    )
                time.sleep(args.after)
                print(
                    f"{args.after:.0f} s after: RSS {rss_mb(pid):.0f} MB, "
                    f"disk {disk_mb(data_dir, spool):.1f} MB"
                )
                after = victim(url, tokens["victim"], mine, min(args.seconds, 10))
                print(row("after", after, quiet))
        finally:
            import docker
            import docker.utils

            api = docker.APIClient(version="auto", timeout=120, **docker.utils.kwargs_from_env())
            remove_deployment(api, deployment)


if __name__ == "__main__":
    main()
