#!/usr/bin/env python
"""The code interpreter against commands and raw docker-py, in the same run, interleaved (each
round runs every variant once, in a new random order; see `bench_core.run_interleaved`).

The server runs as `bin/run` runs it (`manage.py serve`, with its worker), on 127.0.0.1, with a
pipeline on the default image (the one with the kernels); calls are httpx with keep-alive.

- warm: `POST /api/v1/sandboxes/{id}/code {"code": "1+1"}` in a context already started,
  against the same sum through `python3 -c` as an exec (`POST …/exec`) in the same sandbox,
  and raw docker-py's `exec_run(["python3", "-c", …])` in a container of the same image; and
  `exec true`, the path every run shares with a command, for what is the kernel's own;
- first run: a new chat's sandbox opened (not timed), then its first `1+1` timed, the kernel's
  start included; the sandbox closed;
- chart: a 1000x1000 matplotlib figure (a line of 1000 points) drawn and returned as a PNG by
  the kernel, against the kernel's own time to draw the same figure into a PNG in memory
  (`savefig`), measured inside.

It prints p50/p90/p99 per variant and the issue's targets as PASS or FAIL lines, which never
change the exit status: the warm `1+1` p50 at most 15 ms; the first run p50 at most 1.5 s; the
chart back at most 1.5x the time matplotlib takes to draw it inside.

    .venv/bin/python bench/bench_code.py [--n 100] [--n-first 10] [--n-chart 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import (
    EXTRA_EXEC_IMAGE,
    Stats,
    print_percentiles,
    print_targets,
    run_interleaved,
    timed,
)

WARM_MS, FIRST_MS, CHART_MAX = 15.0, 1500.0, 1.5
PYTHON_SUM = ["python3", "-c", "print(1+1)"]
FIGURE = (
    "fig = plt.figure(figsize=(10, 10), dpi=100)\n"
    "plt.plot(range(1000), [i * i % 97 for i in range(1000)])\n"
)
CHART = "import matplotlib.pyplot as plt\n" + FIGURE + "plt.show()"
DRAWN_INSIDE = (
    "import io, time\nimport matplotlib.pyplot as plt\n__t = time.perf_counter()\n"
    + FIGURE
    + "__b = io.BytesIO()\nfig.savefig(__b, format='png')\nplt.close(fig)\n"
    "(time.perf_counter() - __t) * 1000"
)


def measure(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Stats]:
    import httpx

    env, token, raw, _info = prepare(
        args.image, deployment, data_dir, "Boxyard code interpreter benchmark"
    )
    from pipelines.models import Pipeline  # Django was set up by prepare()

    Pipeline.objects.filter(slug=PIPELINE).update(max_live_sandboxes=200)
    stats: dict[str, Stats] = {}
    with served(env, data_dir, embedded_worker=True) as server:
        client = httpx.Client(
            base_url=server.base_url, timeout=600, headers={"Authorization": f"Bearer {token}"}
        )
        sandbox = _open(client, "warm")
        container, volume = raw.create_and_start(args.image)
        try:
            _code(client, sandbox, "1+1")  # the kernel started
            stats |= _warm(args, client, sandbox, raw, container)
            stats |= _charts(args, client, sandbox)
            stats |= _firsts(args, client)
        finally:
            raw.remove(container, volume)
            client.delete(f"/api/v1/sandboxes/{sandbox}")
            client.close()
    return stats


def _open(client: Any, chat: str) -> str:
    opened = client.post(
        "/api/v1/sandboxes/open",
        json={"pipeline": PIPELINE, "variables": {"launcher_type": "bench", "launcher_id": chat}},
    )
    if opened.status_code != 200 or opened.json().get("status") != "running":
        raise RuntimeError(f"open failed: {opened.status_code} {opened.text}")
    return str(opened.json()["sandbox_id"])


def _code(client: Any, sandbox: str, code: str) -> dict[str, Any]:
    answer = client.post(f"/api/v1/sandboxes/{sandbox}/code", json={"code": code})
    if answer.status_code != 200 or not answer.json()["ok"]:
        raise RuntimeError(f"the run failed: {answer.status_code} {answer.text[:2000]}")
    return dict(answer.json())


def _warm(
    args: argparse.Namespace, client: Any, sandbox: str, raw: Any, container: str
) -> dict[str, Stats]:
    def code() -> float:
        seconds, answer = timed(lambda: _code(client, sandbox, "1+1"))
        if answer["text"] != "2":
            raise RuntimeError(f"1+1 gave {answer['text']!r}")
        return seconds

    def exec_python() -> float:
        path = f"/api/v1/sandboxes/{sandbox}/exec"
        seconds, answer = timed(lambda: client.post(path, json={"cmd": PYTHON_SUM}))
        if answer.status_code != 200 or answer.json()["stdout"] != "2\n":
            raise RuntimeError(f"the exec failed: {answer.text}")
        return seconds

    def exec_true() -> float:
        path = f"/api/v1/sandboxes/{sandbox}/exec"
        seconds, answer = timed(lambda: client.post(path, json={"cmd": "true"}))
        if answer.status_code != 200 or answer.json()["exit_code"] != 0:
            raise RuntimeError(f"the exec failed: {answer.text}")
        return seconds

    def docker() -> float:
        seconds, exit_code = timed(lambda: raw.exec_run(container, PYTHON_SUM))
        if exit_code != 0:
            raise RuntimeError(f"the raw exec exited {exit_code}")
        return seconds

    return run_interleaved(
        {
            "code 1+1, warm": code,
            "exec python3 -c": exec_python,
            "exec true (the exec path)": exec_true,
            "raw python3 -c": docker,
        },
        args.n,
        args.warmup,
        random.Random(args.seed),
        "1+1",
    )


def _charts(args: argparse.Namespace, client: Any, sandbox: str) -> dict[str, Stats]:
    inside = Stats("chart drawn inside")

    def back() -> float:
        seconds, answer = timed(lambda: _code(client, sandbox, CHART))
        pngs = [r for r in answer["results"] if r.get("png")]
        if not pngs:
            raise RuntimeError(f"no PNG came back: {json.dumps(answer)[:2000]}")
        return seconds

    def drawn() -> float:
        answer = _code(client, sandbox, DRAWN_INSIDE)
        inside.add(float(answer["text"]) / 1000)
        return 0.0

    stats = run_interleaved(
        {"chart back (PNG)": back, "draw (not timed here)": drawn},
        args.n_chart,
        2,
        random.Random(args.seed + 1),
        "chart",
    )
    del stats["draw (not timed here)"]
    return stats | {inside.name: inside}


def _firsts(args: argparse.Namespace, client: Any) -> dict[str, Stats]:
    first = Stats("first run, kernel start")
    for index in range(args.n_first):
        sandbox = _open(client, f"first-{index}")
        try:
            seconds, _ = timed(lambda: _code(client, sandbox, "1+1"))  # noqa: B023 - called at once
            first.add(seconds)
        finally:
            client.delete(f"/api/v1/sandboxes/{sandbox}")
    return {first.name: first}


def report(stats: dict[str, Stats]) -> None:
    print_percentiles(stats)

    def median(name: str) -> float:
        return stats[name].percentiles()[0]

    checks = [
        ("1+1 in a warm context, p50 ms", median("code 1+1, warm"), "<=", WARM_MS),
        (
            "the first run in a new sandbox, p50 ms",
            median("first run, kernel start"),
            "<=",
            FIRST_MS,
        ),
        (
            "a 1000x1000 chart back / drawn inside, p50",
            median("chart back (PNG)") / median("chart drawn inside"),
            "<=",
            CHART_MAX,
        ),
    ]
    print(
        f"  1+1 warm / exec python3 -c: {median('code 1+1, warm') / median('exec python3 -c'):.2f}"
        f"; / raw python3 -c: {median('code 1+1, warm') / median('raw python3 -c'):.2f}"
    )
    print_targets(checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100, help="measured 1+1 rounds (100)")
    parser.add_argument("--warmup", type=int, default=10, help="discarded 1+1 rounds (10)")
    parser.add_argument("--n-first", type=int, default=10, help="first runs (10)")
    parser.add_argument("--n-chart", type=int, default=20, help="measured chart rounds (20)")
    parser.add_argument(
        "--image", default=EXTRA_EXEC_IMAGE, help=f"sandbox image ({EXTRA_EXEC_IMAGE})"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    os.environ.setdefault("BOXYARD_LOG_LEVEL", "WARNING")
    with throwaway("boxyard-bench-code-") as (deployment, data_dir):
        stats = measure(args, deployment, data_dir)
    report(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
