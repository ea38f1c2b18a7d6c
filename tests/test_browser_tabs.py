"""The sandbox page as tabs, in Chromium against a served Boxyard and the real engine: the tabs
follow a click and the arrow keys, the URL's fragment keeps the chosen one across a reload,
a push of the bot's reaches a tab not shown, the Copy button copies the sandbox's id, a past
moment reads in words with its exact time on hover; and without JavaScript, every panel shows.
"""

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browsers import BROWSER, alice_user, bot_of, browser, log_in, open_tab, server  # noqa: F401
from tests.servers import Server

pytestmark = BROWSER

# The tabs of a running sandbox, in their order.
TABS = ["overview", "terminal", "files", "processes", "commands", "events"]


@pytest.fixture
def bot_api(
    alice_user: Any, server: Server, make_pipeline: Any
) -> Iterator[tuple[httpx.Client, str]]:
    """A bot and the sandbox it opened; made, like alice, before the browser starts."""
    with bot_of(server, make_pipeline(slug="support")) as bot:
        yield bot


def sandbox_page(browser: Any, server: Server, sandbox_id: str, **context: Any) -> Any:
    """Alice's page of the sandbox, in a browser context of its own (`context`: its options)."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}, **context).new_page()
    page.set_default_timeout(15_000)
    log_in(page, server.url)
    page.goto(f"{server.url}/sandboxes/{sandbox_id}/")
    return page


def chosen(page: Any) -> str:
    """The tab shown, after checking that it alone is selected and its panel alone shows."""
    selected = page.eval_on_selector_all(
        "[role=tab]", "tabs => tabs.filter(t => t.ariaSelected === 'true').map(t => t.dataset.tab)"
    )
    assert len(selected) == 1, selected
    shown = page.eval_on_selector_all(
        "[role=tabpanel]", "panels => panels.filter(p => !p.hidden).map(p => p.id)"
    )
    assert shown == [f"{selected[0]}-panel"], shown
    return str(selected[0])


def focused(page: Any) -> str:
    return str(page.evaluate("() => document.activeElement.id"))


def test_the_tabs_follow_clicks_and_arrow_keys_and_the_fragment(bot_api, server, browser) -> None:
    _bot, sandbox_id = bot_api
    page = sandbox_page(browser, server, sandbox_id)
    page.wait_for_selector("[role=tablist][data-ready]")
    assert page.eval_on_selector_all("[role=tab]", "tabs => tabs.map(t => t.dataset.tab)") == TABS
    assert chosen(page) == "overview"
    for tab in TABS:  # each tab names its panel, which names it back
        assert page.get_attribute(f"#{tab}-tab", "aria-controls") == f"{tab}-panel"
        assert page.get_attribute(f"#{tab}-panel", "aria-labelledby") == f"{tab}-tab"

    # A click: that tab, and the fragment says so.
    page.click("[role=tab][data-tab=files]")
    assert chosen(page) == "files" and page.url.endswith("#tab-files")
    assert page.get_attribute("#overview-tab", "aria-selected") == "false"

    # The arrow keys move along the tabs, round at the ends; Home and End go to them.
    page.focus("#files-tab")
    for key, expected in [
        ("ArrowRight", "processes"),
        ("ArrowRight", "commands"),
        ("ArrowLeft", "processes"),
        ("End", "events"),
        ("ArrowRight", "overview"),
        ("ArrowLeft", "events"),
        ("Home", "overview"),
        ("ArrowRight", "terminal"),
    ]:
        page.keyboard.press(key)
        assert chosen(page) == expected, key
        assert focused(page) == f"{expected}-tab"
        assert page.url.endswith(f"#tab-{expected}")
    # Only the chosen tab is in the Tab order: Tab goes from it to its panel.
    assert page.eval_on_selector_all("[role=tab]", "tabs => tabs.map(t => t.tabIndex)") == [
        -1,
        0,
        -1,
        -1,
        -1,
        -1,
    ]
    page.keyboard.press("Tab")
    assert focused(page) == "terminal-panel"

    # The fragment opens the same tab after a reload, and from a link.
    page.click("[role=tab][data-tab=events]")
    page.reload()
    page.wait_for_selector("[role=tablist][data-ready]")
    assert chosen(page) == "events"
    page.goto(f"{server.url}/sandboxes/{sandbox_id}/#tab-commands")
    page.wait_for_selector("[role=tablist][data-ready]")
    assert chosen(page) == "commands"
    # A link to something in a panel opens that panel.
    page.evaluate("() => { location.hash = 'sessions-view'; }")
    page.wait_for_function("() => !document.getElementById('processes-panel').hidden")
    assert chosen(page) == "processes"
    page.close()


def test_a_push_reaches_the_commands_tab_while_another_is_shown(bot_api, server, browser) -> None:
    bot, sandbox_id = bot_api
    page = sandbox_page(browser, server, sandbox_id)
    page.wait_for_selector("[data-testid=usage]:has-text('memory')")  # the websocket is open
    open_tab(page, "files")
    page.evaluate("() => { window.notReloaded = true; }")

    ran = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "echo hidden-marker"})
    assert ran.status_code == 200, ran.text
    page.wait_for_selector("#execs :text('echo hidden-marker')", state="attached")
    assert chosen(page) == "files"  # the push did not change the tab
    assert page.is_hidden("#execs")

    open_tab(page, "commands")
    assert page.is_visible("#execs :text('echo hidden-marker')")
    assert page.evaluate("() => window.notReloaded") is True
    page.close()


def test_the_copy_button_copies_the_sandbox_id(bot_api, server, browser) -> None:
    _bot, sandbox_id = bot_api
    page = sandbox_page(
        browser, server, sandbox_id, permissions=["clipboard-read", "clipboard-write"]
    )
    assert page.inner_text("[data-testid=sandbox-id]") == sandbox_id  # in full
    page.click("[data-testid=copy-id]")
    page.wait_for_selector("[data-testid=copy-id][data-copied]")
    assert page.evaluate("() => navigator.clipboard.readText()") == sandbox_id
    page.close()


@pytest.mark.parametrize(
    ("language", "words", "three_minutes"),
    [("en", r"ago|now", "3 minutes ago"), ("fr", r"il y a|maintenant", "il y a 3 minutes")],
)
def test_a_past_moment_reads_in_words_with_its_exact_time_on_hover(
    bot_api, server, browser, language, words, three_minutes
) -> None:
    _bot, sandbox_id = bot_api
    page = sandbox_page(browser, server, sandbox_id)
    if language != "en":
        page.select_option("#language", language)
        page.wait_for_selector(f"html[lang={language}]")
    # Without the script, the server's own words: the exact time, in the server's zone.
    served = page.request.get(f"{server.url}/sandboxes/{sandbox_id}/").text()
    assert re.search(r"data-relative>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</time>", served)

    open_tab(page, "events")
    moment = page.locator("#events time[data-relative]").first
    page.wait_for_function(
        "() => document.querySelector('#events time[data-relative]').title !== ''"
    )
    assert re.search(words, moment.inner_text()), moment.inner_text()
    # The title: the exact date and time, in the page's language and the browser's zone.
    exact = moment.evaluate(
        """(time, lang) => new Intl.DateTimeFormat(lang, { dateStyle: "long", timeStyle: "long" })
            .format(new Date(time.getAttribute("datetime")))""",
        language,
    )
    assert moment.get_attribute("title") == exact
    # The words follow the clock (the page's 1-second tick): a moment 3 minutes back.
    moment.evaluate(
        "time => time.setAttribute('datetime', new Date(Date.now() - 181000).toISOString())"
    )
    page.wait_for_function(
        "words => document.querySelector('#events time[data-relative]').textContent === words",
        arg=three_minutes,
    )
    page.close()


def test_countdowns_count_seconds_on_the_sandbox_page_and_minutes_in_the_fleet(
    bot_api, server, browser
) -> None:
    """The sandbox page's deadlines count every second; the fleet's rows, where every cell
    changing every second would be noise (and a redraw a second for every open page), count
    in minutes until the last one, then in seconds. (A probe of each kind is counted by the
    page's own tick: the page's rows may be pushed again meanwhile.)"""
    _bot, sandbox_id = bot_api
    page = sandbox_page(browser, server, sandbox_id)
    assert page.locator("#sandbox-status time[data-countdown]").count() >= 1
    assert page.locator("time[data-countdown=minutes]").count() == 0
    probe = """([kind, seconds]) => {
        const probe = document.getElementById('probe') || document.createElement('time');
        probe.id = 'probe';
        probe.setAttribute('data-countdown', kind);
        probe.setAttribute('datetime', new Date(Date.now() + seconds * 1000).toISOString());
        document.body.append(probe);
    }"""
    shows = "pattern => new RegExp(pattern).test(document.getElementById('probe').textContent)"
    page.evaluate(probe, ["", 754])
    page.wait_for_function(shows, arg=r"^12\s?m(in)?\s+\d+\s?s")
    page.goto(f"{server.url}/")
    cells = page.locator(f"#sandbox-{sandbox_id} time[data-countdown]")
    assert {cells.nth(n).get_attribute("data-countdown") for n in range(cells.count())} == {
        "minutes"
    }
    page.evaluate(probe, ["minutes", 754])
    page.wait_for_function(shows, arg=r"^12\s?m(in)?$")
    page.evaluate(probe, ["minutes", 42.5])  # the last minute counts in seconds
    page.wait_for_function(shows, arg=r"^4[0-2]\s?s$")
    page.close()


def test_without_javascript_every_panel_shows(bot_api, server, browser) -> None:
    _bot, sandbox_id = bot_api
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    log_in(page, server.url)  # the log-in form needs no script
    scriptless = browser.new_context(
        viewport={"width": 1280, "height": 900},
        java_script_enabled=False,
        storage_state=context.storage_state(),
    ).new_page()
    scriptless.goto(f"{server.url}/sandboxes/{sandbox_id}/")
    for tab in TABS:
        assert scriptless.is_visible(f"#{tab}-panel"), tab
    # The tabs are links to the panels.
    assert scriptless.get_attribute("#events-tab", "href") == "#events-panel"
    context.close()
