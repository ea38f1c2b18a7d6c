"""What a bot does reaches an open sandbox page and the fleet through their websockets,
as the partials a page load renders, each change re-rendering only the parts it touched."""

import asyncio
import re
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async

from sandboxes import live, services
from sandboxes.events import touched_by
from sandboxes.models import Exec
from tests.conftest import CHAT
from tests.websockets import receive_until, websocket

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def in_thread(function: Any) -> Any:
    return database_sync_to_async(function, thread_sensitive=False)


def run(sandbox: Any, bot: Any, cmd: str, **request: Any) -> Exec:
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd, **request), bot)


def part(message: str, element_id: str) -> str:
    """The element of a pushed message with that id, up to the next pushed element."""
    found = re.search(rf'<(\w+) id="{element_id}"[^>]*hx-swap-oob[^>]*>.*?</\1>', message, re.S)
    return found.group(0) if found else ""


def test_a_bots_commands_files_and_sessions_reach_the_open_page(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox

    async def scenario() -> dict[str, list[str]]:
        page = websocket(f"/ws/sandboxes/{sandbox.pk}/", admin_client)
        assert (await page.connect())[0]
        first = await page.receive_from(timeout=10)
        for element in ("sandbox-status", "execs", "events", "processes-view", "sessions-view"):
            assert f'id="{element}"' in first
        seen: dict[str, list[str]] = {}

        await in_thread(run)(sandbox, bot, "echo hello-from-the-bot")
        seen["foreground"] = await receive_until(
            page, lambda m: "hello-from-the-bot" in part(m, "execs")
        )

        background = await in_thread(run)(sandbox, bot, "sleep 60 # bg-marker", background=True)
        seen["background"] = await receive_until(
            page, lambda m: "bg-marker" in part(m, "processes-view")
        )
        await in_thread(services.kill_exec)(background, bot)
        seen["killed"] = await receive_until(
            page,
            lambda m: 'id="processes-view"' in m and "bg-marker" not in part(m, "processes-view"),
        )

        await in_thread(run)(sandbox, bot, "echo fresh-marker", one_shot=True)
        seen["fresh"] = await receive_until(page, lambda m: "fresh-marker" in part(m, "execs"))

        await in_thread(services.write_file)(sandbox, "notes.txt", b"hi", bot)
        seen["file"] = await receive_until(
            page, lambda m: 'id="files-stale"' in m and "file.written" in part(m, "events")
        )

        await in_thread(services.create_session)(sandbox, "build", bot)
        seen["session"] = await receive_until(
            page, lambda m: 'data-session="build"' in part(m, "sessions-view")
        )
        await in_thread(run)(sandbox, bot, "cd /tmp", session="build")
        seen["cwd"] = await receive_until(
            page,
            lambda m: (
                re.search(r'data-session="build".*?>/tmp<', part(m, "sessions-view"), re.S)
                is not None
            ),
        )
        await page.disconnect()
        return seen

    seen = asyncio.run(scenario())
    # A command touches its row, the background commands, the sessions and the files; not the
    # status: what a page load renders of those, and nothing else, is pushed.
    for step in ("foreground", "fresh", "cwd"):
        assert all('id="sandbox-status"' not in message for message in seen[step]), step


def test_a_burst_of_commands_is_gathered_into_a_few_renders(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox

    async def scenario() -> list[str]:
        page = websocket(f"/ws/sandboxes/{sandbox.pk}/", admin_client)
        assert (await page.connect())[0]
        await page.receive_from(timeout=10)
        for number in range(30):
            await in_thread(run)(sandbox, bot, f"echo burst-{number}")
        got = await receive_until(page, lambda m: "burst-29" in part(m, "execs"), seconds=20)
        await page.disconnect()
        return got

    got = asyncio.run(scenario())
    renders = [message for message in got if 'id="execs"' in message]
    # 30 commands are 60 changes (a start and an end each); one render each would be 60.
    assert 1 <= len(renders) < 60, len(renders)


def test_commands_move_the_fleets_totals_once_a_second_at_most(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox

    async def scenario() -> tuple[list[str], float]:
        fleet = websocket("/ws/fleet/?state=live", admin_client)
        assert (await fleet.connect())[0]
        await fleet.receive_from(timeout=10)
        started = time.monotonic()
        for _ in range(10):
            await in_thread(run)(sandbox, bot, "true")
        got = await receive_until(
            fleet, lambda m: re.search(r"Completed 10\b", part(m, "fleet-totals")) is not None
        )
        took = time.monotonic() - started
        await fleet.disconnect()
        return got, took

    got, took = asyncio.run(scenario())
    totals = [message for message in got if 'id="fleet-totals"' in message]
    assert len(totals) <= took + 2, (len(totals), took)
    assert f'id="sandbox-{sandbox.pk}"' in "".join(totals)  # its last activity moved


def test_each_kind_of_event_touches_its_parts() -> None:
    assert touched_by("lease.taken_over") == {live.STATUS, live.EVENTS}
    assert touched_by("file.written") == {live.FILES, live.EVENTS}
    assert touched_by("session.created") == {live.SESSIONS, live.EVENTS}
    assert touched_by("process.restarted") == {live.PROCESSES, live.EVENTS}
    assert touched_by("sandbox.stopped") == live.PARTS


def test_the_pages_of_one_sandbox_share_a_render_each_with_its_own_token(
    admin_client, pipeline, bot, docker_engine, monkeypatch
) -> None:
    from django.middleware.csrf import _does_token_match  # the check Django itself applies

    from sandboxes import dashboard

    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    renders: list[object] = []
    sandbox_page = dashboard.sandbox_page
    monkeypatch.setattr(
        dashboard, "sandbox_page", lambda *a, **k: renders.append(a) or sandbox_page(*a, **k)
    )
    secrets = ["a" * 32, "b" * 32]

    async def scenario() -> list[str]:
        pages = [
            websocket(f"/ws/sandboxes/{sandbox.pk}/", admin_client, csrftoken=secret)
            for secret in secrets
        ]
        for page in pages:
            assert (await page.connect())[0]
            await page.receive_from(timeout=10)
        renders.clear()
        await in_thread(services.takeover_lease)(sandbox, bot, reason="check")
        got = [
            (await receive_until(page, lambda m: 'id="sandbox-status"' in m))[-1] for page in pages
        ]
        for page in pages:
            await page.disconnect()
        return got

    got = asyncio.run(scenario())
    assert len(renders) == 1  # one render for both pages
    for secret, message in zip(secrets, got, strict=True):
        tokens = set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', message))
        assert tokens and all(_does_token_match(token, secret) for token in tokens)


def test_the_pages_of_a_sandbox_share_one_reading_of_its_cpu_and_memory(
    pipeline, bot, docker_engine
) -> None:
    from sandboxes.consumers import usage
    from sandboxes.runtime.agent import At

    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    at = At(sandbox.container_id, sandbox.host_id)
    first, second = usage.watch(at), usage.watch(at)
    assert first is second and first.thread.is_alive()  # one stream for both pages
    deadline = time.monotonic() + 10
    while first.latest is None:
        assert time.monotonic() < deadline, "no reading within 10 s"
        time.sleep(0.1)
    assert first.latest.memory_limit_bytes == pipeline.memory_mb * 2**20
    usage.unwatch(first)
    assert first.thread.is_alive()  # a page still looks
    usage.unwatch(second)
    first.thread.join(timeout=5)
    assert not first.thread.is_alive()  # the last page left: the stream ends
    again = usage.watch(at)
    assert again is not first  # a new page starts a new one
    usage.unwatch(again)
