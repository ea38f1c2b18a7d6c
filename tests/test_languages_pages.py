"""Every page of the dashboard in every language, with real data: no English left in the words
of the page (its text, its titles, labels and questions), only in what is data (scope keys,
commands, file names: marked `translate="no"`, or code) and in a short list of names.

In Chinese, Japanese, Korean and Russian any Latin word is English; in Spanish and French, a
sentence of the English catalog standing as it is."""

import re
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from hosts import services as hosts
from hosts.models import DockerHost
from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import FleetSample
from sandboxes.services import Actor
from tests.conftest import CHAT

LOCALE = Path(__file__).resolve().parents[1] / "locale"
# Names and units that every language writes as they are.
NAMES = {
    "Boxyard", "MCP", "URL", "API", "CPU", "CPUs", "MiB", "GiB", "KiB", "JSON", "HTTP", "HTTPS",
    "Streamable", "LangBot", "AstrBot", "Claude", "Code", "Cursor", "fastmcp", "zip", "tar",
    "stdio", "Bearer", "Remote", "http", "mcpServers", "data", "mcp_server", "json", "ID", "TTL",
    "PID", "PIDs", "shell", "tmp", "workspace", "skills", "Linux", "UTF", "LANG", "name", "cmd",
    "python3", "server", "py", "uuid", "task_id", "conversation_id", "bash", "sh", "python",
    "Shell", "mcp", "truncated", "Alice", "Bob", "Authorization", "UTC", "TLS", "PEM", "Docker",
    "E2B", "E2B_API_KEY", "e2b_", "Python", "JavaScript",
}  # fmt: skip
PLACEHOLDER = re.compile(r"\{[^{}]*\}")  # {count}, {launcher_id}: filled in, or a template
LATIN = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,}")  # a name with digits (E2B) is one word
SKIPPED = {"code", "pre", "script", "style", "kbd", "samp", "textarea"}
ATTRIBUTES = ("title", "aria-label", "placeholder", "data-confirm", "data-confirm-one")
VOID = {"input", "br", "meta", "link", "img", "hr", "source", "col", "wbr"}


class Words(HTMLParser):
    """The words of a page a reader meets: its text and the attributes it speaks with, outside
    code and whatever is marked `translate="no"`."""

    def __init__(self) -> None:
        super().__init__()
        self.skipping: list[bool] = []
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        skip = tag in SKIPPED or named.get("translate") == "no"
        if not skip and not any(self.skipping):
            self.found += [named[name] or "" for name in ATTRIBUTES if named.get(name)]
        if tag not in VOID:
            self.skipping.append(skip)

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID and self.skipping:
            self.skipping.pop()

    def handle_data(self, data: str) -> None:
        if not any(self.skipping) and data.strip():
            self.found.append(" ".join(data.split()))


def without(text: str, data: list[str]) -> str:
    """The text with the page's data (names, keys, commands) taken out, longest first."""
    for value in data:
        text = text.replace(value, " ")
    return text


def english_sentences() -> set[str]:
    text = (LOCALE / "en" / "LC_MESSAGES" / "django.po").read_text()
    found = set()
    for block in re.findall(r'\nmsgid ((?:".*"\n)+)', text):
        message = "".join(re.findall(r'"(.*)"', block))
        if len(message.split()) >= 3 and "%" not in message and "{" not in message:
            found.add(message)
    return found


@pytest.fixture
def pages(
    django_user_model: Any, make_pipeline: Any, docker_engine: Any
) -> tuple[Client, list[str], list[str]]:
    user = django_user_model.objects.create_user("alice", password="x", is_staff=True)
    admin = Client()
    admin.force_login(user)
    bot = Actor("bot", "support-bot")
    pipeline = make_pipeline(slug="support", processes=[{"name": "tools", "cmd": "sleep 600"}])
    token = PipelineToken.issue(pipeline, name="bot")[0]
    running = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.run_exec(running, services.clean_request(running, cmd="echo hi > notes.txt"), bot)
    services.run_exec(running, services.clean_request(running, cmd="sleep 1; false"), bot)
    services.create_session(running, "build", bot)
    services.takeover_lease(running, Actor("admin", "alice"))
    stopped = services.open_sandbox(pipeline, {**CHAT, "launcher_id": "7"}, bot).sandbox
    services.close_sandbox(stopped, bot)
    admin_alice = Actor("admin", "alice")
    second = hosts.add_host(admin_alice, "second", url="tcp://second.invalid:2376", cpus=4.0)
    hosts.edit_host(second, admin_alice, labels={"zone": "b"})
    hosts.drain(second, admin_alice)
    # Its health check reached it a minute ago, and not since: down, with the engine's error.
    DockerHost.objects.filter(pk=second.pk).update(
        last_seen_at=timezone.now() - timedelta(minutes=1)
    )
    hosts.unreachable(DockerHost.objects.get(pk=second.pk), ConnectionError("connection refused"))
    start = timezone.now() - timedelta(minutes=3)  # the charts, with every series named
    for minute in range(3):
        FleetSample.objects.create(
            at=start + timedelta(minutes=minute),
            live={"running": minute},
            created=minute,
            reused=minute,
            cleaned={"idle": minute, "closed": minute},
        )
    paths = [
        "/",
        "/?state=all&sort=-activity",
        f"/sandboxes/{running.pk}/",
        f"/sandboxes/{stopped.pk}/",
        f"/sandboxes/{running.pk}/files?path=/workspace",
        "/sessions/?q=group",
        "/pipelines/",
        "/pipelines/support/",
        "/pipelines/new",
        "/hosts/",
        "/hosts/second/",
        "/hosts/local/",
        "/hosts/new",
    ]
    # What the pages show of the data: as it is in every language.
    data = [
        str(running.pk), str(stopped.pk), running.image, "admin:alice", "bot:support-bot",
        "support-bot", "group_123456", "group_7", "echo hi > notes.txt", "sleep 1; false",
        "sleep 600", "notes.txt", "support", "tools", "build", "alice", "bot", token.prefix, "second", "local",
    ]  # fmt: skip
    return admin, paths, sorted(data, key=len, reverse=True)


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_no_english_is_left_on_any_page(pages) -> None:
    admin, paths, data = pages
    sentences = english_sentences()
    left: dict[str, set[str]] = {}
    for language, _name in settings.LANGUAGES:
        if language == "en":
            continue
        admin.cookies["django_language"] = language
        latin_is_english = language in ("zh-hans", "zh-hant", "ja", "ko", "ru")
        for path in [*paths, "/nope/"]:
            answer = admin.get(path)
            words = Words()
            words.feed(answer.content.decode())
            for found in words.found:
                text = PLACEHOLDER.sub(" ", without(found, data))
                if latin_is_english:
                    english = [w for w in LATIN.findall(text) if w not in NAMES]
                else:
                    english = [s for s in sentences if s in text]
                if english:
                    left.setdefault(f"{language} {path.split('?')[0][:30]}", set()).add(found[:90])
    assert left == {}, "\n".join(f"{where}: {sorted(texts)}" for where, texts in left.items())
