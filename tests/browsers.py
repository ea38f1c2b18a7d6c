"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against a served
Boxyard (`manage.py serve`, as `bin/run` starts it) and the real engine. What every browser
test module shares: its marks, the server, the browser, alice, logging in, screenshots,
answering the page's questions, and opening a tab of the sandbox page."""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import Server, served

BROWSER = [
    pytest.mark.docker,
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not shutil.which("chromium"), reason="needs Debian's chromium (bin/test installs it)"
    ),
]

PASSWORD = "a-long-test-password"


@pytest.fixture
def server(tmp_path: Path, docker_engine: Any) -> Iterator[Server]:
    with served(tmp_path) as running:
        yield running


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


def shoot(page: Any, name: str) -> None:
    folder = os.environ.get("BOXYARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


@pytest.fixture
def alice_user(django_user_model: Any) -> Any:
    """The admin; made before the browser starts (Playwright runs an event loop in this
    thread, where Django refuses database calls)."""
    return django_user_model.objects.create_user("alice", password=PASSWORD, is_staff=True)


@pytest.fixture
def presets() -> list[str]:
    """Two scope presets (a test before may have flushed the migrations' own), read before
    the browser starts."""
    from pipelines.models import SessionTemplate

    for position, (slug, template) in enumerate(
        [("chat", "{launcher_type}_{launcher_id}"), ("user", "{launcher_type}_{sender_id}")]
    ):
        SessionTemplate.objects.get_or_create(
            template=template,
            defaults={"slug": f"test-{slug}", "labels": {"en": slug}, "position": position},
        )
    return [preset.template for preset in SessionTemplate.objects.order_by("template")]


def log_in(page: Any, url: str, path: str = "/") -> None:
    """Log in as alice, from `path`, and land on the fleet."""
    page.goto(f"{url}{path}")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Fleet')")


def confirm(page: Any, *, saying: str = "", answer: bool = True) -> str:
    """Answer the question the page asks in its dialog (yes, or no); what it asked."""
    page.wait_for_selector("#confirm-dialog[open]")
    asked: str = page.inner_text("#confirm-dialog [data-question]")
    assert saying in asked, asked
    page.click("[data-testid=confirm-yes]" if answer else "[data-testid=confirm-no]")
    page.wait_for_selector("#confirm-dialog:not([open])", state="attached")
    return asked


def open_tab(page: Any, name: str) -> None:
    """Show the sandbox page's tab `name` (overview, terminal, files, processes, commands or
    events, as its fragment `#tab-NAME` says), with a click on it, as the admin would."""
    page.click(f"[role=tab][data-tab={name}]")
    page.wait_for_selector(f"[role=tab][data-tab={name}][aria-selected=true]")
    page.wait_for_selector(f"#{name}-panel:not([hidden])")
    if name == "files":  # a listing that went stale while hidden is fetched again first
        page.wait_for_selector("#files-view:not([data-stale])", state="attached")


@contextmanager
def bot_of(server: Server, pipeline: Any) -> Iterator[tuple[httpx.Client, str]]:
    """A bot of `pipeline` calling the served API with a token of its own, and the sandbox it
    opened for the test chat."""
    from pipelines.models import PipelineToken
    from tests.conftest import CHAT

    token = PipelineToken.issue(pipeline, name="bot")[1]
    with httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as bot:
        opened = bot.post("/sandboxes/open", json={"pipeline": pipeline.slug, "variables": CHAT})
        assert opened.status_code == 200, opened.text
        yield bot, opened.json()["sandbox_id"]
