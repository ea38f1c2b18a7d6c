"""The terminal's service, read from rows (the fake runtime): typing is activity on the sandbox
its caller fetched (through the selector), while it runs. Opening and closing a terminal
against the real engine, and a lost lease closing it: tests/test_takeover.py."""

from typing import Any

import pytest

from sandboxes import services
from sandboxes.models import Sandbox, State
from sandboxes.services import terminal
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db


def test_typing_is_activity_on_the_fetched_sandbox_while_it_runs(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    Sandbox.objects.filter(pk=sandbox.pk).update(last_activity_at=None, idle_deadline=None)
    sandbox.refresh_from_db()
    terminal.typed(sandbox)
    assert Sandbox.objects.get(pk=sandbox.pk).last_activity_at is not None

    Sandbox.objects.filter(pk=sandbox.pk).update(
        state=State.STOPPED, last_activity_at=None, idle_deadline=None
    )
    sandbox.refresh_from_db()
    terminal.typed(sandbox)
    stopped = Sandbox.objects.get(pk=sandbox.pk)
    assert (stopped.last_activity_at, stopped.idle_deadline) == (None, None)
