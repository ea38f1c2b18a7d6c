#!/usr/bin/env python
"""How fast a change reaches the dashboards: 100 fleet pages open, a bot's call changes a
sandbox, and each page's table shows it; beside Docker's own event stream delivering a
container's change to a subscriber, in the same run.

Boxyard: a served Boxyard (`manage.py serve`, as `bin/run` runs it) and one admin logged in
(in a headless Chromium, Debian's, driven by Playwright). A bot takes its sandbox's lease over
again and again (`POST /api/v1/sandboxes/{id}/lease/takeover`, a new holder name each time), in
two parts, one after the other, on the same server:

1. `--dashboards` (100) fleet pages open in that one Chromium, each watching its table with a
   MutationObserver. Each page notes the moment the new holder appears in the sandbox's row.
   Measured per page and change: from the moment the call was sent, and from the moment its
   answer came back (the change is committed before the answer leaves, so a page can see it a
   moment before the answer); and, to tell the server's share from the browser's, from the call
   to the moment the websocket frame reached the page's script (htmx's `htmx:wsBeforeMessage`,
   before the swap).
2. Those pages closed, `--dashboards` fleet pages as that many admins would have them, each in
   a browser of its own: `--browsers` (5) fresh Chromium pages, measured as in part 1, and the
   rest plain websocket clients (the `websockets` library, all on one asyncio loop in a child
   process, `bench_live_clients.py`) on the URL the page's websocket uses, with the admin's
   session and CSRF cookies from the browser and the page's Origin, User-Agent and
   Accept-Language. The pages are opened one at a time amid the clients (the server hands a
   change to the pages in the order they connected). Each client notes the moment a frame
   naming the new holder is handed to it; measured per client and change from the moment the
   call was sent: the server's share, without a browser's (but with the client process's own
   reading of its sockets, one after another).

Raw Docker, interleaved with the rounds of both parts: a docker-py `events()` subscriber and a
running container of the same image; `docker pause`/`unpause` of it alternately, timed from the
call to the event reaching the subscriber: what an engine-level watcher would see of a change.

    .venv/bin/python bench/bench_live.py [--dashboards 100] [--browsers 5] [--changes 30]
        [--json PATH]

Nothing is asserted: this measures. Everything it made is removed at the end (the deployment
label `bench-<random>`), the clients and the browser closed and the server stopped.
"""

from __future__ import annotations

import argparse
import json
import os
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
from bench_live_clients import FleetClients

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
        rounds = Rounds(args, bot, sandbox_id, raw, container, _docker_events(raw, container))
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
            pages, _ = _open_pages(context, server.base_url, sandbox_id, args.dashboards)
            print(f"  {len(pages)} dashboards open in Chromium", file=sys.stderr)
            one_browser = rounds.run(pages, first_holder=0)
            for page in pages:
                page.close()
            (probe,), sent = _open_pages(context, server.base_url, sandbox_id, 1)
            path = probe.get_attribute("#fleet-live", "ws-connect")
            probe.close()
            cookies = context.cookies(server.base_url)
            headers = {
                "Origin": server.base_url,
                "User-Agent": sent["user-agent"],
                "Accept-Language": sent["accept-language"],
                "Cookie": "; ".join(f"{c['name']}={c['value']}" for c in cookies),
            }
            url = server.base_url.replace("http://", "ws://", 1) + str(path)
            count = args.dashboards - args.browsers
            with FleetClients(url, headers, args.timeout) as clients:
                # The fleet's group hands a change to its pages in the order they joined: the
                # Chromium pages are spread through it, each amid its share of the clients.
                pages, connected = [], 0
                for index in range(args.browsers):
                    before = round((index + 0.5) * count / args.browsers)
                    clients.connect(before - connected)
                    connected = before
                    pages += _open_pages(context, server.base_url, sandbox_id, 1)[0]
                clients.connect(count - connected)
                print(f"  {count} websocket clients and {len(pages)} pages open", file=sys.stderr)
                apart = rounds.run(pages, first_holder=args.warmup + args.changes)
                arrivals = clients.arrivals()
            browser.close()
        raw.remove(container, volume)
        bot.close()
    clients_frame = Stats("from the call to the frame at the websocket clients")
    for holder, sent_ms in apart.pop("sent").items():
        missing = sum(holder not in seen for seen in arrivals)
        if missing:
            raise RuntimeError(f"{missing} websocket clients never had {holder}")
        clients_frame.samples_ms.extend(seen[holder] - sent_ms for seen in arrivals)
    one_browser.pop("sent")
    return {
        "env": env_info,
        "one_browser": one_browser,
        "apart": {**apart, "clients": clients_frame},
    }


def _open_pages(
    context: Any, base_url: str, sandbox_id: str, count: int
) -> tuple[list[Any], dict[str, str]]:
    """`count` fleet pages watching their table, and the headers the browser sent for them."""
    pages, sent = [], {}
    for _ in range(count):
        page = context.new_page()
        page.add_init_script(WATCH)
        sent = page.goto(f"{base_url}/").request.all_headers()
        page.wait_for_selector(f"#sandbox-{sandbox_id}")
        pages.append(page)
    time.sleep(2)  # every page's websocket is connected
    return pages, sent


class Rounds:
    """The bot's changes, each interleaved with a raw Docker one in a random order."""

    def __init__(
        self,
        args: argparse.Namespace,
        bot: Any,
        sandbox_id: str,
        raw: Any,
        container: str,
        events: queue.Queue[float],
    ) -> None:
        self.args, self.bot, self.sandbox_id = args, bot, sandbox_id
        self.raw, self.container, self.events = raw, container, events
        self.rng = random.Random(args.seed)
        self.paused = False  # the raw container's state, across sections

    def run(self, pages: list[Any], first_holder: int) -> dict[str, Any]:
        """Per page and measured change: from the call and from its answer to the row, and
        from the call to the frame reaching the page's script; the raw changes; and when each
        measured holder's call was sent (epoch ms)."""
        args = self.args
        since_send, since_answer, raw_ms = (
            Stats("from the call"),
            Stats("from the answer"),
            Stats("raw"),
        )
        frames = Stats("from the call to the websocket frame")
        sent_ms: dict[str, float] = {}
        order = ["boxyard", "raw"]
        for change in range(args.warmup + args.changes):
            self.rng.shuffle(order)
            for kind in order:
                if kind == "raw":
                    self.paused = not self.paused
                    took = _raw_change(self.raw, self.container, self.events, self.paused)
                    if change >= args.warmup:
                        raw_ms.samples_ms.append(took)
                    continue
                holder = f"bench-holder-{first_holder + change}"
                sent = time.time()
                answer = self.bot.post(
                    f"/sandboxes/{self.sandbox_id}/lease/takeover", json={"holder": holder}
                )
                answered = time.time()
                if answer.status_code != 200:
                    raise RuntimeError(f"takeover failed: {answer.status_code} {answer.text}")
                seen = _wait_seen(pages, holder, args.timeout)
                if change >= args.warmup:
                    sent_ms[holder] = sent * 1000
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
        return {
            "send": since_send,
            "answer": since_answer,
            "frame": frames,
            "raw": raw_ms,
            "sent": sent_ms,
            "load": os.getloadavg(),
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
    one, apart = result["one_browser"], result["apart"]
    print(
        f"a change reaching {args.dashboards} dashboards open in one Chromium "
        f"({args.changes} changes, {one['send'].n} page observations; "
        f"load average {one['load'][0]:.1f} at its end)"
    )
    _table(
        (
            ("Boxyard: from the bot's call to the row on the page", one["send"]),
            ("Boxyard: from the call's answer to the row on the page", one["answer"]),
            ("Boxyard: from the bot's call to the frame reaching the page", one["frame"]),
            ("raw Docker: from pause/unpause to the events() subscriber", one["raw"]),
        ),
        (("from the call to the row on the page", one["send"], one["raw"]),),
    )
    count = args.dashboards - args.browsers
    print(
        f"a change reaching {args.dashboards} dashboards as {args.dashboards} admins have them: "
        f"{count} websocket clients in a process of their own and {args.browsers} Chromium pages "
        f"({args.changes} changes, {apart['clients'].n} client frames, "
        f"{apart['send'].n} page observations; load average {apart['load'][0]:.1f} at its end)"
    )
    _table(
        (
            (
                "Boxyard: from the bot's call to the frame at the websocket clients",
                apart["clients"],
            ),
            ("Boxyard: from the bot's call to the row on the Chromium pages", apart["send"]),
            ("Boxyard: from the call's answer to the row on the Chromium pages", apart["answer"]),
            (
                "Boxyard: from the bot's call to the frame reaching the Chromium pages",
                apart["frame"],
            ),
            ("raw Docker: from pause/unpause to the events() subscriber", apart["raw"]),
        ),
        (
            ("from the call to the frame at the websocket clients", apart["clients"], apart["raw"]),
            ("from the call to the row on the Chromium pages", apart["send"], apart["raw"]),
        ),
    )


def _table(rows: Any, ratios: Any) -> None:
    print(f"  {'':<70} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for label, stats in rows:
        p50, p90, p99 = stats.percentiles()
        top = max(stats.samples_ms)
        print(f"  {label:<70} {p50:>7.1f}ms {p90:>7.1f}ms {p99:>7.1f}ms {top:>7.1f}ms")
    for label, stats, raw in ratios:
        p50, p90, p99 = stats.ratios_to(raw)
        print(f"  Boxyard / raw, {label}, p50/p90/p99: {p50:.2f}x / {p90:.2f}x / {p99:.2f}x")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dashboards", type=int, default=100, help="fleet pages open (100)")
    parser.add_argument(
        "--browsers", type=int, default=5, help="of those, Chromium pages in the second part (5)"
    )
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
    if not 1 <= args.browsers < args.dashboards:
        parser.error("--browsers must be at least 1 and fewer than --dashboards")
    if args.seed is None:
        args.seed = random.randrange(2**32)
    with throwaway("boxyard-bench-live-") as (deployment, data_dir):
        result = measure(args, deployment, data_dir)
    report(result, args)
    if args.json:
        one, apart = result["one_browser"], result["apart"]
        payload = {
            "environment": result["env"],
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "from_call": one["send"].summary(),
            "from_answer": one["answer"].summary(),
            "from_call_to_frame": one["frame"].summary(),
            "raw_docker_events": one["raw"].summary(),
            "load_average_at_end": one["load"],
            "as_admins_have_them": {
                "from_call_to_frame_at_websocket_clients": apart["clients"].summary(),
                "from_call_to_row_on_chromium_pages": apart["send"].summary(),
                "from_answer_to_row_on_chromium_pages": apart["answer"].summary(),
                "from_call_to_frame_at_chromium_pages": apart["frame"].summary(),
                "raw_docker_events": apart["raw"].summary(),
                "load_average_at_end": apart["load"],
            },
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
