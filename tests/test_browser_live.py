"""An open sandbox page follows what the bot does, with no reload: its commands (foreground,
background, fresh), its files, its shell sessions and a managed process that the agent starts
again; the page's dangerous buttons ask first, and "Run as me" answers in place. In Chromium,
against a served Boxyard and the real engine, the bot calling the HTTP API on the side."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browsers import BROWSER, alice_user, bot_of, browser, confirm, log_in, open_tab, server  # noqa: F401
from tests.servers import Server

pytestmark = BROWSER


@pytest.fixture
def bot_api(
    alice_user: Any, server: Server, make_pipeline: Any
) -> Iterator[tuple[httpx.Client, str]]:
    """The bot of a pipeline with a managed process that keeps dying, and its open sandbox;
    made, like alice, before the browser starts."""
    pipeline = make_pipeline(
        slug="support", processes=[{"name": "flaky", "cmd": "echo up; sleep 2; exit 3"}]
    )
    with bot_of(server, pipeline) as bot:
        yield bot


def test_the_open_page_follows_the_bot(bot_api, server, browser) -> None:
    bot, sandbox_id = bot_api
    base = f"/sandboxes/{sandbox_id}"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(15_000)
    log_in(page, server.url)
    page.goto(f"{server.url}{base}/")
    page.wait_for_selector("[data-testid=usage]:has-text('memory')")  # the websocket is open
    open_tab(page, "files")
    page.wait_for_selector("#files-view table")
    page.evaluate("() => { window.notReloaded = true; }")

    def call(method: str, path: str, **request: Any) -> dict[str, Any]:
        answer = bot.request(method, f"{base}{path}", **request)
        assert answer.status_code in (200, 201, 204), answer.text
        return answer.json() if answer.content else {}

    # Commands: foreground, fresh, background (in Processes until it is killed).
    open_tab(page, "commands")
    call("POST", "/exec", json={"cmd": "echo fg-marker"})
    page.wait_for_selector("#execs :text('echo fg-marker')")
    call("POST", "/exec", json={"cmd": "echo fresh-marker", "fresh": True})
    page.wait_for_selector("#execs :text('echo fresh-marker')")
    open_tab(page, "processes")
    background = call("POST", "/exec", json={"cmd": "sleep 300 # bg-marker", "background": True})
    page.wait_for_selector("#processes-view :text('bg-marker')")
    call("POST", f"/execs/{background['exec_id']}/kill", json={})
    page.wait_for_selector("#processes-view :text('bg-marker')", state="detached")

    # Files: the browser shows a file the bot writes, and drops it when the bot deletes it.
    open_tab(page, "files")
    call("PUT", "/files", json={"path": "notes.txt", "contents": "hi"})
    page.wait_for_selector("#files-view a:has-text('notes.txt')")
    call("DELETE", "/files", params={"path": "notes.txt"})
    page.wait_for_selector("#files-view a:has-text('notes.txt')", state="detached")
    # While another tab is shown the listing waits, and is fetched again when Files is.
    open_tab(page, "commands")
    call("PUT", "/files", json={"path": "later.txt", "contents": "hi"})
    page.wait_for_selector("#files-view[data-stale]", state="attached")
    assert page.locator("#files-view a:has-text('later.txt')").count() == 0
    open_tab(page, "files")
    page.wait_for_selector("#files-view a:has-text('later.txt')")

    # A shell session, and where a command moved it.
    open_tab(page, "processes")
    call("POST", "/sessions", json={"name": "build"})
    page.wait_for_selector("#sessions-view tr[data-session=build]")
    call("POST", "/exec", json={"cmd": "cd /tmp", "session": "build"})
    page.wait_for_selector(
        "#sessions-view tr[data-session=build] [data-testid=cwd]:text-is('/tmp')"
    )

    # The managed process dies after 2 s and the agent starts it again: the count rises.
    restarts = page.locator("#processes-view tr[data-process=flaky] [data-testid=restarts]")
    seen = int(restarts.inner_text())
    page.wait_for_function(
        f"""() => Number(document.querySelector(
            "#processes-view tr[data-process=flaky] [data-testid=restarts]").textContent) > {seen}""",
        timeout=45_000,  # the agent's backoff doubles with each death, up to 30 s
    )

    # Dangerous actions ask first, naming the sandbox; no sends nothing.
    open_tab(page, "overview")
    page.click("[data-testid=takeover]")
    confirm(page, saying="Take over group_123456?", answer=False)
    call("POST", "/exec", json={"cmd": "true"})  # still the bot's
    assert page.evaluate("() => window.notReloaded") is True
    page.click("[data-testid=takeover]")
    confirm(page, saying="group_123456")
    page.wait_for_selector(".messages :text('You hold the lease of group_123456')")
    page.wait_for_selector("[data-testid=lease]:has-text('admin:alice')")
    assert bot.post(f"{base}/exec", json={"cmd": "true"}).status_code == 423
    page.wait_for_selector("[data-testid=takeover][disabled]")  # it is the admin's now

    # Run as me: answered under the form; the page, and its open terminal, stay.
    open_tab(page, "terminal")
    page.click("#terminal-open")
    page.wait_for_selector("#terminal[data-state=open]")
    page.evaluate("() => { window.notReloaded = true; }")
    page.fill("input[name=cmd]", "echo run-$((6*7)); exit 4")
    page.click("[data-testid=run]")
    page.wait_for_selector("[data-testid=run-stdout]:has-text('run-42')")
    page.wait_for_selector("[data-testid=run-result]:has-text('exit code 4')")
    assert page.evaluate("() => window.notReloaded") is True
    assert page.get_attribute("#terminal", "data-state") == "open"
    open_tab(page, "commands")
    page.wait_for_selector("#execs :text('admin:alice')")  # and it joined the history

    # Destroy selected, with nothing selected, neither asks nor sends.
    page.goto(f"{server.url}/")
    page.wait_for_selector(f"#sandbox-{sandbox_id}")
    page.evaluate("() => { window.notReloaded = true; }")
    page.click("[data-testid=destroy-selected]")
    page.wait_for_timeout(500)
    assert page.is_hidden("#confirm-dialog")
    assert page.evaluate("() => window.notReloaded") is True

    # The fleet sorts by a column from its header, and searches by the token behind a lease.
    page.click("th a[data-sort=key]")
    page.wait_for_url("**sort=key**")
    page.wait_for_selector("th[aria-sort=ascending] a[data-sort=key]")
    page.click("th a[data-sort=key]")
    page.wait_for_selector("th[aria-sort=descending] a[data-sort=key]")
    page.fill("input[name=q]", sandbox_id[:8])
    page.press("input[name=q]", "Enter")
    page.wait_for_url(f"**q={sandbox_id[:8]}**")
    page.wait_for_selector(f"#sandbox-{sandbox_id}")
    assert "sort=-key" in page.url  # the search keeps the sort
    page.fill("input[name=q]", "no-such-chat")
    page.press("input[name=q]", "Enter")
    page.wait_for_selector("#fleet-empty:not([hidden])")
