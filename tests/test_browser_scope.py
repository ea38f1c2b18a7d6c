"""The pipeline form's scope preview in a real browser (Debian's Chromium driven by Playwright)
against a real server: picking a preset previews that preset's keys at once, and no error."""

from typing import Any
from urllib.parse import parse_qs, urlsplit

from pipelines import scope
from pipelines.views import SAMPLE_CHATS
from tests.browsers import BROWSER, alice_user, browser, log_in, presets, server  # noqa: F401

pytestmark = BROWSER


def test_picking_a_preset_previews_its_keys_without_an_error(
    alice_user, presets, server, browser
) -> None:
    assert len(presets) >= 2
    page: Any = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    log_in(page, server.url)
    page.goto(f"{server.url}/pipelines/new")
    shown = page.input_value("#id_scope_preset")
    for preset in [p for p in reversed(presets) if p != shown] + [shown]:
        with page.expect_response(lambda answer: "/scope-preview" in answer.url) as asked:
            page.select_option("#id_scope_preset", preset)
        # The preview is asked for with the preset's template, not the one it replaced...
        sent = parse_qs(urlsplit(asked.value.url).query)
        assert sent["scope_template"] == [preset], sent
        # ...and shows its keys, with no error.
        key = scope.resolve(preset, SAMPLE_CHATS[0][1])
        page.wait_for_selector(f"#scope-preview [data-testid=scope-key]:text-is('{key}')")
        assert page.locator("[data-testid=scope-error]").count() == 0, page.inner_text(
            "#scope-preview"
        )
    page.close()
