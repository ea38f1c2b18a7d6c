#!/usr/bin/env python
"""How fast a change reaches the dashboards: 100 fleet pages open in a real browser, a bot's
call changes a sandbox, and each page's table shows it; beside Docker's own event stream
delivering a container's change to a subscriber, in the same run.

Boxyard: a served Boxyard (`manage.py serve`, as `bin/run` runs it), one admin logged in, and
`--dashboards` (100) fleet pages open in one headless Chromium (Debian's, driven by Playwright),
each watching its table with a MutationObserver. A bot then takes its sandbox's lease over
again and again (`POST /api/v1/sandboxes/{id}/lease/takeover`, a new holder name each time);
each page notes the moment the new holder appears in the sandbox's row. Measured per page and
change: from the moment the call was sent, and from the moment its answer came back (the change
is committed before the answer leaves, so a page can see it a moment before the answer); and,
to tell the server's share from the browser's, from the call to the moment the websocket frame
reached the page's script (htmx's `htmx:wsBeforeMessage`, before the swap).

Raw Docker, interleaved with those rounds: a docker-py `events()` subscriber and a running
container of the same image; `docker pause`/`unpause` of it alternately, timed from the call to
the event reaching the subscriber: what an engine-level watcher would see of a change.

    .venv/bin/python bench/bench_live.py [--dashboards 100] [--changes 30] [--json PATH]

Nothing is asserted: this measures. Everything it made is removed at the end (the deployment
label `bench-<random>`), the browser closed and the server stopped.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import DEFAULT_IMAGE, Stats

PASSWORD = "a-bench-password-1"
WATCH = """
window.__seen = {};
window.__arrived = {};
document.addEventListener('htmx:wsBeforeMessage', (event) => {
  const found = String(event.detail.message).match(/bench-holder-[0-9]+/);
  if (found && !(found[0] in window.__arrived)) window.__arrived[found[0]] = Date.now();
});
new MutationObserver(() => {
  for (const cell of document.querySelectorAll('#fleet-rows td')) {
    const found = cell.textContent.match(/bench-holder-[0-9]+/);
    if (found && !(found[0] in window.__seen)) window.__seen[found[0]] = Date.now();
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def measure(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Any]:
    import httpx
    from playwright.sync_api import sync_playwright

    env, token, raw, env_info = prepare(
        args.image, deployment, data_dir, "Boxyard live-update benchmark"
    )
    from django.contrib.auth import get_user_model  # Django was set up by prepare()

    get_user_model().objects.create_user("bench-admin", password=PASSWORD, is_staff=True)
    # The raw baseline's container carries the deployment label (for the clean-up) and lives
    # through the whole run: the server's reconciler must not take it for an orphan.
    env["BOXYARD_RECONCILE_GRACE_SECONDS"] = "86400"
    since_send, since_answer, raw_ms = (
        Stats("from the call"),
        Stats("from the answer"),
        Stats("raw"),
    )
    frames = Stats("from the call to the websocket frame")
    with served(env, data_dir, embedded_worker=True) as server:
        bot = httpx.Client(
            base_url=f"{server.base_url}/api/v1",
            timeout=60,
            headers={"Authorization": f"Bearer {token}"},
        )
        sandbox_id = bot.post(
            "/sandboxes/open",
            json={
                "pipeline": PIPELINE,
                "variables": {"launcher_type": "bench", "launcher_id": "live"},
            },
        ).json()["sandbox_id"]
        container, volume = raw.create_and_start(args.image)
        events = _docker_events(raw, container)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=shutil.which("chromium"), args=["--no-sandbox"]
            )
            context = browser.new_context()
            login = context.new_page()
            login.goto(f"{server.base_url}/login/")
            login.fill("input[name=username]", "bench-admin")
            login.fill("input[name=password]", PASSWORD)
            login.click("button[type=submit]")
            login.wait_for_selector("h1")
            login.close()
            pages = []
            for _ in range(args.dashboards):
                page = context.new_page()
                page.add_init_script(WATCH)
                page.goto(f"{server.base_url}/")
                page.wait_for_selector(f"#sandbox-{sandbox_id}")
                pages.append(page)
            time.sleep(2)  # every page's websocket is connected
            print(f"  {len(pages)} dashboards open", file=sys.stderr)
            rng = random.Random(args.seed)
            order = ["boxyard", "raw"]
            paused = False
            for change in range(args.warmup + args.changes):
                rng.shuffle(order)
                for kind in order:
                    if kind == "raw":
                        paused = not paused
                        took = _raw_change(raw, container, events, paused)
                        if change >= args.warmup:
                            raw_ms.samples_ms.append(took)
                        continue
                    holder = f"bench-holder-{change}"
                    sent = time.time()
                    answer = bot.post(
                        f"/sandboxes/{sandbox_id}/lease/takeover", json={"holder": holder}
                    )
                    answered = time.time()
                    if answer.status_code != 200:
                        raise RuntimeError(f"takeover failed: {answer.status_code} {answer.text}")
                    seen = _wait_seen(pages, holder, args.timeout)
                    if change >= args.warmup:
                        for arrived, moment in seen:
                            frames.samples_ms.append(arrived - sent * 1000)
                            since_send.samples_ms.append(moment - sent * 1000)
                            since_answer.samples_ms.append(moment - answered * 1000)
                time.sleep(args.pause)
                print(
                    f"\r  changes: {change + 1}/{args.warmup + args.changes}",
                    end="",
                    file=sys.stderr,
                )
            print(file=sys.stderr)
            browser.close()
        raw.remove(container, volume)
        bot.close()
    return {
        "env": env_info,
        "send": since_send,
        "answer": since_answer,
        "frame": frames,
        "raw": raw_ms,
    }


def _wait_seen(pages: list[Any], holder: str, timeout: float) -> list[tuple[float, float]]:
    """When `holder`'s websocket frame reached each page, and when the page showed it (epoch
    ms), waiting for all of them. The pages note the moments themselves; asking them is left
    until they have had time to, so that the asking (a round trip to the browser per page)
    does not slow the pages it measures."""
    deadline = time.monotonic() + timeout
    seen: dict[int, tuple[float, float]] = {}
    time.sleep(1.5)
    while len(seen) < len(pages):
        for index, page in enumerate(pages):
            if index not in seen:
                arrived, shown = page.evaluate(
                    f"[window.__arrived['{holder}'], window.__seen['{holder}']]"
                )
                if arrived is not None and shown is not None:
                    seen[index] = (float(arrived), float(shown))
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pages) - len(seen)} dashboards never showed {holder}")
        time.sleep(0.25)
    return list(seen.values())


def _docker_events(raw: Any, container: str) -> queue.Queue[float]:
    """Docker's event stream for one container: the moment (epoch ms) each pause or unpause
    reaches this subscriber."""
    arrivals: queue.Queue[float] = queue.Queue()

    def follow() -> None:
        for event in raw.api.events(decode=True, filters={"container": container}):
            if event.get("Action") in ("pause", "unpause"):
                arrivals.put(time.time() * 1000)

    threading.Thread(target=follow, name="docker-events", daemon=True).start()
    time.sleep(0.5)
    return arrivals


def _raw_change(raw: Any, container: str, events: queue.Queue[float], pause: bool) -> float:
    sent = time.time() * 1000
    (raw.api.pause if pause else raw.api.unpause)(container)
    return events.get(timeout=30) - sent


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    send, answer, frame, raw = result["send"], result["answer"], result["frame"], result["raw"]
    print(
        f"a change reaching {args.dashboards} open dashboards ({args.changes} changes, "
        f"{send.n} page observations)"
    )
    print(f"  {'':<62} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for label, stats in (
        ("Boxyard: from the bot's call to the row on the page", send),
        ("Boxyard: from the call's answer to the row on the page", answer),
        ("Boxyard: from the bot's call to the frame reaching the page", frame),
        ("raw Docker: from pause/unpause to the events() subscriber", raw),
    ):
        p50, p90, p99 = stats.percentiles()
        print(
            f"  {label:<62} {p50:>7.1f}ms {p90:>7.1f}ms {p99:>7.1f}ms {max(stats.samples_ms):>7.1f}ms"
        )
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dashboards", type=int, default=100, help="fleet pages open (100)")
    parser.add_argument("--changes", type=int, default=30, help="measured changes (30)")
    parser.add_argument("--warmup", type=int, default=3, help="discarded changes (3)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between changes (0.5)")
    parser.add_argument(
        "--timeout", type=float, default=60, help="seconds to wait for every page (60)"
    )
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the order in each round")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    with throwaway("boxyard-bench-live-") as (deployment, data_dir):
        result = measure(args, deployment, data_dir)
    report(result, args)
    if args.json:
        payload = {
            "environment": result["env"],
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "from_call": result["send"].summary(),
            "from_answer": result["answer"].summary(),
            "from_call_to_frame": result["frame"].summary(),
            "raw_docker_events": result["raw"].summary(),
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
