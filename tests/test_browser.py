"""The dashboard in a real browser (Debian's Chromium driven by Playwright) against a real
server (`manage.py serve`, as `bin/run` starts it) and the real engine, with a bot calling the
API on the side: log in, make a pipeline with a custom scope and see its preview, watch the
bot's sandbox appear in the fleet without a reload, take it over and see the bot refused, type
in its terminal, upload and download a file, release it and see the bot carry on. And a 1 GiB
file uploaded from the browser, its progress shown as it goes, whole in the sandbox.

Screenshots of the main pages go to $BOXYARD_SCREENSHOTS when it is set (the README's come
from `BOXYARD_SCREENSHOTS=docs/screenshots bin/test tests/test_browser.py`).
"""

import hashlib
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.services import Actor
from tests.browsers import (  # noqa: F401
    BROWSER,
    alice_user,
    browser,
    confirm,
    log_in,
    open_tab,
    presets,
    server,
    shoot,
)
from tests.conftest import CHAT
from tests.servers import Server

pytestmark = BROWSER

REPO = Path(__file__).resolve().parents[1]


def test_an_admin_steps_in_and_hands_back(alice_user, server, browser, tmp_path) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page.set_default_timeout(20_000)

    log_in(page, server.url)

    # A pipeline with a custom scope: the preview follows the template as it is typed.
    page.goto(f"{server.url}/pipelines/new")
    page.fill("#id_slug", "support")
    page.select_option("#id_scope_preset", "custom")
    page.fill("#id_scope_template", "{launcher_type}_{launcher_id}_{sender_id}")
    page.wait_for_selector("[data-testid=scope-key]:has-text('group_42_alice')")
    page.fill("#id_scope_template", "{nope}")
    page.wait_for_selector("[data-testid=scope-error]:has-text('nope')")
    page.fill("#id_scope_template", "{launcher_type}_{launcher_id}_{sender_id}")
    page.wait_for_selector("[data-testid=scope-key]:has-text('group_42_bob')")
    page.fill("#id_image", settings.BOXYARD_TEST_IMAGE)
    shoot(page, "pipeline")
    page.click("form.pipeline-form button[type=submit]")
    page.wait_for_selector("h2:has-text('API tokens')")
    page.click("button:has-text('Create a token')")
    token = page.inner_text("[data-testid=new-token]")
    bot = httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )

    # The bot opens a sandbox: it appears in the open fleet page, with no reload.
    with page.expect_websocket() as live:
        page.goto(f"{server.url}/")
    # Its first push has come: the page's websocket is connected and joined its groups.
    live.value.wait_for_event("framereceived")
    chat = {"launcher_type": "group", "launcher_id": "42", "sender_id": "alice"}
    opened = bot.post("/sandboxes/open", json={"pipeline": "support", "variables": chat})
    assert opened.status_code == 200, opened.text
    sandbox_id = opened.json()["sandbox_id"]
    bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "echo from-the-bot > bot.txt"})
    page.wait_for_selector(f"#sandbox-{sandbox_id}:has-text('group_42_alice')")
    shoot(page, "fleet")

    # A background command of the bot's, to follow in the processes panel.
    ticking = bot.post(
        f"/sandboxes/{sandbox_id}/exec",
        json={
            "cmd": "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick-$i; sleep 0.5; done",
            "background": True,
        },
    )
    assert ticking.status_code == 200, ticking.text

    # Take it over: the bot's next call is refused, naming the holder.
    page.click(f"#sandbox-{sandbox_id} a")
    page.wait_for_selector("[data-testid=usage]:has-text('memory')")  # live CPU and memory
    open_tab(page, "processes")
    page.click("#processes-view a:has-text('Log')")
    page.wait_for_selector("[data-testid=log]:has-text('tick-1')")
    page.wait_for_selector("[data-testid=log]:has-text('tick-6')")  # it follows the output
    open_tab(page, "overview")
    page.click("button:has-text('Take over')")
    confirm(page, saying="group_42_alice")
    page.wait_for_selector("[data-testid=lease]:has-text('admin:alice')")
    refused = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
    assert refused.status_code == 423 and "admin:alice" in refused.json()["error"]["message"]

    # A command of the admin's own.
    open_tab(page, "terminal")
    page.fill("input[name=cmd]", "echo ran-by-alice > alice.txt")
    page.click("button:has-text('Run as me')")
    open_tab(page, "commands")
    page.wait_for_selector("#execs:has-text('ran-by-alice')")

    # The terminal.
    open_tab(page, "terminal")
    page.click("#terminal-open")
    page.wait_for_selector("#terminal[data-state=open]")
    page.locator("#terminal").click()
    page.keyboard.type("echo term-$((6*7))")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('#terminal').innerText.includes('term-42')"
    )
    shoot(page, "sandbox")

    # Upload a file, find it, download it.
    upload = tmp_path / "notes.txt"
    upload.write_text("uploaded by alice\n")
    open_tab(page, "files")
    page.wait_for_selector("[data-testid=upload]")
    page.click("button:has-text('Upload')")  # no file chosen yet: it says so, sends nothing
    page.wait_for_selector("[data-testid=upload-error]:has-text('Choose a file')")
    page.set_input_files("[data-testid=upload]", str(upload))
    page.click("button:has-text('Upload')")
    page.wait_for_selector("[data-testid=upload-done]:has-text('/workspace/notes.txt uploaded')")
    page.wait_for_selector("#files-view a:has-text('notes.txt')")
    with page.expect_download() as downloading:
        page.locator("tr:has-text('notes.txt') a:has-text('Download')").click()
    assert Path(downloading.value.path()).read_text() == "uploaded by alice\n"
    page.click("a:has-text('bot.txt')")
    page.wait_for_selector("[data-testid=file-text]:has-text('from-the-bot')")

    # Hand it back: the bot carries on with the same files.
    open_tab(page, "overview")
    page.click("button:has-text('Release')")
    page.wait_for_selector("[data-testid=lease]:has-text('free')")
    carried_on = bot.post(
        f"/sandboxes/{sandbox_id}/exec", json={"cmd": "cat notes.txt bot.txt alice.txt"}
    )
    assert carried_on.status_code == 200, carried_on.text
    assert carried_on.json()["stdout"] == "uploaded by alice\nfrom-the-bot\nran-by-alice\n"

    # The history says who did what: the admin's terminal, then the bot again.
    page.reload()
    open_tab(page, "commands")
    page.wait_for_selector("#execs:has-text('admin:alice')")
    assert "terminal" in page.inner_text("#execs")

    # Sessions: the chat's sandbox by its sender.
    page.goto(f"{server.url}/sessions/?q=alice")
    page.wait_for_selector("a:has-text('group_42_alice')")
    shoot(page, "sessions")
    bot.close()


GIB = 1024 * 1024 * 1024
# Where the 1 GiB file is not zero: its first bytes, one past the middle, its last bytes.
MARKS = {0: b"first bytes", GIB // 2 + 3: b"the middle", GIB - 10: b"last bytes"}


@pytest.fixture
def roomy(alice_user: Any, server: Server, make_pipeline: Any) -> tuple[str, str]:
    """A chat's sandbox with room for 1 GiB (its pipeline's workspace holds 2 GiB) and its bot's
    token; made, like alice, before the browser starts."""
    pipeline = make_pipeline(slug="roomy", workspace_mb=2048)
    _, token = PipelineToken.issue(pipeline, name="bot")
    sandbox = services.open_sandbox(pipeline, CHAT, Actor("bot", "roomy")).sandbox
    return str(sandbox.pk), token


def watch_progress(page: Any) -> None:
    """Keep every value the page's progress bar takes, as its script sets it, in
    `window.progressSeen`."""
    page.evaluate(
        """() => {
            window.progressSeen = [];
            new MutationObserver(() => {
                const bar = document.querySelector("[data-testid=upload-progress]");
                if (bar) window.progressSeen.push([bar.value, bar.max]);
            }).observe(document.body, {
                subtree: true, attributes: true, attributeFilter: ["value"],
            });
        }"""
    )


def test_the_scope_fields_are_one_choice_and_save_what_they_show(
    alice_user, presets, server, browser
) -> None:
    assert len(presets) >= 2
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    log_in(page, server.url)
    page.goto(f"{server.url}/pipelines/new")
    template, select = page.locator("#id_scope_template"), page.locator("#id_scope_preset")
    assert template.input_value() == select.input_value()  # the default preset, written out
    for preset in presets:  # choosing a preset fills the template in
        page.select_option("#id_scope_preset", preset)
        assert template.input_value() == preset
    page.fill("#id_scope_template", "{sender_id}")  # typing something else selects Custom
    assert select.input_value() == "custom"
    page.fill("#id_scope_template", presets[0])  # and typing a preset selects it
    assert select.input_value() == presets[0]
    page.fill("#id_slug", "one-truth")
    page.fill("#id_image", settings.BOXYARD_TEST_IMAGE)
    page.fill("#id_scope_template", "{nope}")
    page.wait_for_selector("[data-testid=scope-error]:has-text('nope')")
    page.click("form.pipeline-form button[type=submit]")
    page.wait_for_selector(".errorlist:has-text('nope'), [role=alert]:has-text('nope')")
    page.fill("#id_scope_template", "{sender_id}:{launcher_id}")
    page.wait_for_selector("[data-testid=scope-key]:has-text('alice:42')")
    page.click("form.pipeline-form button[type=submit]")
    page.wait_for_selector("h2:has-text('API tokens')")
    # The pipeline's page, read from what was saved, shows the scope that was typed.
    assert page.url.endswith("/pipelines/one-truth/")
    assert template.input_value() == "{sender_id}:{launcher_id}"
    assert select.input_value() == "custom"
    page.close()


def test_a_missing_page_is_a_page_of_the_site(alice_user, server, browser) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    log_in(page, server.url)
    answer = page.goto(f"{server.url}/sandboxes/00000000-0000-4000-8000-000000000000/")
    assert answer is not None and answer.status == 404
    assert page.inner_text("[data-testid=error-title]") == "Not found"
    assert page.is_visible("header nav a[href='/pipelines/']")
    icon = page.get_attribute("link[rel=icon]", "href")
    assert icon and httpx.get(f"{server.url}{icon}").status_code == 200
    page.click("text=Back to the fleet")
    page.wait_for_url(f"{server.url}/")
    page.close()


def test_a_1_gib_file_uploads_from_the_browser_with_its_progress(
    roomy: tuple[str, str], server: Server, browser: Any, tmp_path: Path
) -> None:
    sandbox_id, token = roomy
    big = tmp_path / "big.bin"
    with big.open("wb") as out:  # sparse: the disk holds only the marks
        os.truncate(out.fileno(), GIB)
        for offset, mark in MARKS.items():
            out.seek(offset)
            out.write(mark)
    hashed = hashlib.sha256()
    with big.open("rb") as source:
        while piece := source.read(8 * 1024 * 1024):
            hashed.update(piece)

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    log_in(page, server.url)
    page.goto(f"{server.url}/sandboxes/{sandbox_id}/")
    open_tab(page, "files")
    page.wait_for_selector("[data-testid=upload]")

    # The bot holds the lease: the server's refusal is shown, and the button works again.
    page.set_input_files("[data-testid=upload]", str(big))
    page.click("[data-testid=upload-button]")
    page.wait_for_selector("[data-testid=upload-error]:has-text('leased to group_123456')")
    assert page.is_enabled("[data-testid=upload-button]")
    assert page.is_hidden("[data-testid=upload-progress]")  # nothing was written

    open_tab(page, "overview")
    page.click("button:has-text('Take over')")
    confirm(page)
    page.wait_for_selector("[data-testid=lease]:has-text('admin:alice')")
    open_tab(page, "files")
    page.wait_for_selector("[data-testid=upload]")
    watch_progress(page)
    page.set_input_files("[data-testid=upload]", str(big))
    page.click("[data-testid=upload-button]")
    page.wait_for_selector("[data-testid=upload-button]:disabled")  # one upload at a time
    page.wait_for_selector(
        "[data-testid=upload-done]:has-text('/workspace/big.bin uploaded')", timeout=120_000
    )
    page.wait_for_selector("#files-view a:has-text('big.bin')")
    seen = page.evaluate("() => window.progressSeen")  # [value, max] as it went
    assert any(0 < value < GIB and total == GIB for value, total in seen), seen[:20]
    assert [GIB, GIB] in seen, seen[-5:]

    # The sandbox has the whole file, byte for byte (a bot may read while the admin holds it).
    bot = httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120
    )
    received = hashlib.sha256()
    with bot.stream(
        "GET", f"/sandboxes/{sandbox_id}/files/raw", params={"path": "big.bin"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["Content-Length"] == str(GIB)
        for piece in response.iter_bytes():
            received.update(piece)
    assert received.hexdigest() == hashed.hexdigest()
    bot.close()
