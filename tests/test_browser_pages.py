"""Every page of the dashboard, with real data, in Chromium: usable on a 390 px phone (nothing
wider than the screen, the header folded behind its Menu button), in English and Chinese;
with landmarks, a skip link, a name for every control, every control reachable with Tab and
its focus shown, and text of at least 4.5:1 contrast against what is behind it."""

from typing import Any

import pytest

from hosts import services as hosts
from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.services import Actor
from tests.browsers import BROWSER, PASSWORD, alice_user, browser, log_in, server, shoot  # noqa: F401
from tests.conftest import CHAT
from tests.servers import Server

pytestmark = BROWSER

PHONE = {"width": 390, "height": 844}
# The pages shot for docs/screenshots when BOXYARD_SCREENSHOTS is set, by path: made by the
# fixture, which knows the sandboxes' ids.
SHOTS: dict[str, str] = {}


@pytest.fixture
def pages(alice_user: Any, server: Server, make_pipeline: Any) -> list[str]:
    """The dashboard's pages over real data: a running sandbox with commands and a file, a
    stopped one, a pipeline with a token, a second Docker host that is draining (and, as
    nothing answers at its address, soon down); made before the browser starts."""
    bot = Actor("bot", "support-bot")
    pipeline = make_pipeline(slug="support")
    PipelineToken.issue(pipeline, name="bot")
    running = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.run_exec(running, services.clean_request(running, cmd="echo hi > notes.txt"), bot)
    services.run_exec(running, services.clean_request(running, cmd="ls; false"), bot)
    stopped = services.open_sandbox(pipeline, {**CHAT, "launcher_id": "7"}, bot).sandbox
    services.close_sandbox(stopped, bot)
    admin = Actor("admin", "alice")
    hosts.drain(hosts.add_host(admin, "gone", url="tcp://gone.invalid:2376", cpus=4.0), admin)
    SHOTS.clear()
    SHOTS.update(
        {"/": "fleet", f"/sandboxes/{running.pk}/": "sandbox", "/pipelines/support/": "pipeline"}
    )
    return [
        "/",
        "/?state=all&sort=-activity",
        f"/sandboxes/{running.pk}/",
        f"/sandboxes/{stopped.pk}/",
        "/sessions/?q=group",
        "/pipelines/",
        "/pipelines/support/",
        "/pipelines/new",
        "/hosts/",
        "/hosts/gone/",
        "/hosts/new",
    ]


WIDTH = "() => document.documentElement.scrollWidth"
WIDER = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .filter(e => !e.closest('table.fleet, table.execs, .skip-link'))
  .map(e => e.tagName.toLowerCase() + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))
  .slice(0, 8)"""

NAMELESS = """() => [...document.querySelectorAll(
    'input:not([type=hidden]), select, textarea, button, a[href]')]
  .filter(e => e.getClientRects().length)
  .filter(e => {
    if (e.getAttribute('aria-label') || e.getAttribute('aria-labelledby') || e.title) return false;
    if (e.labels && e.labels.length && [...e.labels].some(l => l.textContent.trim())) return false;
    return !(e.textContent || '').trim() && !(e.value && e.type !== 'text' && e.type !== 'search');
  }).map(e => e.outerHTML.slice(0, 120))"""

# The contrast of every visible text against the colour behind it (the backgrounds of its
# ancestors blended, up to the page's white), by WCAG 2's formula. Controls that do not apply
# (disabled) are left out, as WCAG leaves them out.
CONTRAST = """() => {
  const rgba = (c) => { const m = c.match(/[\\d.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const behind = (e) => { const layers = [];
    for (let n = e; n; n = n.parentElement) { const c = rgba(getComputedStyle(n).backgroundColor); if (c[3] > 0) layers.push(c); if (c[3] >= 1) break; }
    let out = [255, 255, 255];
    for (const [r, g, b, a] of layers.reverse()) out = [r * a + out[0] * (1 - a), g * a + out[1] * (1 - a), b * a + out[2] * (1 - a)];
    return out; };
  const low = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const text = walker.currentNode; const e = text.parentElement;
    if (!text.textContent.trim() || !e || !e.getClientRects().length) continue;
    if (e.closest('[disabled], .terminal, dialog:not([open]), [hidden], .visually-hidden')) continue;
    const style = getComputedStyle(e); if (style.visibility === 'hidden' || +style.opacity === 0) continue;
    const [r, g, b, a] = rgba(style.color); const bg = behind(e);
    const fg = [r * a + bg[0] * (1 - a), g * a + bg[1] * (1 - a), b * a + bg[2] * (1 - a)];
    const [l1, l2] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (l1 + 0.05) / (l2 + 0.05);
    if (ratio < 4.5) low.push(`${ratio.toFixed(2)} ${text.textContent.trim().slice(0, 40)} <${e.tagName.toLowerCase()} class="${e.className}">`);
  }
  return [...new Set(low)];
}"""

FOCUSED = """() => { const e = document.activeElement; if (!e || e === document.body) return null;
  e.dataset.reached = "1"; const s = getComputedStyle(e);
  return {html: e.outerHTML.slice(0, 100), shown: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0};
}"""

FOCUSABLE = """() => [...document.querySelectorAll(
    'a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), select, textarea, [tabindex="0"]')]
  .filter(e => e.getClientRects().length && !e.closest('[hidden], dialog:not([open])'))
  .filter(e => e.getAttribute('tabindex') !== '-1').length"""


def test_every_page_fits_a_phone_in_english_and_chinese(pages, server, browser) -> None:
    for language in ("en", "zh-hans"):
        context = browser.new_context(viewport=PHONE)
        context.add_cookies([{"name": "django_language", "value": language, "url": server.url}])
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{server.url}/login/")
        assert page.evaluate(WIDTH) <= PHONE["width"], (language, "/login/")
        log_in(page, server.url) if language == "en" else _log_in_anywhere(page, server.url)
        for path in pages:
            page.goto(f"{server.url}{path}")
            page.wait_for_load_state("load")
            page.wait_for_timeout(300)  # the websocket's first render is in
            assert page.evaluate(WIDTH) <= PHONE["width"], (language, path, page.evaluate(WIDER))
            if path in SHOTS:
                shoot(page, f"{SHOTS[path]}-{language}-390")
        # The header folds behind its Menu button.
        assert page.is_visible("[data-testid=menu]") and not page.is_visible("header nav")
        page.click("[data-testid=menu]")
        assert page.is_visible("header nav")
        assert page.get_attribute("[data-testid=menu]", "aria-expanded") == "true"
        context.close()
    wide = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(wide, server.url)
    assert wide.is_hidden("[data-testid=menu]") and wide.is_visible("header nav")
    # The same pages on a desktop, in Chinese, for docs/screenshots.
    wide.context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": server.url}])
    for path, name in SHOTS.items():
        wide.goto(f"{server.url}{path}")
        wide.wait_for_load_state("load")
        wide.wait_for_timeout(300)
        shoot(wide, f"{name}-zh-hans")


def _log_in_anywhere(page: Any, url: str) -> None:
    """Log in as alice, whatever the page's language."""
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("main h1")


def test_every_page_has_landmarks_names_contrast_and_a_keyboard_way(pages, server, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(15_000)
    page.goto(f"{server.url}/login/")
    assert page.evaluate(CONTRAST) == [], "/login/"
    log_in(page, server.url)
    for path in pages:
        page.goto(f"{server.url}{path}")
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)
        assert page.locator("header").count() == 1 and page.locator("main#main").count() == 1
        assert page.locator("header nav").count() == 1, path
        assert page.evaluate(NAMELESS) == [], path
        assert page.evaluate(CONTRAST) == [], path
        # Tab: the skip link first, and it leads to the content; then every control, each
        # with its focus shown.
        page.keyboard.press("Tab")
        first = page.evaluate(FOCUSED)
        assert first is not None and "skip-link" in first["html"] and first["shown"], path
        for _ in range(page.evaluate(FOCUSABLE) + 5):
            page.keyboard.press("Tab")
            focused = page.evaluate(FOCUSED)
            if focused is not None:
                assert focused["shown"], (path, focused["html"])
        reached = page.evaluate("() => document.querySelectorAll('[data-reached]').length")
        assert reached >= page.evaluate(FOCUSABLE), (path, reached)
