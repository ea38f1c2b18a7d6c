"""Files as byte streams over HTTP against the engine's own archive API, in the same run.

For 64 MiB and 1 GiB, each round (in a new random order) writes and reads the same bytes:

- `api put` / `api get`: `PUT` and `GET /api/v1/sandboxes/{id}/files/raw` on a served Boxyard
  (uvicorn, `config.serving`), streamed by httpx from and to memory, a MiB at a time;
- `raw put` / `raw get`: docker-py `put_archive` (a tar made as it is sent) and `get_archive`
  into and from the very same sandbox container, so both land on the same workspace disk;
- `link get` (64 MiB only): the file `api put` wrote, downloaded with no token through a
  signed link (`POST /files/links`), as a chat user's browser would.

First, 1 KiB files each way (what a transfer costs before its bytes do), in milliseconds.
It prints MiB/s per variant (median of the rounds) and the ratio Boxyard / raw each way, then
the server's RSS: before, its peak during the 1 GiB transfers (sampled every 20 ms), right
after, and 60 s after. Targets (from the issue) are printed as PASS or FAIL lines; they never
change the exit status. Nothing is asserted: this measures, it does not judge.

    .venv/bin/python bench/bench_files.py [--rounds 5] [--big-rounds 2] [--settle 60]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import DEFAULT_IMAGE

MIB = 1024 * 1024


def pattern(size: int) -> Iterator[bytes]:
    block = hashlib.sha256(b"bench").digest() * (MIB // 32)
    sent = 0
    while sent < size:
        piece = block[: min(MIB, size - sent)]
        sent += len(piece)
        yield piece


def tar_of(name: str, size: int, user: str) -> Iterator[bytes]:
    """A tar of one file of `size` pattern bytes, made as it is read."""
    info = tarfile.TarInfo(name)
    info.size = size
    uid, _, gid = user.partition(":")
    info.uid, info.gid = int(uid), int(gid or uid)
    info.mode = 0o644
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    yield from pattern(size)
    padding = -size % 512
    yield b"\0" * (padding + 1024)


def small_files(
    variants: dict[str, Callable[[int], None]], rounds: int, rng: random.Random
) -> dict[str, float]:
    """Median milliseconds of a 1 KiB write and read each way, in a new order every round:
    what a file costs before its bytes do."""
    times: dict[str, list[float]] = {
        name: [] for name in ("api put", "api get", "raw put", "raw get")
    }
    for _ in range(rounds):
        pairs = [("api put", "api get"), ("raw put", "raw get")]
        rng.shuffle(pairs)
        for pair in pairs:
            for name in pair:
                started = time.perf_counter()
                variants[name](1024)
                times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


class RssSampler:
    """The server process's resident set, sampled from /proc every 20 ms while running."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def __enter__(self) -> RssSampler:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of 64 MiB")
    parser.add_argument("--big-rounds", type=int, default=2, help="rounds of 1 GiB")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds before the last RSS")
    parser.add_argument("--small-rounds", type=int, default=30, help="rounds of 1 KiB")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    import docker
    import httpx

    with throwaway("boxyard-bench-files-") as (deployment, data_dir):
        env, token, raw, _env_info = prepare(
            args.image, deployment, data_dir, "Boxyard files benchmark: byte streams over HTTP"
        )
        user = raw.user if ":" in raw.user else f"{raw.user}:{raw.user}"
        engine = docker.from_env(timeout=600)
        with (
            served(env, data_dir) as server,
            httpx.Client(
                base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=600
            ) as client,
        ):
            opened = client.post(
                "/api/v1/sandboxes/open",
                json={
                    "pipeline": PIPELINE,
                    "variables": {"launcher_type": "bench", "launcher_id": "1"},
                },
            )
            if opened.status_code != 200:
                raise RuntimeError(f"open failed: {opened.status_code} {opened.text}")
            sandbox_id = opened.json()["sandbox_id"]
            container = engine.containers.get(
                engine.api.containers(filters={"label": f"io.boxyard.sandbox={sandbox_id}"})[0][
                    "Id"
                ]
            )
            url = f"/api/v1/sandboxes/{sandbox_id}/files/raw"

            def api_put(size: int) -> None:
                response = client.put(
                    url,
                    params={"path": "api.bin"},
                    content=pattern(size),
                    headers={"Content-Length": str(size)},
                )
                if response.status_code != 201:
                    raise RuntimeError(f"PUT answered {response.status_code}: {response.text}")

            def api_get(size: int) -> None:
                got = 0
                with client.stream("GET", url, params={"path": "api.bin"}) as response:
                    for piece in response.iter_raw(MIB):
                        got += len(piece)
                if got != size:
                    raise RuntimeError(f"GET gave {got} bytes of {size}")

            def link_get(size: int) -> None:
                made = client.post(
                    f"/api/v1/sandboxes/{sandbox_id}/files/links",
                    json={"path": "api.bin", "method": "GET", "expires_in_seconds": 600},
                )
                if made.status_code != 201:
                    raise RuntimeError(f"the link: {made.status_code} {made.text}")
                got = 0
                with httpx.stream("GET", made.json()["url"], timeout=600) as response:
                    for piece in response.iter_raw(MIB):
                        got += len(piece)
                if got != size:
                    raise RuntimeError(f"the link gave {got} bytes of {size}")

            def raw_put(size: int) -> None:
                if not container.put_archive("/workspace", tar_of("raw.bin", size, user)):
                    raise RuntimeError("put_archive failed")

            def raw_get(size: int) -> None:
                stream, _stat = container.get_archive("/workspace/raw.bin", chunk_size=MIB)
                got = sum(len(piece) for piece in stream)
                if got < size:
                    raise RuntimeError(f"get_archive gave {got} bytes of {size}")

            variants: dict[str, Callable[[int], None]] = {
                "api put": api_put,
                "raw put": raw_put,
                "api get": api_get,
                "raw get": raw_get,
                "link get": link_get,
            }
            rng = random.Random(args.seed)
            latency = small_files(variants, args.small_rounds, rng)
            rss = RssSampler(server.process.pid)
            rss_before = rss.now()
            results: dict[int, dict[str, float]] = {}
            for size, rounds in ((64 * MIB, args.rounds), (1024 * MIB, args.big_rounds)):
                big = size > 64 * MIB
                speeds: dict[str, list[float]] = {
                    name: [] for name in variants if not (big and name == "link get")
                }
                sampler = rss if big else None
                if sampler is not None:
                    sampler.__enter__()
                for _ in range(rounds):
                    # Each pair writes before it reads; the pairs' order changes every round.
                    api = ("api put", "api get") if big else ("api put", "api get", "link get")
                    pairs = [api, ("raw put", "raw get")]
                    rng.shuffle(pairs)
                    for pair in pairs:
                        # Each write makes a new file (the workspace holds two of 1 GiB).
                        container.exec_run(
                            ["rm", "-f", "/workspace/api.bin", "/workspace/raw.bin"], user=user
                        )
                        for name in pair:
                            started = time.perf_counter()
                            variants[name](size)
                            speeds[name].append(size / MIB / (time.perf_counter() - started))
                if sampler is not None:
                    sampler.__exit__()
                results[size] = {name: statistics.median(values) for name, values in speeds.items()}
            rss_after = rss.now()
            time.sleep(args.settle)
            rss_settled = rss.now()
            client.delete(f"/api/v1/sandboxes/{sandbox_id}", params={"delete_workspace": "true"})

    print(f"\n1 KiB files, median of {args.small_rounds} (ms):")
    for way in ("put", "get"):
        raw_ms, api_ms = latency[f"raw {way}"], latency[f"api {way}"]
        print(f"  {way}: api {api_ms:.1f}, raw {raw_ms:.1f} ({raw_ms / api_ms:.2f}x as fast)")
    print()
    print(f"{'size':>8} {'variant':<8} {'MiB/s':>8}   ratio (Boxyard / raw)")
    for size, medians in results.items():
        for way in ("put", "get"):
            ratio = medians[f"api {way}"] / medians[f"raw {way}"]
            print(f"{size // MIB:>5} MiB {'raw ' + way:<8} {medians['raw ' + way]:>8.0f}")
            print(
                f"{size // MIB:>5} MiB {'api ' + way:<8} {medians['api ' + way]:>8.0f}   {ratio:.2f}x"
            )
        if "link get" in medians:
            ratio = medians["link get"] / medians["raw get"]
            print(
                f"{size // MIB:>5} MiB {'link get':<8} {medians['link get']:>8.0f}   {ratio:.2f}x"
            )
    mb = 1 / MIB
    print(
        f"\nserver RSS: {rss_before * mb:.0f} MiB before, {rss.peak * mb:.0f} MiB at the peak of "
        f"the 1 GiB transfers, {rss_after * mb:.0f} MiB right after, "
        f"{rss_settled * mb:.0f} MiB {args.settle:.0f} s after"
    )
    print()
    for size, medians in results.items():
        for way in ("put", "get"):
            ratio = medians[f"api {way}"] / medians[f"raw {way}"]
            verdict = "PASS" if ratio >= 0.8 else "FAIL"
            print(
                f"{verdict}: {size // MIB} MiB {way} at {ratio:.2f}x the raw throughput (>= 0.8x)"
            )
    link = results[64 * MIB]["link get"] / results[64 * MIB]["raw get"]
    verdict = "PASS" if link >= 0.8 else "FAIL"
    print(f"{verdict}: 64 MiB through a signed link at {link:.2f}x the raw throughput (>= 0.8x)")
    grown = (rss.peak - rss_before) * mb
    print(f"{'PASS' if grown <= 64 else 'FAIL'}: RSS grew {grown:.0f} MiB during 1 GiB (<= 64)")
    back = (rss_settled - rss_before) * mb
    print(
        f"{'PASS' if back <= 20 else 'FAIL'}: {back:.0f} MiB above the start after the wait (<= 20)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
