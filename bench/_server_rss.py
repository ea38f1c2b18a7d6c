#!/usr/bin/env python
"""The server's memory across output floods and large file transfers, and after them.

A served Boxyard (`manage.py serve`, as `bin/run` runs it: uvicorn, the embedded worker and
scheduler in one process) on a throw-away data directory and port opens one sandbox through
the bot API, then runs rounds of load, everything of a round at once:

- foreground floods: execs printing about 200 MB each (`head -c 200000000 /dev/zero | tr
  '\\0' a`), one in the default session and one fresh;
- background floods of the same size, one read through `GET …/output` with `max_bytes` as
  large as allowed, one through `GET …/stream` (server-sent events) read at full speed, and
  one read slowly (a client that takes its time lets events queue in the server);
- 16 MiB file transfers: `PUT /files` with `contents_b64`, `GET /files` with `max_bytes` as
  large as allowed, and the streaming downloads there are (the dashboard's download as a
  logged-in admin, and `GET /files/raw` when the API has it).

The server's resident memory (VmRSS of its process and any children, from /proc) is sampled
before the load, every 0.2 s during it (the peak), and every 5 s for 60 s after it.

    .venv/bin/python bench/_server_rss.py [--rounds 3] [--image boxyard/default:1] [--json PATH]

`server_rss_profile()` returns the figures as a dict for `bench_contain.py`. Extra environment
for the server (`--env NAME=VALUE`) measures a variant, such as glibc's own tunables.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, manage, served, server_env, throwaway

DEFAULT_IMAGE = "boxyard/default:1"
FLOOD_BYTES = 200_000_000
FILE_BYTES = 16 * 1024 * 1024
ADMIN, PASSWORD = "rss-admin", "rss-admin-password-1"
FLOOD = f"head -c {FLOOD_BYTES} /dev/zero | tr '\\0' a"


# --- resident memory ------------------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                queue.extend(int(child) for child in children)
        except OSError:
            continue
    return found


def rss_mb(pid: int) -> float:
    """VmRSS of a process and its descendants, in MB (10^6 bytes)."""
    total_kib = 0
    for member in _descendants(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        if match:
            total_kib += int(match.group(1))
    return total_kib * 1024 / 1e6


class Sampler:
    """Samples a process's RSS from a thread until stopped: the peak and every sample."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - start, rss_mb(self.pid)))
            self._stop.wait(self.every)

    @property
    def peak(self) -> float:
        return max((value for _, value in self.samples), default=0.0)


# --- the load ---------------------------------------------------------------------------------------


def _check(response: Any, what: str) -> Any:
    if response.status_code != 200:
        raise RuntimeError(f"{what}: {response.status_code} {response.text[:500]}")
    return response


def _foreground(client: Any, sandbox: str, fresh: bool) -> int:
    body: dict[str, Any] = {"cmd": FLOOD, "timeout_seconds": 300}
    if fresh:
        body["fresh"] = True
    answer = _check(client.post(f"/sandboxes/{sandbox}/exec", json=body), "foreground flood").json()
    return len(answer.get("stdout") or "")


def _background(client: Any, sandbox: str) -> str:
    body = {"cmd": FLOOD, "background": True}
    return str(
        _check(client.post(f"/sandboxes/{sandbox}/exec", json=body), "background flood").json()[
            "exec_id"
        ]
    )


def _polled(client: Any, sandbox: str) -> int:
    exec_id, since, received = _background(client, sandbox), 0, 0
    while True:
        answer = _check(
            client.get(
                f"/sandboxes/{sandbox}/execs/{exec_id}/output",
                params={"since_seq": since, "max_bytes": 16 * 1024 * 1024},
            ),
            "output",
        ).json()
        for chunk in answer["chunks"]:
            since = max(since, chunk["seq"])
            received += len(chunk["text"])
        if answer["done"] and not answer["chunks"]:
            return received
        if not answer["chunks"]:
            time.sleep(0.1)


def _streamed(client: Any, sandbox: str, pause: float) -> int:
    """Read an exec's server-sent events; with `pause`, a slow reader (sleeps between reads)."""
    exec_id, received = _background(client, sandbox), 0
    with client.stream(
        "GET", f"/sandboxes/{sandbox}/execs/{exec_id}/stream", timeout=600
    ) as response:
        _check(response, "stream")
        for piece in response.iter_bytes(64 * 1024):
            received += len(piece)
            if pause:
                time.sleep(pause)
            if b"event: exit" in piece or b"event: gone" in piece:
                break
    return received


def _put_file(client: Any, sandbox: str, path: str, payload: str) -> int:
    body = {"path": path, "contents_b64": payload}
    return int(
        _check(client.put(f"/sandboxes/{sandbox}/files", json=body), "put file").json()[
            "size_bytes"
        ]
    )


def _get_file(client: Any, sandbox: str, path: str, max_bytes: int) -> int:
    answer = _check(
        client.get(f"/sandboxes/{sandbox}/files", params={"path": path, "max_bytes": max_bytes}),
        "get file",
    ).json()
    return len(answer.get("contents") or answer.get("contents_b64") or "")


def _download(client: Any, url: str, params: dict[str, str]) -> int:
    received = 0
    with client.stream("GET", url, params=params, timeout=600) as response:
        _check(response, f"download {url}")
        for piece in response.iter_bytes(64 * 1024):
            received += len(piece)
    return received


def _max_read_bytes(client: Any, sandbox: str, path: str) -> int:
    """The largest max_bytes GET /files takes (the server's ceiling, from its 400 answer)."""
    answer = client.get(f"/sandboxes/{sandbox}/files", params={"path": path, "max_bytes": 1 << 40})
    match = re.search(r"at most (\d+)", answer.text)
    return int(match.group(1)) if match else 4 * 1024 * 1024


def _admin_client(base_url: str) -> Any:
    import httpx

    client = httpx.Client(base_url=base_url, timeout=600, follow_redirects=True)
    client.get("/login/")
    token = client.cookies.get("csrftoken", "")
    answer = client.post(
        "/login/",
        data={"username": ADMIN, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base_url}/login/"},
    )
    if answer.status_code != 200 or "sessionid" not in client.cookies:
        raise RuntimeError(f"admin login failed: {answer.status_code}")
    return client


def one_round(
    client: Any,
    admin: Any,
    sandbox: str,
    round_no: int,
    read_max: int,
    raw_route: bool,
    workers: ThreadPoolExecutor,
    only: tuple[str, ...] = (),
) -> dict[str, int]:
    payload = base64.b64encode(os.urandom(FILE_BYTES)).decode()
    seed = f"/workspace/seed-{round_no}.bin"
    _put_file(client, sandbox, seed, payload)
    jobs: dict[str, Callable[[], int]] = {
        "foreground session": lambda: _foreground(client, sandbox, fresh=False),
        "foreground fresh": lambda: _foreground(client, sandbox, fresh=True),
        "background polled": lambda: _polled(client, sandbox),
        "background streamed": lambda: _streamed(client, sandbox, 0),
        "background streamed slowly": lambda: _streamed(client, sandbox, 0.01),
        "put 16 MiB a": lambda: _put_file(client, sandbox, f"/workspace/a-{round_no}.bin", payload),
        "put 16 MiB b": lambda: _put_file(client, sandbox, f"/workspace/b-{round_no}.bin", payload),
        "get max_bytes a": lambda: _get_file(client, sandbox, seed, read_max),
        "get max_bytes b": lambda: _get_file(client, sandbox, seed, read_max),
        "dashboard download": lambda: _download(
            admin, f"/sandboxes/{sandbox}/files/download", {"path": seed}
        ),
    }
    if raw_route:
        jobs["raw download"] = lambda: _download(
            client, f"/sandboxes/{sandbox}/files/raw", {"path": seed}
        )
    if only:
        jobs = {name: job for name, job in jobs.items() if name.startswith(only)}
    futures = {name: workers.submit(job) for name, job in jobs.items()}
    return {name: future.result() for name, future in futures.items()}


# --- the profile --------------------------------------------------------------------------------------


def server_rss_profile(
    image: str = DEFAULT_IMAGE,
    rounds: int = 3,
    after_seconds: int = 60,
    every: int = 5,
    extra_env: dict[str, str] | None = None,
    log: Callable[[str], None] | None = None,
    settle_seconds: float = 5.0,
    only: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The server's RSS (MB) before the load, at its peak during it, and every `every`
    seconds for `after_seconds` after it: {"before_mb", "peak_mb", "after_mb": [(s, mb)…],
    "final_mb", "under_300_within_s", "rounds", "transfers"}."""
    import httpx

    say = log or (lambda text: print(text, file=sys.stderr))
    with throwaway("boxyard-bench-rss-") as (deployment, data_dir):
        env = server_env(data_dir, deployment)
        env.update(extra_env or {})
        manage(env, "migrate", "--verbosity", "0")
        token = (
            manage(env, "create_pipeline", PIPELINE, "--image", image, "--print-token")
            .strip()
            .splitlines()[-1]
        )
        manage(
            env,
            "shell",
            "-c",
            (
                "from django.contrib.auth import get_user_model; "
                f"get_user_model().objects.create_user({ADMIN!r}, password={PASSWORD!r}, is_staff=True)"
            ),
        )
        with served(env, data_dir, embedded_worker=True) as server:
            pid = server.process.pid
            client = httpx.Client(
                base_url=f"{server.base_url}/api/v1",
                timeout=600,
                headers={"Authorization": f"Bearer {token}"},
                limits=httpx.Limits(max_connections=64),
            )
            admin = _admin_client(server.base_url)
            opened = _check(
                client.post(
                    "/sandboxes/open",
                    json={
                        "pipeline": PIPELINE,
                        "variables": {"launcher_type": "bench", "launcher_id": "rss"},
                    },
                ),
                "open",
            ).json()
            sandbox = opened["sandbox_id"]
            _check(client.post(f"/sandboxes/{sandbox}/exec", json={"cmd": "true"}), "first exec")
            _put_file(client, sandbox, "/workspace/probe.bin", "")
            read_max = _max_read_bytes(client, sandbox, "/workspace/probe.bin")
            raw_route = (
                client.get(
                    f"/sandboxes/{sandbox}/files/raw", params={"path": "/workspace/probe.bin"}
                ).status_code
                == 200
            )
            say(f"server {pid} up; idle for {settle_seconds:.0f} s")
            time.sleep(settle_seconds)  # start-up's own work settles
            before = rss_mb(pid)
            say(
                f"before: {before:.0f} MB (GET /files max_bytes={read_max}, raw route: {raw_route})"
            )
            transfers: list[dict[str, int]] = []
            started = time.monotonic()
            with Sampler(pid) as sampler, ThreadPoolExecutor(16) as workers:
                for round_no in range(rounds):
                    transfers.append(
                        one_round(
                            client, admin, sandbox, round_no, read_max, raw_route, workers, only
                        )
                    )
                    say(
                        f"round {round_no + 1}/{rounds}: rss {rss_mb(pid):.0f} MB, peak {sampler.peak:.0f} MB"
                    )
            load_seconds = time.monotonic() - started
            after: list[tuple[int, float]] = [(0, rss_mb(pid))]
            for elapsed in range(every, after_seconds + 1, every):
                time.sleep(every)
                after.append((elapsed, rss_mb(pid)))
                say(f"  +{elapsed:>2} s: {after[-1][1]:.0f} MB")
            client.delete(f"/sandboxes/{sandbox}", params={"delete_workspace": "true"})
            client.close()
            admin.close()
    # From when on every sample stayed under 300 MB (None: the last one did not).
    under = next(
        (
            seconds
            for index, (seconds, _) in enumerate(after)
            if all(value < 300 for _, value in after[index:])
        ),
        None,
    )
    return {
        "image": image,
        "rounds": rounds,
        "load_seconds": round(load_seconds, 1),
        "before_mb": round(before, 1),
        "peak_mb": round(sampler.peak, 1),
        "after_mb": [(seconds, round(value, 1)) for seconds, value in after],
        "final_mb": round(after[-1][1], 1),
        "under_300_within_s": under,
        "transfers": transfers,
        "extra_env": extra_env or {},
        "only": list(only),
    }


def print_profile(profile: dict[str, Any]) -> None:
    print(
        f"server RSS across {profile['rounds']} rounds of 200 MB floods and 16 MiB transfers "
        f"on {profile['image']} ({profile['load_seconds']} s of load)"
    )
    if profile["only"]:
        print(f"  only: {', '.join(profile['only'])}")
    if profile["extra_env"]:
        print(f"  server environment: {profile['extra_env']}")
    print(f"  before:        {profile['before_mb']:7.1f} MB")
    print(f"  peak during:   {profile['peak_mb']:7.1f} MB")
    for seconds, value in profile["after_mb"]:
        print(f"  after {seconds:>3} s:   {value:7.1f} MB")
    under = profile["under_300_within_s"]
    print(f"  under 300 MB: {'after ' + str(under) + ' s' if under is not None else 'no'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of load (3)")
    parser.add_argument("--after", type=int, default=60, help="seconds sampled after the load (60)")
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds the idle server is left alone before the load (5)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the server (repeatable)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the loads whose names start so (repeatable), e.g. 'put'",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)
    profile = server_rss_profile(
        args.image,
        args.rounds,
        args.after,
        extra_env=extra,
        settle_seconds=args.settle,
        only=tuple(args.only),
    )
    print_profile(profile)
    if args.json:
        args.json.write_text(json.dumps(profile, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
