"""Closing a sandbox: its container removed, its workspace kept (stopped) or deleted
(destroyed), by its holder or by force; and the two steps of a stop on their own (the intent,
then the engine work and the end), which must survive an engine that says no and a second
finisher. Pure logic: the fake runtime stands in for the engine and shows what it was asked
to remove."""

import uuid
from typing import Any

import pytest
from celery import current_app
from django.db import transaction

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import InvalidState, LeaseBusy, RuntimeFailure
from sandboxes import metrics, services
from sandboxes.models import Event, Lease, Sandbox, State, StopReason
from sandboxes.services.closing import begin_stop, close_later, finish_stop
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db

# What a stop changes on the row; compared before and after a refusal.
STOP_FIELDS = (
    "state", "stop_reason", "destroy_requested", "container_id", "container_name",
    "generation", "stopped_at", "destroyed_at", "status_detail",
)  # fmt: skip


@pytest.fixture
def sandbox(pipeline: Any, bot: Any, fake_runtime: Any) -> Sandbox:
    """A running sandbox leased to agent-a, its container and workspace on the fake engine."""
    return services.open_sandbox(pipeline, CHAT, bot, holder="agent-a").sandbox


def row(sandbox: Sandbox) -> dict[str, Any]:
    return Sandbox.objects.filter(pk=sandbox.pk).values(*STOP_FIELDS).get()


def actions(sandbox: Sandbox) -> list[str]:
    return list(
        Event.objects.filter(sandbox=sandbox).order_by("id").values_list("action", flat=True)
    )


def sandbox_history(sandbox: Sandbox) -> list[str]:
    """The sandbox's own lifecycle events (not its lease's)."""
    return [action for action in actions(sandbox) if action.startswith("sandbox.")]


def cleaned(pipeline: Any) -> dict[str, int]:
    """The stops counted for the pipeline, by reason."""
    return (
        metrics.flush_and_snapshot(pipeline)["pipelines"].get(pipeline.slug, {}).get("cleaned", {})
    )


def test_a_kept_workspace_leaves_the_sandbox_stopped(sandbox, bot, fake_runtime) -> None:
    closed = services.close_sandbox(sandbox, bot, holder="agent-a")
    assert (closed.state, closed.stop_reason, closed.container_id) == (State.STOPPED, "closed", "")
    assert closed.stopped_at is not None and closed.destroyed_at is None
    assert fake_runtime.inspect_container(sandbox.container_name) is None
    assert sandbox.volume_name in fake_runtime.volumes
    assert Lease.objects.get(sandbox=sandbox).holder == ""  # free for the next open
    assert actions(sandbox)[-2:] == ["sandbox.stopping", "sandbox.stopped"]


def test_a_deleted_workspace_leaves_the_sandbox_destroyed(sandbox, bot, fake_runtime) -> None:
    closed = services.close_sandbox(sandbox, bot, holder="agent-a", delete_workspace=True)
    assert (closed.state, closed.stop_reason) == (State.DESTROYED, "closed")
    assert closed.destroyed_at is not None
    assert fake_runtime.inspect_container(sandbox.container_name) is None
    assert sandbox.volume_name not in fake_runtime.volumes
    assert actions(sandbox)[-2:] == ["sandbox.stopping", "sandbox.destroyed"]
    stopping = Event.objects.get(sandbox=sandbox, action="sandbox.stopping")
    assert stopping.detail == {"delete_workspace": True}


def test_another_holder_is_refused_and_nothing_changes(sandbox, bot, fake_runtime) -> None:
    before, events_before = row(sandbox), actions(sandbox)
    with pytest.raises(LeaseBusy) as refused:
        services.close_sandbox(sandbox, bot, holder="agent-b", delete_workspace=True)
    assert refused.value.extra["holder"] == "agent-a"
    assert row(sandbox) == before and actions(sandbox) == events_before
    assert fake_runtime.inspect_container(sandbox.container_name).running
    assert sandbox.volume_name in fake_runtime.volumes
    assert Lease.objects.get(sandbox=sandbox).holder == "agent-a"


def test_force_skips_the_lease(sandbox, alice_actor, fake_runtime) -> None:
    """An admin, the reaper and compute mode close whoever holds the lease."""
    closed = services.close_sandbox(sandbox, alice_actor, reason=StopReason.ADMIN, force=True)
    assert (closed.state, closed.stop_reason) == (State.STOPPED, "admin")
    assert Event.objects.get(sandbox=sandbox, action="sandbox.stopped").actor == "admin:alice"
    assert Lease.objects.get(sandbox=sandbox).holder == ""


def test_a_destroyed_sandbox_cannot_be_closed(sandbox, bot) -> None:
    services.close_sandbox(sandbox, bot, holder="agent-a", delete_workspace=True)
    before, events_before = row(sandbox), actions(sandbox)
    for delete_workspace in (False, True):
        with pytest.raises(InvalidState, match="destroyed"):
            services.close_sandbox(sandbox, bot, delete_workspace=delete_workspace, force=True)
    assert row(sandbox) == before and actions(sandbox) == events_before


def test_closing_a_stopped_sandbox_again_keeps_it_stopped(sandbox, bot, fake_runtime) -> None:
    services.close_sandbox(sandbox, bot, holder="agent-a")
    before, history = row(sandbox), sandbox_history(sandbox)
    again = services.close_sandbox(sandbox, bot, holder="agent-a")
    assert again.state == State.STOPPED
    assert row(sandbox) == before and sandbox_history(sandbox) == history
    assert sandbox.volume_name in fake_runtime.volumes


def test_closing_a_stopped_sandbox_again_leaves_its_lease_free(
    sandbox, pipeline, bot, fake_runtime
) -> None:
    services.close_sandbox(sandbox, bot, holder="agent-a")
    services.close_sandbox(sandbox, bot, holder="agent-a")  # a retry, say
    assert Lease.objects.get(sandbox=sandbox).holder == ""
    assert services.open_sandbox(pipeline, CHAT, bot, holder="agent-b").lease.holder == "agent-b"


def test_closing_a_stopped_sandbox_deleting_the_workspace_destroys_it(
    sandbox, bot, fake_runtime
) -> None:
    services.close_sandbox(sandbox, bot, holder="agent-a")
    destroyed = services.close_sandbox(sandbox, bot, holder="agent-a", delete_workspace=True)
    assert destroyed.state == State.DESTROYED
    assert sandbox.volume_name not in fake_runtime.volumes
    stopping = Event.objects.filter(sandbox=sandbox, action="sandbox.stopping").order_by("id")
    assert [event.detail["delete_workspace"] for event in stopping] == [False, True]


def test_an_engine_that_refuses_puts_the_row_back_and_says_so(
    sandbox, bot, fake_runtime, monkeypatch
) -> None:
    """Nothing was removed for certain: the row goes back where it was, so the caller can try
    again, and the history says the stop failed and why."""
    before = row(sandbox)

    def refuse(name_or_id: str) -> None:
        raise RuntimeFailure("the engine says no")

    monkeypatch.setattr(fake_runtime, "remove_container", refuse)
    with pytest.raises(RuntimeFailure, match="the engine says no"):
        services.close_sandbox(sandbox, bot, holder="agent-a", delete_workspace=True)
    assert row(sandbox) == before
    assert actions(sandbox)[-2:] == ["sandbox.stopping", "sandbox.stop_failed"]
    failed = Event.objects.get(sandbox=sandbox, action="sandbox.stop_failed")
    assert (failed.actor, failed.reason) == ("bot:support-bot", "the engine says no")
    assert sandbox.volume_name in fake_runtime.volumes
    assert Lease.objects.get(sandbox=sandbox).holder == "agent-a"
    assert cleaned(sandbox.pipeline) == {}

    monkeypatch.undo()  # the engine is back: the same call now goes through
    closed = services.close_sandbox(sandbox, bot, holder="agent-a", delete_workspace=True)
    assert closed.state == State.DESTROYED


def test_a_stop_without_a_way_back_stays_stopping_for_the_reconciler(
    sandbox, bot, fake_runtime, monkeypatch
) -> None:
    with transaction.atomic():
        begin_stop(sandbox, SYSTEM, StopReason.IDLE, delete_workspace=False)

    def refuse(name_or_id: str) -> None:
        raise RuntimeFailure("the engine says no")

    monkeypatch.setattr(fake_runtime, "remove_container", refuse)
    with pytest.raises(RuntimeFailure):
        finish_stop(sandbox, SYSTEM)
    assert (row(sandbox)["state"], row(sandbox)["stop_reason"]) == (State.STOPPING, "idle")
    assert "sandbox.stop_failed" not in actions(sandbox)


def test_finishing_a_stop_twice_records_one_end(sandbox, bot, fake_runtime) -> None:
    """The reconciler may finish a stop another process finished a moment ago, with the copy
    of the row it read before."""
    with transaction.atomic():
        begin_stop(sandbox, SYSTEM, StopReason.TTL, delete_workspace=True)
    stale_copy = Sandbox.objects.get(pk=sandbox.pk)
    finish_stop(sandbox, SYSTEM)
    again = finish_stop(stale_copy, SYSTEM)
    assert again.state == State.DESTROYED
    assert actions(sandbox).count("sandbox.destroyed") == 1
    assert sandbox.volume_name not in fake_runtime.volumes
    assert cleaned(sandbox.pipeline) == {"ttl": 1}


def test_the_cleaned_counter_counts_each_stop_by_its_reason(
    make_pipeline, bot, fake_runtime
) -> None:
    pipeline = make_pipeline()
    opened = [
        services.open_sandbox(pipeline, {**CHAT, "launcher_id": str(n)}, bot).sandbox
        for n in range(3)
    ]
    services.close_sandbox(opened[0], SYSTEM, reason=StopReason.IDLE, force=True)
    services.close_sandbox(opened[1], SYSTEM, reason=StopReason.IDLE, force=True)
    services.close_sandbox(opened[2], bot, delete_workspace=True)
    assert cleaned(pipeline) == {"idle": 2, "closed": 1}


def test_close_later_queues_one_destroy_per_live_sandbox_as_the_actor(
    make_pipeline, bot, alice_actor, fake_runtime, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    pipeline = make_pipeline()
    running, stopped, destroyed = (
        services.open_sandbox(pipeline, {**CHAT, "launcher_id": str(n)}, bot).sandbox
        for n in range(3)
    )
    services.close_sandbox(stopped, bot)
    services.close_sandbox(destroyed, bot, delete_workspace=True)
    queued: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, args=(), **_: queued.append((name, list(args)))
    )
    moving = services.open_sandbox(pipeline, {**CHAT, "launcher_id": "moving"}, bot).sandbox
    Sandbox.objects.filter(pk=moving.pk).update(state=State.MOVING)  # the table refuses its stop
    ids: list[object] = [running.pk, str(stopped.pk), destroyed.pk, moving.pk, uuid.uuid4()]
    with django_capture_on_commit_callbacks(execute=True):
        assert close_later(ids, alice_actor, delete_workspace=True, reason=StopReason.ADMIN) == 2
        assert queued == []  # handed over only once the transaction commits
    assert sorted(queued) == sorted(
        ("sandboxes.destroy", [str(sandbox.pk), True, "admin", "admin:alice"])
        for sandbox in (running, stopped)
    )
    assert {Actor.parse(args[-1]) for _, args in queued} == {alice_actor}
    # Queued, not done: the rows change as the worker gets to them.
    assert Sandbox.objects.get(pk=running.pk).state == State.RUNNING
