"""The lifecycle's table, and `move`: every transition from every state, allowed or refused.

Pure database: a row is put in each state and every transition is asked of it. An allowed one
changes the state, sets its fields, records its one event with the actor and the reason; a
refused one changes nothing at all and records nothing.
"""

from typing import Any

import pytest
from django.db.models import F

from sandboxes import lifecycle
from sandboxes.lifecycle import FOLLOWS, TRANSITIONS, Transition
from sandboxes.models import Event, Lease, Sandbox, State, StopReason
from sandboxes.services.creating import create_row

pytestmark = pytest.mark.django_db

S = State
# Which states may follow which: the table as the product describes it, written out.
EXPECTED_FOLLOWS = {
    S.CREATING: {S.RUNNING, S.ERROR, S.STOPPING},
    S.RUNNING: {S.RUNNING, S.UNKNOWN, S.CREATING, S.STOPPING, S.STOPPED, S.MOVING},
    S.UNKNOWN: {S.RUNNING, S.ERROR, S.CREATING, S.STOPPING, S.STOPPED, S.MOVING},
    S.ERROR: {S.CREATING, S.STOPPING, S.MOVING},
    S.STOPPING: {S.STOPPING, S.STOPPED, S.DESTROYED, S.CREATING, S.RUNNING, S.ERROR, S.UNKNOWN},
    S.STOPPED: {S.CREATING, S.STOPPING, S.MOVING},
    # A move ends on its new host (creating there) or, cancelled, stopped where it was; it is
    # never stopped halfway.
    S.MOVING: {S.CREATING, S.STOPPED},
    S.DESTROYED: set(),
}


def test_the_table_is_the_products() -> None:
    assert {state: set(targets) for state, targets in FOLLOWS.items()} == EXPECTED_FOLLOWS


def test_nothing_follows_destroyed_and_only_a_stop_leads_there() -> None:
    assert FOLLOWS[S.DESTROYED] == frozenset()
    into_destroyed = [t for t in TRANSITIONS if S.DESTROYED in t.targets]
    assert into_destroyed == [lifecycle.DESTROY]
    assert lifecycle.DESTROY.sources == {S.STOPPING}


def _row(make_pipeline: Any, bot: Any, state: State) -> Sandbox:
    pipeline = make_pipeline()
    sandbox = create_row(pipeline, f"key-{state}", {}, bot)
    Sandbox.objects.filter(pk=sandbox.pk).update(state=state, container_id="c-1")
    Lease.objects.filter(sandbox=sandbox).update(holder="agent", epoch=1)
    sandbox.refresh_from_db()
    return sandbox


@pytest.mark.parametrize("transition", TRANSITIONS, ids=str)
@pytest.mark.parametrize("state", list(State), ids=str)
def test_every_transition_from_every_state(
    make_pipeline: Any, bot: Any, transition: Transition, state: State
) -> None:
    sandbox = _row(make_pipeline, bot, state)
    before = Sandbox.objects.filter(pk=sandbox.pk).values().get()
    events_before = Event.objects.count()
    target = sorted(transition.targets)[0] if len(transition.targets) > 1 else None

    moved = lifecycle.move(sandbox, transition, bot, to=target, reason="why not")

    allowed = state in transition.sources
    assert moved is allowed
    row = Sandbox.objects.get(pk=sandbox.pk)
    if allowed:
        assert row.state == (target or next(iter(transition.targets)))
        assert row.state in EXPECTED_FOLLOWS[state]  # the table as written out above
        [event] = Event.objects.order_by("-id")[:1]
        assert (event.action, event.actor, event.reason) == (transition.action, str(bot), "why not")
        assert Event.objects.count() == events_before + 1
        assert sandbox.state == row.state  # the caller's copy is read again
    else:
        assert Sandbox.objects.filter(pk=sandbox.pk).values().get() == before
        assert Event.objects.count() == events_before


def test_a_transition_of_another_generation_changes_nothing(make_pipeline, bot) -> None:
    """What a caller knows of an older generation says nothing about the current one."""
    sandbox = _row(make_pipeline, bot, S.RUNNING)
    Sandbox.objects.filter(pk=sandbox.pk).update(generation=F("generation") + 1)
    assert not lifecycle.move(sandbox, lifecycle.LOSE, bot)
    assert Sandbox.objects.get(pk=sandbox.pk).state == S.RUNNING
    assert sandbox.generation == 2  # read again: the caller sees where the row is now


def test_a_word_about_an_older_container_changes_nothing(make_pipeline, bot) -> None:
    sandbox = _row(make_pipeline, bot, S.RUNNING)
    assert not lifecycle.move(sandbox, lifecycle.LOSE, bot, container_id="c-0")
    assert lifecycle.move(sandbox, lifecycle.LOSE, bot, container_id="c-1")


def test_the_end_of_a_stop_frees_the_lease_and_clears_the_container(make_pipeline, bot) -> None:
    for end, final in ((lifecycle.STOP, S.STOPPED), (lifecycle.DESTROY, S.DESTROYED)):
        sandbox = _row(make_pipeline, bot, S.STOPPING)
        assert lifecycle.move(sandbox, end, bot, reason=StopReason.IDLE)
        row = Sandbox.objects.select_related("lease").get(pk=sandbox.pk)
        assert (row.state, row.container_id, row.pooled) == (final, "", False)
        assert row.stopped_at is not None
        assert (row.destroyed_at is not None) is (final == S.DESTROYED)
        assert (row.lease.holder, row.lease.expires_at) == ("", None)


def test_a_lost_sandbox_says_so_and_keeps_its_workspace(make_pipeline, bot) -> None:
    sandbox = _row(make_pipeline, bot, S.UNKNOWN)
    assert lifecycle.move(sandbox, lifecycle.LOSE, bot, detail={"exit_code": 137})
    row = Sandbox.objects.get(pk=sandbox.pk)
    assert (row.state, row.stop_reason, row.destroy_requested) == (S.STOPPED, "lost", False)
    assert Event.objects.get(action="sandbox.stopped").detail == {"exit_code": 137}


def test_a_restart_is_a_new_generation_with_its_own_container_name(make_pipeline, bot) -> None:
    sandbox = _row(make_pipeline, bot, S.ERROR)
    old_name = sandbox.container_name
    assert lifecycle.move(sandbox, lifecycle.RESTART, bot, reason="again")
    row = Sandbox.objects.get(pk=sandbox.pk)
    assert (row.state, row.generation, row.container_id) == (S.CREATING, 2, "")
    assert row.container_name == old_name.removesuffix("-g1") + "-g2"
    assert Event.objects.get(action="sandbox.restarting").detail == {
        "previous_state": "error",
        "generation": 2,
    }


def test_a_failure_keeps_why(make_pipeline, bot) -> None:
    sandbox = _row(make_pipeline, bot, S.CREATING)
    assert lifecycle.move(sandbox, lifecycle.FAIL, bot, reason="image missing")
    row = Sandbox.objects.get(pk=sandbox.pk)
    assert (row.state, row.stop_reason, row.status_detail) == (S.ERROR, "error", "image missing")


def test_cancelling_a_stop_needs_to_know_where_it_was(make_pipeline, bot) -> None:
    sandbox = _row(make_pipeline, bot, S.STOPPING)
    with pytest.raises(ValueError):
        lifecycle.move(sandbox, lifecycle.CANCEL_STOP, bot)
    with pytest.raises(ValueError):
        lifecycle.move(sandbox, lifecycle.CANCEL_STOP, bot, to=S.DESTROYED)
    assert lifecycle.move(sandbox, lifecycle.CANCEL_STOP, bot, to=S.RUNNING)
    assert Sandbox.objects.get(pk=sandbox.pk).state == S.RUNNING
