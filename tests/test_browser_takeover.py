"""An admin's takeover with a ceiling, in Chromium against a served Boxyard (the operator's
BOXYARD_TAKEOVER_MAX_SECONDS set) and the real engine, the bot calling the HTTP API on the side:
the page counts the takeover down while the bot gets 423; when the time is up the page shows
the lease free with no reload, the admin's terminal closes saying why, and the bot carries on."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browsers import BROWSER, alice_user, bot_of, browser, confirm, log_in, open_tab  # noqa: F401
from tests.servers import Server, served

pytestmark = BROWSER

CEILING = 20


@pytest.fixture
def server(tmp_path: Path, docker_engine: Any) -> Iterator[Server]:
    with served(tmp_path, BOXYARD_TAKEOVER_MAX_SECONDS=str(CEILING)) as running:
        yield running


@pytest.fixture
def bot_api(alice_user: Any, server: Server, pipeline: Any) -> Iterator[tuple[httpx.Client, str]]:
    with bot_of(server, pipeline) as bot:
        yield bot


def test_the_page_counts_a_takeover_down_and_shows_its_end(bot_api, server, browser) -> None:
    bot, sandbox_id = bot_api
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(15_000)
    log_in(page, server.url)
    page.goto(f"{server.url}/sandboxes/{sandbox_id}/")
    page.wait_for_selector("[data-testid=usage]:has-text('memory')")  # the websocket is open
    page.click("[data-testid=takeover]")
    confirm(page, saying="423")
    warning = page.locator("[data-testid=lease-warning]")
    warning.wait_for()
    page.wait_for_selector("[data-testid=usage]:has-text('memory')")
    page.evaluate("() => { window.notReloaded = true; }")
    assert "Takeover time limit" in warning.inner_text()
    first = warning.locator("time").inner_text()
    page.wait_for_function(
        "(first) => document.querySelector('[data-testid=lease-warning] time').innerText !== first",
        arg=first,
    )  # it counts down
    refused = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
    assert refused.status_code == 423, refused.text

    open_tab(page, "terminal")
    page.click("#terminal-open")
    page.wait_for_selector("#terminal[data-state=open]")

    # The time is up: the terminal closes, saying why, and the page shows the lease free.
    page.wait_for_selector("#terminal[data-state=closed]", timeout=(CEILING + 20) * 1000)
    page.wait_for_function(
        "() => document.querySelector('#terminal').textContent.replace(/\\s+/g, ' ')"
        ".includes('The lease is lost (the lease is free: the takeover reached its time limit')"
    )
    page.wait_for_selector("[data-testid=lease]:has-text('free')", state="attached")
    assert warning.count() == 0
    assert page.evaluate("() => window.notReloaded") is True
    assert bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "true"}).status_code == 200
    open_tab(page, "events")
    page.wait_for_selector("#events :text('lease.expired')")
    page.close()
