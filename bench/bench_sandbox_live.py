#!/usr/bin/env python
"""How fast a bot's command reaches an open sandbox page: 1 and then 10 pages of one sandbox
open in a real browser, a bot runs `echo`, and each page's command list shows it; beside
Docker's own event stream delivering the exec's end to a subscriber, in the same run.

Boxyard: a served Boxyard (`manage.py serve`, as `bin/run` runs it), one admin logged in, and
the sandbox's page (`/sandboxes/<id>/`, its commands' tab: `#tab-commands`) open in one headless Chromium (Debian's, driven by
Playwright), first once, then `--pages` (10) times, each page watching its command list
(`#execs`) with a MutationObserver. The bot runs `echo bench-marker-N` in the foreground
(`POST /api/v1/sandboxes/{id}/exec`), `--changes` (30) times per phase, 0.5 s apart; each page
notes when the command's row first appears (its command, shown while it runs), when its
output does (the finished row), and when the websocket frame carrying that output reached the
page's script (`htmx:wsBeforeMessage`, before the swap). Measured per page and command, from
the moment the call was sent and from the moment its answer came back (the exec is saved and
said to the pages before the answer leaves, so a page can show it a moment before).

Raw Docker, interleaved with those commands (each round runs both once, in a new random
order): a docker-py `events()` subscriber and a running container of the same image;
`docker exec` of `echo` in it (`exec_create` + `exec_start`), timed from the call, and from its
return, to its `exec_die` event reaching the subscriber: what an engine-level watcher would see
of a command.

    .venv/bin/python bench/bench_sandbox_live.py [--pages 10] [--changes 30] [--json PATH]

It prints p50/p90/p99 and a PASS or FAIL line per phase for the target (p50 at most 50 ms from
the call's answer to the output on the page); the exit status does not depend on it.
Everything it made is removed at the end (the deployment label `bench-<random>`), the browser
closed and the server stopped.
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
TARGET_MS = 50.0
WATCH = """
window.__row = {};
window.__out = {};
window.__frame = {};
const note = (seen, text, pattern) => {
  const found = text.match(pattern);
  if (found && !(found[1] in seen)) seen[found[1]] = Date.now();
};
document.addEventListener('htmx:wsBeforeMessage', (event) => {
  note(window.__frame, String(event.detail.message), /class="out">(bench-marker-[0-9]+)/);
});
new MutationObserver(() => {
  const execs = document.getElementById('execs');
  if (!execs) return;
  for (const cell of execs.querySelectorAll('code')) {
    note(window.__row, cell.textContent, /(bench-marker-[0-9]+)/);
  }
  for (const out of execs.querySelectorAll('pre.out')) {
    note(window.__out, out.textContent, /(bench-marker-[0-9]+)/);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
FIGURES = {  # key: what it measures
    "answer": "Boxyard: from the call's answer to the output on the page",
    "send": "Boxyard: from the bot's call to the output on the page",
    "row": "Boxyard: from the bot's call to the command's row on the page",
    "frame": "Boxyard: from the bot's call to the output's frame reaching the page",
    "call": "Boxyard: the bot's call itself (foreground exec over HTTP)",
    "raw": "raw Docker: from docker exec's call to exec_die at the subscriber",
    "raw answer": "raw Docker: from docker exec's return to exec_die at the subscriber",
    "raw call": "raw Docker: docker exec itself (exec_create + exec_start)",
}


def phase_stats() -> dict[str, Stats]:
    return {key: Stats(key) for key in FIGURES}


def measure(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Any]:
    import httpx
    from playwright.sync_api import sync_playwright

    env, token, raw, env_info = prepare(
        args.image, deployment, data_dir, "Boxyard sandbox page live-update benchmark"
    )
    from django.contrib.auth import get_user_model  # Django was set up by prepare()

    get_user_model().objects.create_user("bench-admin", password=PASSWORD, is_staff=True)
    # The raw baseline's container carries the deployment label (for the clean-up) and lives
    # through the whole run: the server's reconciler must not take it for an orphan.
    env["BOXYARD_RECONCILE_GRACE_SECONDS"] = "86400"
    phases: dict[int, dict[str, Stats]] = {}
    with served(env, data_dir, embedded_worker=True) as server:
        bot = httpx.Client(
            base_url=f"{server.base_url}/api/v1",
            timeout=60,
            headers={"Authorization": f"Bearer {token}"},
        )
        opened = bot.post(
            "/sandboxes/open",
            json={
                "pipeline": PIPELINE,
                "variables": {"launcher_type": "bench", "launcher_id": "sandbox-live"},
            },
        )
        if opened.status_code != 200 or opened.json().get("status") != "running":
            raise RuntimeError(f"open failed: {opened.status_code} {opened.text}\n{server.tail()}")
        sandbox_id = opened.json()["sandbox_id"]
        container, volume = raw.create_and_start(args.image)
        events = _docker_events(raw, container)
        rng = random.Random(args.seed)
        markers = iter(range(1_000_000))
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
            pages: list[Any] = []
            for count in sorted({1, args.pages}):
                while len(pages) < count:
                    page = context.new_page()
                    page.add_init_script(WATCH)
                    # The commands' tab, as an admin watching them would have it.
                    page.goto(f"{server.base_url}/sandboxes/{sandbox_id}/#tab-commands")
                    page.wait_for_selector("#execs")
                    pages.append(page)
                time.sleep(2)  # every page's websocket is connected
                print(f"  the sandbox's page open {len(pages)} times", file=sys.stderr)
                phases[count] = stats = phase_stats()
                order = ["boxyard", "raw"]
                for change in range(args.warmup + args.changes):
                    rng.shuffle(order)
                    keep = change >= args.warmup
                    for kind in order:
                        if kind == "raw":
                            _raw_exec(raw, container, events, stats if keep else phase_stats())
                        else:
                            _boxyard_exec(
                                bot,
                                sandbox_id,
                                pages,
                                f"bench-marker-{next(markers)}",
                                stats if keep else phase_stats(),
                                args.timeout,
                            )
                    time.sleep(args.pause)
                    if sys.stderr.isatty():
                        total = args.warmup + args.changes
                        print(f"\r  commands: {change + 1}/{total}", end="", file=sys.stderr)
                print(
                    f"\r  {count} pages: {args.warmup + args.changes} commands, the first "
                    f"{args.warmup} discarded",
                    file=sys.stderr,
                )
            browser.close()
        raw.remove(container, volume)
        bot.delete(f"/sandboxes/{sandbox_id}", params={"delete_workspace": "true"})
        bot.close()
    return {"env": env_info, "phases": phases}


def _boxyard_exec(
    bot: Any, sandbox_id: str, pages: list[Any], marker: str, stats: dict[str, Stats], wait: float
) -> None:
    sent = time.time()
    answer = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": ["echo", marker]})
    answered = time.time()
    body = answer.json()
    if answer.status_code != 200 or body.get("exit_code") != 0:
        raise RuntimeError(f"the exec failed: {answer.status_code} {body}")
    stats["call"].samples_ms.append((answered - sent) * 1000)
    for row, out, frame in _wait_seen(pages, marker, wait):
        stats["send"].samples_ms.append(out - sent * 1000)
        stats["answer"].samples_ms.append(out - answered * 1000)
        stats["row"].samples_ms.append(row - sent * 1000)
        stats["frame"].samples_ms.append(frame - sent * 1000)


def _wait_seen(pages: list[Any], marker: str, timeout: float) -> list[tuple[float, float, float]]:
    """When each page showed `marker`'s row and its output, and when the output's frame
    reached it (epoch ms), waiting for all of them. The pages note the moments themselves;
    asking them is left until they have had time to, so that the asking (a round trip to the
    browser per page) does not slow the pages it measures."""
    deadline = time.monotonic() + timeout
    seen: dict[int, tuple[float, float, float]] = {}
    time.sleep(0.5)
    while len(seen) < len(pages):
        for index, page in enumerate(pages):
            if index not in seen:
                moments = page.evaluate(
                    f"[window.__row['{marker}'], window.__out['{marker}'], "
                    f"window.__frame['{marker}']]"
                )
                if None not in moments:
                    row, out, frame = (float(moment) for moment in moments)
                    seen[index] = (row, out, frame)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pages) - len(seen)} sandbox pages never showed {marker}")
        time.sleep(0.25)
    return list(seen.values())


def _docker_events(raw: Any, container: str) -> queue.Queue[float]:
    """Docker's event stream for one container: the moment (epoch ms) each exec's end
    (`exec_die`) reaches this subscriber."""
    arrivals: queue.Queue[float] = queue.Queue()

    def follow() -> None:
        for event in raw.api.events(decode=True, filters={"container": container}):
            if str(event.get("Action", "")).startswith("exec_die"):
                arrivals.put(time.time() * 1000)

    threading.Thread(target=follow, name="docker-events", daemon=True).start()
    time.sleep(0.5)
    return arrivals


def _raw_exec(
    raw: Any, container: str, events: queue.Queue[float], stats: dict[str, Stats]
) -> None:
    """`docker exec <container> echo ...`: what the CLI asks of the engine."""
    sent = time.time() * 1000
    created = raw.api.exec_create(container, ["echo", "bench-raw"], stdout=True, stderr=True)
    output = raw.api.exec_start(created["Id"])
    answered = time.time() * 1000
    arrived = events.get(timeout=30)
    if output.strip() != b"bench-raw":
        raise RuntimeError(f"the raw exec said {output!r}")
    stats["raw"].samples_ms.append(arrived - sent)
    stats["raw answer"].samples_ms.append(arrived - answered)
    stats["raw call"].samples_ms.append(answered - sent)


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    for count, stats in result["phases"].items():
        print(
            f"a command reaching {count} open sandbox page{'s' if count > 1 else ''} "
            f"({stats['call'].n} commands, {stats['send'].n} page observations)"
        )
        print(f"  {'':<70} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
        for key, label in FIGURES.items():
            p50, p90, p99 = stats[key].percentiles()
            print(
                f"  {label:<70} {p50:>7.1f}ms {p90:>7.1f}ms {p99:>7.1f}ms "
                f"{max(stats[key].samples_ms):>7.1f}ms"
            )
        ratios = "/".join(f"{r:.2f}" for r in stats["send"].ratios_to(stats["raw"]))
        print(f"  from the call, Boxyard / raw, p50/p90/p99: {ratios}")
        p50 = stats["answer"].percentile(50)
        verdict = "PASS" if p50 <= TARGET_MS else "FAIL"
        print(
            f"{verdict} sandbox page, p50 <= {TARGET_MS:.0f} ms (from the call's answer to the "
            f"output on the page, {count} page{'s' if count > 1 else ''}: {p50:.1f} ms)"
        )
        print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10, help="pages of the second phase (10)")
    parser.add_argument("--changes", type=int, default=30, help="measured commands (30)")
    parser.add_argument("--warmup", type=int, default=3, help="discarded commands (3)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between commands (0.5)")
    parser.add_argument(
        "--timeout", type=float, default=60, help="seconds to wait for every page (60)"
    )
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"sandbox image ({DEFAULT_IMAGE})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the order in each round")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    with throwaway("boxyard-bench-sandbox-live-") as (deployment, data_dir):
        result = measure(args, deployment, data_dir)
    print(f"seed {args.seed}, image {args.image}")
    report(result, args)
    if args.json:
        payload = {
            "environment": result["env"],
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "phases": {
                str(count): {key: stats[key].summary() for key in FIGURES}
                for count, stats in result["phases"].items()
            },
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
