"""The Hosts page in Chromium, over two real Docker hosts (the machine's engine and a second
one of the tests' own, `tests/engines.py`) with sandboxes on both: an admin drains one after
the page's question, the page says so, a bot's new sandbox goes to the other and its load
moves on the open page with no reload; the fleet filters by host; the page fits a phone in
English and Chinese with text of 4.5:1 contrast. With BOXYARD_SCREENSHOTS set, it is shot
for docs/screenshots, on a desktop and at 390 px, in both languages."""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from boxyard.actors import Actor
from hosts import keeper, services
from hosts.engines import forget_all
from pipelines.models import PipelineToken
from sandboxes import services as sandbox_services
from tests.browsers import BROWSER, alice_user, browser, confirm, log_in, server, shoot  # noqa: F401
from tests.conftest import CHAT
from tests.engines import SecondEngine, second_engine  # noqa: F401 - fixtures
from tests.servers import Server
from tests.test_browser_pages import CONTRAST, PHONE, WIDER, WIDTH

pytestmark = BROWSER


@pytest.fixture
def two_hosts(
    alice_user: Any, server: Server, second_engine: SecondEngine, make_pipeline: Any
) -> Iterator[str]:
    """`local` with two sandboxes of `support`, `second` (zone b, 8 CPUs and 16 GiB for
    sandboxes) with two of `zoned`, both read by a health check; a token of `support`'s bot.
    Made before the browser starts; afterwards the second engine runs none of them."""
    forget_all()
    second = services.add_host(
        Actor("admin", "alice"), "second", url=second_engine.url, labels={"zone": "b"},
        cpus=8.0, memory_mb=16384, max_sandboxes=50,
    )  # fmt: skip
    try:
        assert keeper.check(second)
        bot = Actor("bot", "support-bot")
        support = make_pipeline(slug="support", cpus=1.0, memory_mb=1024)
        zoned = make_pipeline(slug="zoned", cpus=2.0, memory_mb=2048, host_labels={"zone": "b"})
        for number in range(2):
            chat = {**CHAT, "launcher_id": f"{number}"}
            assert sandbox_services.open_sandbox(support, chat, bot).sandbox.host.name == "local"
            assert sandbox_services.open_sandbox(zoned, chat, bot).sandbox.host.name == "second"
        yield PipelineToken.issue(support, name="bot")[1]
    finally:
        if not second_engine.running:
            second_engine.start()
        second_engine.clean()
        forget_all()


def test_an_admin_drains_a_host_and_watches_the_load_move(two_hosts, server, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(15_000)
    log_in(page, server.url)
    page.click("header nav a:has-text('Hosts')")
    page.wait_for_selector("h1:has-text('Hosts')")
    second = "#host-second"
    assert "2 of 50" in page.inner_text(f"{second} [data-testid=sandboxes]")
    assert "4 of 8 reserved" in page.inner_text(f"{second} [data-testid=cpus]")
    assert "4096 of 16384 reserved" in page.inner_text(f"{second} [data-testid=memory]")
    assert "2 of 500" in page.inner_text("#host-local [data-testid=sandboxes]")
    assert page.inner_text(f"{second} [data-testid=condition]") == "active"

    # Drain: the page asks, naming what happens, then says what it did.
    page.click("[data-testid=drain-second]")
    confirm(page, saying="Drain second? No new sandbox is placed there; the 2 sandboxes on it")
    page.wait_for_selector(".messages :text('second is draining')")
    assert page.inner_text(f"{second} [data-testid=condition]") == "draining"
    page.evaluate("() => { window.notReloaded = true; }")

    # A bot's new sandbox goes to the host that is not draining; the open page follows.
    with httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {two_hosts}"}
    ) as bot:
        opened = bot.post(
            "/sandboxes/open",
            json={"pipeline": "support", "variables": {**CHAT, "launcher_id": "new"}},
            timeout=60,
        )
        assert opened.status_code == 200, opened.text
    page.wait_for_selector("#host-local [data-testid=sandboxes]:has-text('3 of 500')")
    assert page.evaluate("() => window.notReloaded") is True
    assert page.evaluate(CONTRAST) == [], "/hosts/"
    shoot(page, "hosts")

    # The fleet, by host.
    page.click(f"{second} [data-testid=fleet-second]")
    page.wait_for_selector("[data-testid=host-filter]")
    assert page.input_value("[data-testid=host-filter]") == "second"
    assert page.locator("#fleet-rows tr").count() == 2
    page.select_option("[data-testid=host-filter]", "local")
    page.wait_for_url("**host=local**")
    assert page.locator("#fleet-rows tr").count() == 3

    # A host's page: its facts, its events (the drain, as alice), its form.
    page.goto(f"{server.url}/hosts/second/")
    page.wait_for_selector("#host-events [data-action='host.draining']")
    assert "the admin alice" in page.inner_text("#host-events")
    assert page.evaluate(CONTRAST) == [], "/hosts/second/"

    for language in ("en", "zh-hans"):
        phone = browser.new_context(viewport=PHONE)
        phone.add_cookies([{"name": "django_language", "value": language, "url": server.url}])
        small = phone.new_page()
        small.set_default_timeout(15_000)
        small.goto(f"{server.url}/login/")
        small.fill("input[name=username]", "alice")
        small.fill("input[name=password]", "a-long-test-password")
        small.click("button[type=submit]")
        small.wait_for_selector("main h1")
        for path in ("/hosts/", "/hosts/second/", "/hosts/new"):
            small.goto(f"{server.url}{path}")
            small.wait_for_load_state("load")
            small.wait_for_timeout(300)  # the websocket's first render is in
            assert small.evaluate(WIDTH) <= PHONE["width"], (language, path, small.evaluate(WIDER))
        small.goto(f"{server.url}/hosts/")
        small.wait_for_selector("#host-second .badge-draining")
        shoot(small, f"hosts-{language}-390")
        phone.close()
    page.context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": server.url}])
    page.goto(f"{server.url}/hosts/")
    page.wait_for_selector("#host-second .badge-draining")
    page.wait_for_timeout(300)
    shoot(page, "hosts-zh-hans")
