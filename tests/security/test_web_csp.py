"""The dashboard's Content-Security-Policy: nothing from another origin, no inline script.

Every page (log-in, fleet, sandbox, sessions, pipelines, the error pages) carries the header;
its sources are only the site's own origin or none; and no page or template holds a script
the policy would block (a <script> without `src`, an `on…=` handler, a `javascript:` URL, an
`hx-on` attribute, which htmx would evaluate). In a real Chromium, which enforces the
policy, the pages raise no violation and the behaviour moved out of inline handlers (confirm
before destroying, filters that apply on change, the language switcher) still works.
"""

import re
import shutil
import uuid
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from sandboxes import services
from tests.conftest import CHAT
from tests.servers import Server

REPO = Path(__file__).resolve().parents[2]
# The only sources any directive may name: the site itself, or nothing.
ORIGIN_FREE = {"'self'", "'none'"}
# ... and two exceptions that neither run code nor reach another origin: style attributes
# (the terminal's colours) and data: images (the API documentation's icons).
EXCEPTIONS = {"style-src-attr": {"'unsafe-inline'"}, "img-src": {"data:"}}
SCRIPT_TYPES = {"", "text/javascript", "module", "application/javascript"}


def policy_of(response: Any) -> dict[str, list[str]]:
    header = response.get("Content-Security-Policy")
    assert header, (
        f"no Content-Security-Policy on {response.status_code} {response.get('Content-Type')}"
    )
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        if part.strip():
            name, *sources = part.split()
            directives[name] = sources
    return directives


def assert_strict(response: Any, where: str) -> None:
    policy = policy_of(response)
    for required in ("default-src", "script-src", "frame-ancestors", "object-src", "base-uri"):
        assert required in policy, (where, required, policy)
    assert policy["script-src"] == ["'self'"], (where, policy["script-src"])
    for name, sources in policy.items():
        allowed = ORIGIN_FREE | EXCEPTIONS.get(name, set())
        assert set(sources) <= allowed, (where, name, sources)


class InlineScripts(HTMLParser):
    """Collects what a policy without 'unsafe-inline' would block in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if (
            tag == "script"
            and not named.get("src")
            and (named.get("type") or "").lower() in SCRIPT_TYPES
        ):
            self.found.append(f"<script> without src at {self.getpos()}")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"{tag} {name}= at {self.getpos()}")
            if name.startswith(("hx-on", "data-hx-on")):
                self.found.append(f"{tag} {name}= at {self.getpos()}")
            if (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"{tag} {name}=javascript: at {self.getpos()}")


def inline_scripts(html: str) -> list[str]:
    parser = InlineScripts()
    parser.feed(html)
    return parser.found


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


@pytest.fixture
def admin_client(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    return client


@pytest.mark.django_db
def test_every_dashboard_page_carries_the_policy_and_no_inline_script(
    admin_client: Client,
    pipeline: Any,
    fake_runtime: Any,
    bot: Any,
    django_user_model: Any,
    settings: Any,
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("mallory", password="x"))
    pages = {
        "log-in": (Client().get("/login/"), 200),
        "fleet": (admin_client.get("/"), 200),
        "sandbox": (admin_client.get(f"/sandboxes/{sandbox.pk}/"), 200),
        "files": (admin_client.get(f"/sandboxes/{sandbox.pk}/files", {"path": "/etc"}), 200),
        "sessions": (admin_client.get("/sessions/", {"q": "group"}), 200),
        "pipelines": (admin_client.get("/pipelines/"), 200),
        "new pipeline": (admin_client.get("/pipelines/new"), 200),
        "pipeline": (admin_client.get(f"/pipelines/{pipeline.slug}/"), 200),
        "not found": (admin_client.get(f"/sandboxes/{uuid.uuid4()}/"), 404),
        "no such page": (admin_client.get("/no/such/page"), 404),
        "not an admin": (visitor.get("/"), 403),
        "download refused": (
            admin_client.get(f"/sandboxes/{sandbox.pk}/files/download", {"path": "/etc"}),
            400,
        ),
        "csrf failure": (Client(enforce_csrf_checks=True).post("/login/", {}), 403),
    }
    settings.AXES_FAILURE_LIMIT = 1
    django_user_model.objects.create_user("locked", password="x", is_staff=True)
    Client().post("/login/", {"username": "locked", "password": "wrong"})
    pages["locked out"] = (Client().post("/login/", {"username": "locked", "password": "x"}), 429)

    for where, (response, status) in pages.items():
        assert response.status_code == status, (where, response.status_code)
        assert_strict(response, where)
        assert inline_scripts(response.content.decode()) == [], where
    sandbox_page = pages["sandbox"][0].content.decode()
    assert 'src="/static/boxyard/terminal.js"' in sandbox_page  # scripts come as files


def test_no_template_holds_an_inline_script_or_handler() -> None:
    templates = sorted((REPO / "templates").rglob("*.html"))
    assert len(templates) > 20
    for template in templates:
        text = template.read_text()
        found = inline_scripts(re.sub(r"\{[%{#].*?[%}#]\}", "x", text, flags=re.S))  # tags → text
        assert found == [], (template.relative_to(REPO), found)


# --- in a real browser, which enforces the policy -------------------------------------------------

from tests.browsers import (  # noqa: E402,F401  (fixtures)
    PASSWORD,
    browser,
    confirm,
    log_in,
    open_tab,
    server,
)


@pytest.fixture
def admin_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD, is_staff=True)


@pytest.mark.docker
@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    not shutil.which("chromium"), reason="needs Debian's chromium (bin/test installs it)"
)
def test_chromium_reports_no_violation_and_the_handlers_still_work(
    admin_user: Any,
    server: Server,
    browser: Any,
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    violations: list[str] = []
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.on("pageerror", lambda error: violations.append(f"page error: {error}"))

    log_in(page, server.url, "/login/")

    # A pipeline and a sandbox of it, made in the dashboard and by its bot.
    page.goto(f"{server.url}/pipelines/new")
    page.fill("#id_slug", "support")
    page.select_option("#id_scope_preset", "custom")
    page.fill("#id_scope_template", "{launcher_type}_{launcher_id}")
    page.wait_for_selector("[data-testid=scope-key]:has-text('group_42')")
    page.fill("#id_image", settings.BOXYARD_TEST_IMAGE)
    page.click("form.pipeline-form button[type=submit]")
    page.wait_for_selector("h2:has-text('API tokens')")
    page.click("button:has-text('Create a token')")
    token = page.inner_text("[data-testid=new-token]")
    import httpx

    with httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as bot:
        opened = bot.post("/sandboxes/open", json={"pipeline": "support", "variables": CHAT})
        assert opened.status_code == 200, opened.text
        sandbox_id = opened.json()["sandbox_id"]

    # The filters apply as soon as they change (a handler in boxyard.js, not inline).
    page.goto(f"{server.url}/")
    page.wait_for_selector(f"#sandbox-{sandbox_id}")
    page.select_option("select[name=state]", "running")
    page.wait_for_url("**state=running**")

    # Destroying asks first (in the page's own dialog, a handler in boxyard.js); saying no
    # leaves the sandbox alone.
    filtered = page.url
    page.check(f"#sandbox-{sandbox_id} input[type=checkbox]")
    page.click("button:has-text('Destroy selected')")
    confirm(page, saying="Destroy the selected sandbox", answer=False)
    page.wait_for_timeout(500)
    assert page.url == filtered, page.url  # not sent

    # The sandbox page: its live parts, its terminal (colours included), its files.
    page.goto(f"{server.url}/sandboxes/{sandbox_id}/")
    page.wait_for_selector("[data-testid=usage]:has-text('memory')")
    open_tab(page, "files")
    page.wait_for_selector("#files-view table")
    open_tab(page, "overview")
    page.click("button:has-text('Take over')")
    confirm(page)
    page.wait_for_selector("[data-testid=lease]:has-text('admin:alice')")
    open_tab(page, "terminal")
    page.click("#terminal-open")
    # Whatever the shell says arrived over the terminal's websocket (connect-src 'self').
    page.wait_for_function("() => document.querySelector('#terminal').innerText.trim() !== ''")
    # term.js colours text with style attributes, the one inline thing the policy allows: a
    # red word comes out red, with no violation reported.
    colour = page.evaluate("""() => {
        const host = document.createElement("div");
        document.body.appendChild(host);
        const term = new Terminal({ cols: 20, rows: 2, useStyle: false });
        term.open(host);
        term.write("\\x1b[31mred\\x1b[0m plain");
        const span = [...host.querySelectorAll("span")].find(s => s.textContent === "red");
        return span ? getComputedStyle(span).color : "no span";
    }""")
    assert colour == "rgb(204, 0, 0)", colour
    assert page.eval_on_selector(".terminal", "e => getComputedStyle(e).fontFamily").startswith(
        '"DejaVu'
    )

    # The rest of the dashboard, and its error pages.
    for path in (
        "/sessions/?q=group",
        "/pipelines/",
        "/pipelines/support/",
        f"/sandboxes/{uuid.uuid4()}/",
        f"/sandboxes/{sandbox_id}/files/download?path=/etc",
    ):
        page.goto(f"{server.url}{path}")
        page.wait_for_load_state("load")

    # The API's browsable documentation and the admin site (where lockouts are listed).
    page.goto(f"{server.url}/api/v1/docs")
    page.wait_for_selector(".swagger-ui .opblock")
    page.goto(f"{server.url}/admin/")
    page.wait_for_selector("#site-name")

    # The language switcher submits on change.
    page.goto(f"{server.url}/sessions/")
    page.select_option("#language", "fr")
    page.wait_for_selector("html[lang=fr]")
    page.select_option("#language", "en")
    page.wait_for_selector("html[lang=en]")

    assert violations == [], violations
