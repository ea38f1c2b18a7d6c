"""E2B's control plane with E2B's own SDK, unchanged, against a served Boxyard on the real engine:
create (a sandbox of its own, a chat's sandbox through its metadata), get, list, set the
timeout, pause and connect with the workspace kept, metrics, kill; sync and async. Boxyard's
own services are the witness: the rows, the files, the events."""

import io
import os
import re
import shlex
import subprocess
import sys
from datetime import timedelta
from typing import Any

import anyio
import httpx
import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from e2b import AsyncSandbox, Sandbox, SandboxQuery, SandboxState

from sandboxes import services
from sandboxes.e2b.common import ENVD_VERSION, envd_token
from sandboxes.models import Event, State
from sandboxes.models import Sandbox as Row
from sandboxes.services import Actor
from tests.e2b.conftest import Bot
from tests.servers import REPO, Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHAT = {"launcher_type": "group", "launcher_id": "42"}
BOT = Actor("bot", "support-bot")


def row(box: Sandbox | AsyncSandbox) -> Row:
    return Row.objects.select_related("pipeline").get(pk=box.sandbox_id)


def test_a_create_without_chat_variables_gets_a_sandbox_of_its_own(
    server: Server, support: Bot, admin_client: Client
) -> None:
    box = Sandbox.create(metadata={"purpose": "report"}, **support.opts(server))
    other = Sandbox.create(metadata={"purpose": "report"}, **support.opts(server))

    assert box.sandbox_id != other.sandbox_id
    made = row(box)
    assert made.state == State.RUNNING
    assert made.scope_key.startswith("own-")
    assert made.metadata == {"purpose": "report"}
    assert made.pipeline == support.pipeline
    # The sandbox API's token is the sandbox's own; the SDK sends it with every call there.
    assert box.connection_config.sandbox_headers["X-Access-Token"] == envd_token(made.pk)
    assert str(box._envd_version) == ENVD_VERSION
    # The dashboard's history shows who made it and what it was told.
    labelled = Event.objects.get(sandbox=made, action="sandbox.labelled")
    assert labelled.detail["metadata"] == {"purpose": "report"}
    page = admin_client.get(f"/sandboxes/{made.pk}/").content.decode()
    assert "<code>purpose=report</code>" in page.split('data-testid="metadata">')[1]


def test_a_create_with_the_chats_variables_returns_the_chats_sandbox(
    server: Server, support: Bot
) -> None:
    opened = services.open_sandbox(support.pipeline, CHAT, BOT)  # the bot API's open
    services.write_file(opened.sandbox, "notes.txt", b"from the chat", BOT)

    box = Sandbox.create(metadata={**CHAT, "run": "7"}, **support.opts(server))

    assert box.sandbox_id == str(opened.sandbox.pk)
    same = row(box)
    assert same.metadata == {**CHAT, "run": "7"}
    assert services.read_file(same, "notes.txt").data == b"from the chat"
    assert Row.objects.filter(pipeline=support.pipeline).count() == 1


def test_a_create_for_a_chat_whose_sandbox_was_closed_starts_it_again(
    server: Server, support: Bot
) -> None:
    opened = services.open_sandbox(support.pipeline, CHAT, BOT).sandbox
    services.write_file(opened, "notes.txt", b"before the break", BOT)
    services.close_sandbox(opened, BOT)  # the bot API's close: the workspace is kept

    box = Sandbox.create(metadata=CHAT, **support.opts(server))

    again = row(box)
    assert again.pk == opened.pk
    assert (again.state, again.generation) == (State.RUNNING, opened.generation + 1)
    assert services.read_file(again, "notes.txt").data == b"before the break"


def test_the_async_sdk_creates_finds_and_kills(server: Server, support: Bot) -> None:
    opened = services.open_sandbox(support.pipeline, CHAT, BOT)

    async def go() -> tuple[str, str, Any, list[str], bool, bool]:
        mine = await AsyncSandbox.create(metadata=CHAT, **support.opts(server))
        own = await AsyncSandbox.create(metadata={"purpose": "async"}, **support.opts(server))
        info = await own.get_info()
        listed = await AsyncSandbox.list(
            query=SandboxQuery(metadata={"purpose": "async"}), **support.opts(server)
        ).next_items()
        killed = await own.kill()
        again = await AsyncSandbox.kill(own.sandbox_id, **support.opts(server))
        return mine.sandbox_id, own.sandbox_id, info, [i.sandbox_id for i in listed], killed, again

    mine, own, info, listed, killed, again = anyio.run(go)

    assert mine == str(opened.sandbox.pk)
    assert own != mine
    assert (info.state, info.metadata) == (SandboxState.RUNNING, {"purpose": "async"})
    assert listed == [own]
    assert (killed, again) == (True, False)
    assert Row.objects.get(pk=own).state == State.DESTROYED


def test_get_info_says_what_the_sandbox_is(server: Server, support: Bot) -> None:
    box = Sandbox.create(timeout=600, metadata={"purpose": "info"}, **support.opts(server))

    info = box.get_info()

    made = row(box)
    assert info.sandbox_id == box.sandbox_id
    assert info.template_id == "base"
    assert info.state == SandboxState.RUNNING
    assert info.metadata == {"purpose": "info"}
    assert info.envd_version == ENVD_VERSION
    assert (info.cpu_count, info.memory_mb) == (1, support.pipeline.memory_mb)
    assert info.started_at == made.started_at
    assert info.end_at == made.expires_at
    assert abs(info.end_at - made.started_at - timedelta(seconds=600)) < timedelta(seconds=5)


def test_list_filters_by_metadata_and_state_and_pages(server: Server, support: Bot) -> None:
    first = Sandbox.create(metadata={"team": "a"}, **support.opts(server))
    second = Sandbox.create(metadata={"team": "b", "odd key&=": "v a/l"}, **support.opts(server))
    third = Sandbox.create(metadata={"team": "a"}, **support.opts(server))
    second.beta_pause()

    def ids(query: SandboxQuery | None = None, **more: Any) -> set[str]:
        paginator = Sandbox.list(query=query, **more, **support.opts(server))
        found: set[str] = set()
        while paginator.has_next:
            found |= {item.sandbox_id for item in paginator.next_items()}
        return found

    assert ids(SandboxQuery(metadata={"team": "a"})) == {first.sandbox_id, third.sandbox_id}
    assert ids(SandboxQuery(metadata={"odd key&=": "v a/l"})) == {second.sandbox_id}
    assert ids(SandboxQuery(state=[SandboxState.PAUSED])) == {second.sandbox_id}
    assert ids(SandboxQuery(state=[SandboxState.RUNNING])) == {
        first.sandbox_id,
        third.sandbox_id,
    }
    assert ids() == {first.sandbox_id, second.sandbox_id, third.sandbox_id}
    # Pages of one: the SDK follows x-next-token until there is none.
    paginator = Sandbox.list(limit=1, **support.opts(server))
    pages = []
    while paginator.has_next:
        pages.append([item.sandbox_id for item in paginator.next_items()])
    assert len(pages) == 3 and all(len(page) == 1 for page in pages)


def test_set_timeout_moves_the_end_within_the_pipelines_time_to_live(
    server: Server, support: Bot
) -> None:
    box = Sandbox.create(**support.opts(server))

    box.set_timeout(120)

    made = row(box)
    assert made.expires_at is not None
    left = made.expires_at - timezone.now()
    assert timedelta(seconds=100) < left <= timedelta(seconds=120)
    assert Event.objects.filter(sandbox=made, action="sandbox.lifetime_set").exists()


def test_pause_keeps_the_workspace_and_connect_resumes_it(server: Server, support: Bot) -> None:
    box = Sandbox.create(**support.opts(server))
    services.write_file(row(box), "kept.txt", b"still here", BOT)

    assert box.beta_pause() is True
    paused = row(box)
    assert paused.state == State.STOPPED
    assert box.get_info().state == SandboxState.PAUSED
    assert box.beta_pause() is False  # paused already

    again = Sandbox.connect(box.sandbox_id, **support.opts(server))

    resumed = row(again)
    assert again.sandbox_id == box.sandbox_id
    assert resumed.state == State.RUNNING
    assert resumed.generation == paused.generation + 1  # a new container
    assert services.read_file(resumed, "kept.txt").data == b"still here"
    # Connecting to a running sandbox changes nothing.
    Sandbox.connect(box.sandbox_id, **support.opts(server))
    assert row(box).generation == resumed.generation


def test_the_sandboxes_environment_is_its_commands(server: Server, support: Bot) -> None:
    box = Sandbox.create(envs={"GREETING": "hello from e2b"}, **support.opts(server))

    made = row(box)
    request = services.clean_request(made, cmd="echo $GREETING")
    assert services.run_exec(made, request, BOT).stdout == "hello from e2b\n"
    assert made.env == {"GREETING": "hello from e2b"}
    labelled = Event.objects.get(sandbox=made, action="sandbox.labelled")
    assert labelled.detail["env"] == ["GREETING"]  # names, never values, in the history


def test_metrics_read_the_running_container(server: Server, support: Bot) -> None:
    box = Sandbox.create(**support.opts(server))

    metrics = box.get_metrics()

    assert len(metrics) == 1
    reading = metrics[0]
    assert reading.cpu_count == 1
    assert 0 < reading.mem_used < reading.mem_total
    assert reading.disk_total == row(box).workspace_limit_bytes
    assert 0 <= reading.cpu_used_pct <= 100


def test_kill_destroys_the_sandbox_and_its_workspace(server: Server, support: Bot) -> None:
    box = Sandbox.create(**support.opts(server))

    assert box.kill() is True

    assert row(box).state == State.DESTROYED
    assert Sandbox.kill(box.sandbox_id, **support.opts(server)) is False


def test_the_readmes_e2b_section_works_as_written(server: Server, docker_engine: Any) -> None:
    """The README's commands and program, as they are written there: the pipeline and its key
    from `create_pipeline`, the three settings, then the program in a Python of its own with
    nothing but those settings (the address changed to the served one)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Use Boxyard with the E2B SDK\n", 1)[1].split("\n## ", 1)[0]
    shell, program = re.findall(r"```(?:sh|python)\n(.*?)```", section, re.S)[:2]
    lines = shell.strip().splitlines()
    command = shlex.split(lines[0])
    assert command[:3] == [".venv/bin/python", "manage.py", "create_pipeline"]
    printed = io.StringIO()
    call_command(*command[2:], stdout=printed, stderr=io.StringIO())
    key = printed.getvalue().strip()
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", key)
    exports = [re.fullmatch(r"export (\w+)=(\S+).*", line) for line in lines[1:]]
    settings_given = {found[1]: found[2] for found in exports if found is not None}
    assert set(settings_given) == {"E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"}
    environment = {
        name: value.replace("http://127.0.0.1:8000", server.url)
        for name, value in settings_given.items()
    }
    environment["E2B_API_KEY"] = key
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "DJANGO_"))}

    ran = subprocess.run(
        [sys.executable, "-c", program],
        env={**clean, **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert ran.returncode == 0, ran.stderr
    made = Row.objects.get(pipeline__slug="support-bot")
    assert ran.stdout.splitlines() == [
        f"created {made.pk} running",
        f"listed ['{made.pk}']",
        "resumed running",
    ]
    assert made.scope_key == "group_42"
    assert made.metadata == {"launcher_type": "group", "launcher_id": "42"}
    assert made.state == State.DESTROYED
    assert made.generation == 2  # paused, then resumed in a new container


def test_the_first_versions_routes_and_the_metrics_of_many(server: Server, support: Bot) -> None:
    running = Sandbox.create(metadata={"team": "a"}, **support.opts(server))
    paused = Sandbox.create(metadata={"team": "a"}, **support.opts(server))
    paused.beta_pause()

    with httpx.Client(
        base_url=f"{server.url}/e2b", headers={"X-API-KEY": support.key}, timeout=60
    ) as http:
        listed = http.get("/sandboxes", params={"metadata": "team=a"}).json()
        many = http.get(
            "/sandboxes/metrics",
            params={"sandbox_ids": f"{running.sandbox_id},{paused.sandbox_id},nope"},
        ).json()
        not_paused = http.post(f"/sandboxes/{running.sandbox_id}/resume", json={})
        resumed = http.post(f"/sandboxes/{paused.sandbox_id}/resume", json={"timeout": 300})

    assert [item["sandboxID"] for item in listed] == [running.sandbox_id]  # running ones only
    assert list(many["sandboxes"]) == [running.sandbox_id]
    assert many["sandboxes"][running.sandbox_id]["memUsed"] > 0
    assert (not_paused.status_code, not_paused.json()["code"]) == (409, 409)
    assert resumed.status_code == 201
    assert resumed.json()["sandboxID"] == paused.sandbox_id
    assert row(paused).state == State.RUNNING
