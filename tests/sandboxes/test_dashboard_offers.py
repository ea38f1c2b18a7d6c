"""The sandbox page offers what the state table allows: for every state, the restart, stop,
destroy and move buttons are enabled exactly when their transition may start from it (pure
database; the buttons as rendered are tests/test_dashboard_actions.py)."""

from typing import Any

import pytest

from boxyard.actors import Actor
from hosts.models import DockerHost, HostState
from sandboxes import lifecycle
from sandboxes.dashboard import sandbox_actions
from sandboxes.models import Lease, Sandbox, State
from sandboxes.selectors import principal_for_user
from sandboxes.services.creating import create_row

pytestmark = pytest.mark.django_db


def _in(state: State, make_pipeline: Any, bot: Any) -> Sandbox:
    sandbox = create_row(make_pipeline(), f"key-{state}", {}, bot)
    Sandbox.objects.filter(pk=sandbox.pk).update(state=state)
    sandbox.refresh_from_db()
    return sandbox


@pytest.mark.parametrize("state", list(State), ids=str)
def test_the_buttons_offered_are_the_transitions_the_table_allows(
    state: State, make_pipeline: Any, bot: Any
) -> None:
    DockerHost.objects.create(name="elsewhere", state=HostState.ACTIVE)  # somewhere to move to
    sandbox = _in(state, make_pipeline, bot)

    offered = {action.name: action for action in sandbox_actions(sandbox, "alice")}

    assert offered["restart"].enabled is (state in lifecycle.RESTART.sources)
    assert offered["destroy"].enabled is (state in lifecycle.BEGIN_STOP.sources)
    # A stopped sandbox is not stopped again: its stop would change nothing.
    assert offered["stop"].enabled is (
        state in lifecycle.BEGIN_STOP.sources and state != State.STOPPED
    )
    assert offered["move"].enabled is (state in lifecycle.BEGIN_MOVE.sources)
    for action in offered.values():
        assert action.enabled or action.reason, f"{action.name} is refused without a reason"


def test_a_moving_sandbox_is_not_offered_destroy(make_pipeline: Any, bot: Any) -> None:
    # The table refuses a stop while the workspace is carried across; the page said yes.
    offered = {a.name: a for a in sandbox_actions(_in(State.MOVING, make_pipeline, bot), "alice")}
    assert not offered["destroy"].enabled and not offered["stop"].enabled
    assert offered["destroy"].reason == "The sandbox is Moving."


def test_allows_reads_the_table(make_pipeline: Any, bot: Any) -> None:
    sandbox = _in(State.STOPPED, make_pipeline, bot)
    assert lifecycle.allows(sandbox, lifecycle.RESTART)
    assert not lifecycle.allows(sandbox, lifecycle.STOP)


def test_an_admin_is_one_actor_wherever_they_act(
    make_pipeline: Any, bot: Any, django_user_model: Any
) -> None:
    """The lease an admin takes in one entry point (the API as a staff user, the terminal) is
    recognised as theirs by the page: every entry point names the admin one way."""
    user = django_user_model.objects.create_user("alice", is_staff=True)
    principal = principal_for_user(user)
    assert principal is not None
    assert (
        principal.actor == Actor.admin(user) == Actor.admin("alice") == Actor.parse("admin:alice")
    )
    sandbox = _in(State.RUNNING, make_pipeline, bot)
    Lease.objects.filter(sandbox=sandbox).update(holder=str(principal.actor), epoch=1)
    sandbox.refresh_from_db()
    sandbox.lease.refresh_from_db()
    offered = {action.name: action for action in sandbox_actions(sandbox, "alice")}
    assert offered["renew"].enabled and not offered["takeover"].enabled
