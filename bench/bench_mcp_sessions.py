#!/usr/bin/env python
"""MCP sessions under a flood: what one pipeline can take of `/mcp`, what another pipeline sees
meanwhile, and the server's memory before, during and after.

A served Boxyard (`config.serving`, one web process) on a throw-away data directory, with the
default limits (`BOXYARD_MCP_SESSIONS_PER_PIPELINE` 200, `BOXYARD_MCP_UNUSED_SESSION_SECONDS`
60) unless `--env` says otherwise:

1. quiet: another pipeline connects (`initialize`, `tools/list`, `DELETE`) `--n` times, alone;
2. flood: one pipeline opens sessions (`initialize` only, 32 at a time) until it has made
   `--flood` requests, while the other pipeline connects `--n` times again: how many the
   flood got, its answers by status (429 past its limit), and the other pipeline's p50/p99
   beside (1);
3. memory: `--pipelines` pipelines open sessions up to their limit each (2,000 by default:
   10 x 200), then every one is ended (`DELETE`); this runs `--rounds` times. The server's
   resident memory (VmRSS) is sampled before, at the peak of each round, after each round's
   sessions are ended, and every 5 s for `--after` seconds after the last.

CPython returns little of its heap to the system: the figure that says whether the sessions
were released is the second round's peak and after (a leak grows with each round).

    .venv/bin/python bench/bench_mcp_sessions.py [--n 50] [--flood 2000] [--pipelines 10]
        [--rounds 2] [--after 60] [--env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _server_rss import rss_mb
from bench_api import manage, served, server_env, throwaway

VERSION = "2025-11-25"
HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"
CONCURRENCY = 32


def tokens_for(env: dict[str, str], slugs: list[str]) -> list[str]:
    """A pipeline and a token for each slug, made in one `manage.py shell`."""
    script = (
        "from pipelines import services\n"
        "from pipelines.models import Pipeline\n"
        "from boxyard.actors import Actor\n"
        "actor = Actor('command', 'bench')\n"
        f"for slug in {slugs!r}:\n"
        "    made = services.create_pipeline(Pipeline(slug=slug, name=slug), actor)\n"
        "    print(services.issue_token(made, actor, name='bench')[1])\n"
    )
    return manage(env, "shell", "-c", script).split()[-len(slugs) :]


async def open_session(http: Any, url: str, token: str) -> tuple[int, str | None]:
    answer = await http.post(
        url, json=HELLO, headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    )
    return answer.status_code, answer.headers.get("mcp-session-id")


async def end_session(http: Any, url: str, token: str, session: str) -> None:
    headers = {
        "Authorization": f"Bearer {token}",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": VERSION,
    }
    await http.delete(url, headers=headers)


async def connect_once(http: Any, url: str, token: str) -> float:
    """A well-behaved client's visit: initialize, tools/list, DELETE (seconds)."""
    start = time.perf_counter()
    status, session = await open_session(http, url, token)
    assert status == 200 and session, status
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": ACCEPT,
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": VERSION,
    }
    listed = await http.post(
        url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers
    )
    assert listed.status_code == 200, listed.text
    await end_session(http, url, token, session)
    return time.perf_counter() - start


async def visits(url: str, token: str, n: int) -> list[float]:
    """The other pipeline's visits, from a thread, event loop and client of their own (the
    flood's client does not delay them)."""

    async def go() -> list[float]:
        import httpx

        async with httpx.AsyncClient(timeout=60) as http:
            return [await connect_once(http, url, token) for _ in range(n)]

    return await asyncio.to_thread(asyncio.run, go())


async def flood(
    http: Any, url: str, token: str, requests: int
) -> tuple[list[str], Counter[int], float]:
    """Sessions opened by one pipeline as fast as it can: (opened, statuses, seconds)."""
    opened: list[str] = []
    statuses: Counter[int] = Counter()
    left = iter(range(requests))
    start = time.perf_counter()

    async def worker() -> None:
        for _ in left:
            status, session = await open_session(http, url, token)
            statuses[status] += 1
            if status == 200 and session:
                opened.append(session)

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return opened, statuses, time.perf_counter() - start


async def end_all(http: Any, url: str, sessions: list[tuple[str, str]]) -> None:
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def end(token: str, session: str) -> None:
        async with semaphore:
            await end_session(http, url, token, session)

    await asyncio.gather(*(end(token, session) for token, session in sessions))


def quantiles(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"


async def run(args: argparse.Namespace, url: str, pid: int, tokens: list[str], quiet: str) -> None:
    import httpx

    # Idle connections are dropped before the server closes them (uvicorn: after 5 s).
    limits = httpx.Limits(max_connections=CONCURRENCY + 4, keepalive_expiry=1.0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        await visits(url, quiet, 3)  # warm-up: every import made
        before = rss_mb(pid)
        print(f"memory before: {before:.1f} MB")

        baseline = await visits(url, quiet, args.n)
        print(f"quiet: another pipeline connects: {quantiles(baseline)}")
        attack = asyncio.ensure_future(flood(http, url, tokens[0], args.flood))
        during = await visits(url, quiet, args.n)
        opened, statuses, seconds = await attack
        print(
            f"flood: one pipeline asked for {args.flood} sessions in {seconds:.1f} s: "
            f"{len(opened)} opened; answers by status {dict(sorted(statuses.items()))}"
        )
        print(f"flood: another pipeline connects meanwhile: {quantiles(during)}")
        print(f"memory after the flood: {rss_mb(pid):.1f} MB")
        await end_all(http, url, [(tokens[0], session) for session in opened])

        for number in range(1, args.rounds + 1):
            peak = 0.0
            sessions: list[tuple[str, str]] = []
            for token in tokens:
                got, _, _ = await flood(http, url, token, args.per_pipeline)
                sessions += [(token, session) for session in got]
                peak = max(peak, rss_mb(pid))
            print(f"round {number}: {len(sessions)} sessions open, memory {peak:.1f} MB")
            await end_all(http, url, sessions)
            await asyncio.sleep(1)
            print(f"round {number}: all ended, memory {rss_mb(pid):.1f} MB")

        for waited in range(5, args.after + 1, 5):
            await asyncio.sleep(5)
            if waited % 20 == 0 or waited == args.after:
                print(f"{waited} s after: memory {rss_mb(pid):.1f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--flood", type=int, default=2000)
    parser.add_argument("--pipelines", type=int, default=10)
    parser.add_argument("--per-pipeline", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--after", type=int, default=60)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    args = parser.parse_args(argv)
    with throwaway("boxyard-bench-mcp-sessions-") as (deployment, data_dir):
        env = server_env(data_dir, deployment)
        env.update(dict(item.split("=", 1) for item in args.env))
        manage(env, "migrate", "--verbosity", "0")
        *tokens, quiet = tokens_for(env, [*(f"flood-{n}" for n in range(args.pipelines)), "quiet"])
        with served(env, data_dir) as server:
            url = f"{server.base_url}/mcp"
            asyncio.run(run(args, url, server.process.pid, tokens, quiet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
