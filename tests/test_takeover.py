"""An admin's takeover against the real engine, through the API, the dashboard and its
websockets: it holds past the pipeline's lease timeout until the admin releases it (the bot
gets 423 meanwhile), or until the operator's ceiling (BOXYARD_TAKEOVER_MAX_SECONDS), which
the page counts down; a lost lease closes the admin's terminal, saying why, is an event, and
the page shows it."""

import asyncio
import re
import time
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client
from django.utils import timezone

from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.consumers.sandbox import SandboxConsumer
from sandboxes.consumers.terminal import TerminalConsumer
from sandboxes.models import Event, Exec, ExecState, Lease, Sandbox
from sandboxes.services.leases import expired_takeovers
from sandboxes.services.reaping import reap_due
from tests.conftest import CHAT, wait_for
from tests.websockets import receive_until, websocket

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 5  # the shortest a pipeline allows


@pytest.fixture
def bot_api(make_pipeline) -> Client:
    pipeline = make_pipeline(slug="support", lease_timeout_seconds=LEASE_SECONDS)
    return Client(HTTP_AUTHORIZATION=f"Bearer {PipelineToken.issue(pipeline, name='bot')[1]}")


@pytest.fixture
def sandbox(bot_api, docker_engine) -> Sandbox:
    opened = bot_api.post(
        "/api/v1/sandboxes/open",
        {"pipeline": "support", "variables": CHAT},
        content_type="application/json",
    )
    assert opened.status_code == 200, opened.content
    return Sandbox.objects.get(pk=opened.json()["sandbox_id"])


def bot_exec(bot_api: Client, sandbox: Sandbox) -> Any:
    return bot_api.post(
        f"/api/v1/sandboxes/{sandbox.pk}/exec",
        {"cmd": "echo from-the-bot"},
        content_type="application/json",
    )


def status(message: str) -> str:
    """The lease as a pushed status part shows it (alice's where there is none)."""
    found = re.search(r'<dd data-testid="lease">(.*?)</dd>', message, re.S)
    return found.group(1) if found else "admin:alice,"


def in_thread(function: Any) -> Any:
    return database_sync_to_async(function, thread_sensitive=False)


def test_a_takeover_holds_past_the_lease_timeout_until_released(
    admin_client, bot_api, sandbox
) -> None:
    assert admin_client.post(f"/sandboxes/{sandbox.pk}/takeover").status_code == 302
    time.sleep(LEASE_SECONDS + 1.5)  # past the pipeline's lease timeout
    refused = bot_exec(bot_api, sandbox)
    assert refused.status_code == 423, refused.content
    assert "admin:alice" in refused.content.decode()
    # The admin's own calls do not turn it into a lease that lapses.
    admin_client.post(f"/sandboxes/{sandbox.pk}/run", {"cmd": "echo mine"})
    assert Exec.objects.get(command="echo mine").exit_code == 0
    time.sleep(LEASE_SECONDS + 1.5)
    assert bot_exec(bot_api, sandbox).status_code == 423
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    assert 'data-testid="until-released"' in page and 'data-testid="lease-warning"' not in page
    assert not Event.objects.filter(action="lease.expired").exists()
    # Until the admin releases it: then the bot carries on.
    admin_client.post(f"/sandboxes/{sandbox.pk}/release")
    assert bot_exec(bot_api, sandbox).status_code == 200


def test_the_ceiling_ends_a_takeover_with_an_event_and_the_page_counts_down(
    admin_client, bot_api, sandbox, settings
) -> None:
    settings.BOXYARD_TAKEOVER_MAX_SECONDS = 3
    admin_client.post(f"/sandboxes/{sandbox.pk}/takeover")
    lease = Lease.objects.get(sandbox=sandbox)
    assert lease.taken_over and lease.expires_at is not None
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    warning = page[page.index('data-testid="lease-warning"') :]
    assert f'<time datetime="{lease.expires_at.isoformat()}" data-countdown>' in warning
    assert "Takeover time limit" in warning and "the bot may take the lease back" in warning
    assert bot_exec(bot_api, sandbox).status_code == 423
    # Its ceiling passes, by the database's clock, as the reaper reads it.
    due = expired_takeovers().filter(sandbox=sandbox)
    assert not due.exists()
    wait_for(due.exists, 10)
    # Nobody called: the periodic reaping pass ends it, and says so.
    reap_due()
    expired = Event.objects.get(action="lease.expired", sandbox=sandbox)
    assert expired.detail["previous_holder"] == "admin:alice"
    assert Lease.objects.get(sandbox=sandbox).holder == ""
    assert bot_exec(bot_api, sandbox).status_code == 200  # the bot takes it back
    assert Event.objects.filter(action="lease.expired").count() == 1


@pytest.mark.parametrize("how", ["ceiling", "taken"])
def test_a_lost_lease_closes_the_terminal_and_the_page_shows_it(
    how, admin_client, bot_api, sandbox, settings, monkeypatch
) -> None:
    monkeypatch.setattr(TerminalConsumer, "HOLD_SECONDS", 0.5, raising=False)
    monkeypatch.setattr(SandboxConsumer, "HOLD_SECONDS", 0.5, raising=False)
    settings.BOXYARD_TAKEOVER_MAX_SECONDS = 3600 if how == "ceiling" else 0
    admin_client.post(f"/sandboxes/{sandbox.pk}/takeover")
    taken = Lease.objects.get(sandbox=sandbox).epoch

    async def scenario() -> tuple[str, int, list[str]]:
        terminal = websocket(f"/ws/sandboxes/{sandbox.pk}/terminal/", admin_client)
        assert (await terminal.connect())[0]
        page = websocket(f"/ws/sandboxes/{sandbox.pk}/", admin_client)
        assert (await page.connect())[0]
        await page.receive_from(timeout=10)
        await terminal.send_to(text_data='{"type": "input", "data": "echo still-here\\n"}')
        opened = Exec.objects.filter(command="terminal", state=ExecState.RUNNING)
        while not await in_thread(opened.exists)():
            await asyncio.sleep(0.1)
        if how == "taken":
            bob = services.Actor("admin", "bob")
            await in_thread(services.takeover_lease)(sandbox, bob)
        else:  # the ceiling's time comes
            past = timezone.now() - timedelta(seconds=1)
            await in_thread(Lease.objects.filter(sandbox=sandbox).update)(expires_at=past)
        said, code = "", 0
        deadline = time.monotonic() + 20
        while not code:
            assert time.monotonic() < deadline, said
            try:
                output = await terminal.receive_output(timeout=deadline - time.monotonic())
            except TimeoutError:
                raise AssertionError(f"the terminal did not close; it said {said!r}") from None
            if output["type"] == "websocket.close":
                code = output.get("code", 1000)
            elif output.get("text"):
                said += output["text"]
        pushed = await receive_until(page, lambda m: "admin:alice," not in status(m), seconds=15)
        await page.disconnect()
        await terminal.disconnect(timeout=30)
        return said, code, pushed

    said, code, pushed = asyncio.run(scenario())
    assert Exec.objects.get(command="terminal").epoch == taken  # opened under the takeover
    assert "The lease is lost" in said and "the terminal is closed" in said, said
    assert code == 4423
    closed = Event.objects.get(action="terminal.closed", sandbox=sandbox)
    assert closed.reason.startswith("the lease is lost")
    if how == "ceiling":
        assert Event.objects.filter(action="lease.expired", sandbox=sandbox).count() == 1
        assert "free" in status(pushed[-1])
        assert bot_exec(bot_api, sandbox).status_code == 200
    else:
        assert "taken over by admin:bob" in said
        assert "admin:bob" in status(pushed[-1])


def test_an_open_page_keeps_its_admins_lease_alive(
    admin_client, alice_actor, bot_api, sandbox, monkeypatch
) -> None:
    monkeypatch.setattr(SandboxConsumer, "HOLD_SECONDS", 0.5, raising=False)
    services.release_lease(sandbox, alice_actor, force=True)
    services.renew_lease(sandbox, alice_actor, holder="admin:alice")  # a lease, not a takeover

    async def scenario() -> None:
        page = websocket(f"/ws/sandboxes/{sandbox.pk}/", admin_client)
        assert (await page.connect())[0]
        await page.receive_from(timeout=10)
        await asyncio.sleep(LEASE_SECONDS + 2)  # past the pipeline's lease timeout
        await page.disconnect()

    asyncio.run(scenario())
    busy = bot_exec(bot_api, sandbox)
    assert busy.status_code == 409, busy.content  # still the admin's
    assert Lease.objects.get(sandbox=sandbox).holder == "admin:alice"
