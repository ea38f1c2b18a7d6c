#!/usr/bin/env python
"""The E2B SDK against Boxyard's own API and raw docker-py, in the same run, interleaved (each
round runs every variant once, in a new random order; see `bench_core.run_interleaved`).

The server runs as `bin/run` runs it (`manage.py serve`, with the worker that refills the warm
pool), on 127.0.0.1; the SDK (`e2b`, sync) is set up as its users set it up: `E2B_API_URL`,
`E2B_SANDBOX_URL` and an `e2b_`-shaped key from `create_pipeline --e2b-key`.

- exec: `sandbox.commands.run("true")` against `POST /api/v1/sandboxes/{id}/exec
  {"cmd": "true"}` (httpx, keep-alive) in the same sandbox, and raw docker-py's
  `exec_run(["true"])` in a container of the same image and hardening;
- create: `Sandbox.create()` on a pipeline with a warm pool (`pool_size` 4), against the bot
  API's open of a new chat on the same pipeline and raw docker-py's create and start; every
  sandbox is killed, and every raw container removed, outside the timed part;
- files: `sandbox.files.write` and `sandbox.files.read(format="bytes")` of 64 MiB against
  `PUT` and `GET /files/raw` of the same size into the same sandbox; and the SDK's read as a
  stream (`format="stream"`, consumed as it comes, as the raw GET is), which tells the
  server's part from the SDK's own work of assembling 64 MiB in memory (two whole copies);
  and the raw GET read into one `bytes` too (httpx's `.content`), the same work on both sides.

It prints p50/p90/p99 per variant and the issue's targets as PASS or FAIL lines, which never
change the exit status: E2B exec p50 at most 1.5x REST's and at most 0.5x raw docker's;
`Sandbox.create()` from the warm pool p50 at most 40 ms; 64 MiB written and read at least 0.8x
as fast as `/files/raw`.

    .venv/bin/python bench/bench_e2b.py [--n 100] [--n-create 40] [--n-files 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, manage, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import (
    DEFAULT_IMAGE,
    Stats,
    print_percentiles,
    print_targets,
    run_interleaved,
    timed,
)

POOL_PIPELINE = "bench-e2b-pool"
MIB = 1024 * 1024
EXEC_REST_MAX, EXEC_RAW_MAX, CREATE_P50_MS, FILES_MIN = 1.5, 0.5, 40.0, 0.8


def _key(env: dict[str, str], slug: str, image: str) -> str:
    printed = manage(env, "create_pipeline", slug, "--image", image, "--e2b-key")
    return printed.strip().splitlines()[-1]


def _wait_for_pool(client: Any, size: int) -> None:
    deadline = time.monotonic() + 120
    while client.get("/api/v1/metrics").json()["overall"]["pool_ready"] < size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the warm pool did not fill to {size} within 120 s")
        time.sleep(0.2)


def measure(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Stats]:
    import httpx
    from e2b import Sandbox

    env, _token, raw, _info = prepare(
        args.image, deployment, data_dir, "Boxyard E2B benchmark: the SDK against REST and raw"
    )
    key = _key(env, PIPELINE, args.image)
    pool_key = _key(env, POOL_PIPELINE, args.image)
    from pipelines.models import Pipeline  # Django was set up by prepare()

    Pipeline.objects.filter(slug=POOL_PIPELINE).update(pool_size=4, max_live_sandboxes=200)
    Pipeline.objects.filter(slug=PIPELINE).update(max_live_sandboxes=200)
    stats: dict[str, Stats] = {}
    with served(env, data_dir, embedded_worker=True) as server:
        os.environ["E2B_API_URL"] = f"{server.base_url}/e2b"
        os.environ["E2B_SANDBOX_URL"] = f"{server.base_url}/e2b/sandbox"
        rest = httpx.Client(
            base_url=server.base_url, timeout=600, headers={"Authorization": f"Bearer {key}"}
        )
        pool_rest = httpx.Client(
            base_url=server.base_url, timeout=120, headers={"Authorization": f"Bearer {pool_key}"}
        )
        sandbox = Sandbox.create(api_key=key)
        container, volume = raw.create_and_start(args.image)
        try:
            stats |= _execs(args, sandbox, rest, raw, container)
            stats |= _files(args, sandbox, rest)
            _wait_for_pool(pool_rest, 4)
            stats |= _creates(args, pool_key, pool_rest, raw)
        finally:
            raw.remove(container, volume)
            sandbox.kill()
            rest.close()
            pool_rest.close()
    return stats


def _execs(
    args: argparse.Namespace, sandbox: Any, rest: Any, raw: Any, container: str
) -> dict[str, Stats]:
    path = f"/api/v1/sandboxes/{sandbox.sandbox_id}/exec"

    def e2b() -> float:
        seconds, done = timed(lambda: sandbox.commands.run("true"))
        if done.exit_code != 0:
            raise RuntimeError(f"the SDK's command exited {done.exit_code}")
        return seconds

    def api() -> float:
        seconds, response = timed(lambda: rest.post(path, json={"cmd": "true"}))
        if response.status_code != 200 or response.json()["exit_code"] != 0:
            raise RuntimeError(f"the REST exec failed: {response.text}")
        return seconds

    def docker() -> float:
        seconds, exit_code = timed(lambda: raw.exec_run(container, ["true"]))
        if exit_code != 0:
            raise RuntimeError(f"the raw exec exited {exit_code}")
        return seconds

    return run_interleaved(
        {"e2b exec": e2b, "rest exec": api, "raw exec": docker},
        args.n,
        args.warmup,
        random.Random(args.seed),
        "exec true",
    )


def _files(args: argparse.Namespace, sandbox: Any, rest: Any) -> dict[str, Stats]:
    size = 64 * MIB
    payload = bytes(range(256)) * (size // 256)
    url = f"/api/v1/sandboxes/{sandbox.sandbox_id}/files/raw"

    def e2b_write() -> float:
        return timed(lambda: sandbox.files.write("/home/user/e2b.bin", payload))[0]

    def e2b_read() -> float:
        seconds, got = timed(lambda: sandbox.files.read("/home/user/e2b.bin", format="bytes"))
        if len(got) != size:
            raise RuntimeError(f"the SDK read {len(got)} bytes of {size}")
        return seconds

    def e2b_read_stream() -> float:
        def read() -> int:
            with sandbox.files.read("/home/user/e2b.bin", format="stream") as stream:
                return sum(len(piece) for piece in stream)

        seconds, got = timed(read)
        if got != size:
            raise RuntimeError(f"the SDK streamed {got} bytes of {size}")
        return seconds

    def raw_put() -> float:
        seconds, response = timed(
            lambda: rest.put(url, params={"path": "raw.bin"}, content=payload)
        )
        if response.status_code != 201:
            raise RuntimeError(f"PUT answered {response.status_code}: {response.text}")
        return seconds

    def raw_get() -> float:
        def read() -> int:
            with rest.stream("GET", url, params={"path": "raw.bin"}) as response:
                return sum(len(piece) for piece in response.iter_raw(MIB))

        seconds, got = timed(read)
        if got != size:
            raise RuntimeError(f"GET gave {got} bytes of {size}")
        return seconds

    def raw_get_bytes() -> float:
        seconds, response = timed(lambda: rest.get(url, params={"path": "raw.bin"}))
        if len(response.content) != size:
            raise RuntimeError(f"GET gave {len(response.content)} bytes of {size}")
        return seconds

    writes = run_interleaved(
        {"e2b write 64 MiB": e2b_write, "files/raw PUT 64 MiB": raw_put},
        args.n_files,
        1,
        random.Random(args.seed),
        "64 MiB written",
    )
    reads = run_interleaved(
        {
            "e2b read 64 MiB": e2b_read,
            "e2b read 64 MiB, stream": e2b_read_stream,
            "files/raw GET 64 MiB": raw_get,
            "files/raw GET 64 MiB, into bytes": raw_get_bytes,
        },
        args.n_files,
        1,
        random.Random(args.seed),
        "64 MiB read",
    )
    return writes | reads


def _creates(args: argparse.Namespace, pool_key: str, rest: Any, raw: Any) -> dict[str, Stats]:
    from e2b import Sandbox

    chats = itertools.count()
    made: list[Any] = []

    def e2b() -> float:
        seconds, sandbox = timed(lambda: Sandbox.create(api_key=pool_key))
        sandbox.kill()
        return seconds

    def api() -> float:
        variables = {"launcher_type": "bench", "launcher_id": str(next(chats))}
        seconds, response = timed(
            lambda: rest.post(
                "/api/v1/sandboxes/open",
                json={"pipeline": POOL_PIPELINE, "variables": variables},
            )
        )
        if response.status_code != 200:
            raise RuntimeError(f"open failed: {response.status_code} {response.text}")
        made.append(response.json())
        rest.delete(
            f"/api/v1/sandboxes/{made[-1]['sandbox_id']}", params={"delete_workspace": "true"}
        )
        return seconds

    def docker() -> float:
        seconds, created = timed(lambda: raw.create_and_start(args.image))
        raw.remove(*created)
        return seconds

    stats = run_interleaved(
        {"e2b Sandbox.create()": e2b, "rest open, new chat": api, "raw create+start": docker},
        args.n_create,
        2,
        random.Random(args.seed),
        "creates",
    )
    pooled = sum(1 for opened in made if opened.get("source") == "pool")
    print(f"REST opens served by the warm pool: {pooled} of {len(made)}")
    return stats


def report(stats: dict[str, Stats]) -> None:
    print_percentiles(stats)

    def median(name: str) -> float:
        return stats[name].percentiles()[0]

    exec_e2b = median("e2b exec")
    # Speed is size over time: at least 0.8x as fast is the raw route's time over ours.
    write_speed = median("files/raw PUT 64 MiB") / median("e2b write 64 MiB")
    read_speed = median("files/raw GET 64 MiB") / median("e2b read 64 MiB")
    stream_speed = median("files/raw GET 64 MiB") / median("e2b read 64 MiB, stream")
    bytes_speed = median("files/raw GET 64 MiB, into bytes") / median("e2b read 64 MiB")
    create = median("e2b Sandbox.create()")
    checks = [
        ("E2B exec p50 / REST's", exec_e2b / median("rest exec"), "<=", EXEC_REST_MAX),
        ("E2B exec p50 / raw docker's", exec_e2b / median("raw exec"), "<=", EXEC_RAW_MAX),
        ("Sandbox.create() from the pool, p50 ms", create, "<=", CREATE_P50_MS),
        ("64 MiB write, speed / /files/raw's", write_speed, ">=", FILES_MIN),
        ("64 MiB read, speed / /files/raw's", read_speed, ">=", FILES_MIN),
        ("64 MiB read as the SDK's stream, speed / /files/raw's", stream_speed, ">=", FILES_MIN),
        ("64 MiB read into memory, speed / /files/raw's into memory", bytes_speed, ">=", FILES_MIN),
    ]
    print_targets(checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100, help="measured exec rounds (100)")
    parser.add_argument("--warmup", type=int, default=10, help="discarded exec rounds (10)")
    parser.add_argument("--n-create", type=int, default=40, help="measured creates (40)")
    parser.add_argument("--n-files", type=int, default=5, help="measured 64 MiB rounds (5)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    os.environ.setdefault("BOXYARD_LOG_LEVEL", "WARNING")
    with throwaway("boxyard-bench-e2b-") as (deployment, data_dir):
        stats = measure(args, deployment, data_dir)
    report(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
