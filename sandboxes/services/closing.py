"""Stopping a sandbox: its container removed, its workspace kept (stopped) or deleted
(destroyed), by its holder, an admin, the reaper or the reconciler.

A stop is two steps with the intent recorded in between: the row moves to `stopping` (with
`destroy_requested` saying whether the workspace goes too) in one transaction, then the
engine work is done and the final state recorded. A crash between the two leaves a row that
says what was meant, and the reconciler finishes it (`finish_stop` is idempotent).
"""

from collections.abc import Sequence
from uuid import UUID

from boxyard import chaos
from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError
from sandboxes import lifecycle
from sandboxes.guard import LIVE, acting_on, authorize
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services import containers
from sandboxes.services.background import DESTROY, later


def close_sandbox(
    sandbox: Sandbox,
    actor: Actor,
    *,
    delete_workspace: bool = False,
    reason: str = StopReason.CLOSED,
    holder: str | None = None,
    epoch: int | None = None,
    force: bool = False,
) -> Sandbox:
    """Destroy the container; keep the workspace (state stopped) or delete it (destroyed).

    A kept workspace keeps the scope key: the next open of the key starts a new container on
    it. `force` skips the lease (admins, the reaper, compute mode).
    """
    with acting_on(
        sandbox, actor, N_("close the sandbox"), holder=holder, epoch=epoch, states=LIVE,
        hold_lease=False,
    ) as acting:  # fmt: skip
        sandbox = acting.sandbox
        if sandbox.state == State.STOPPED and not delete_workspace:
            return sandbox  # nothing to do: no lease taken for it either
        if not force:
            authorize(sandbox, acting.holder, acting.epoch, actor)
        was = begin_stop(sandbox, actor, reason, delete_workspace=delete_workspace)
    return finish_stop(sandbox, actor, undo_to=was)


def begin_stop(sandbox: Sandbox, actor: Actor, reason: str, *, delete_workspace: bool) -> State:
    """Record the intent to stop a row the caller's transaction has locked; returns the
    state it was in."""
    was = State(sandbox.state)
    lifecycle.move(
        sandbox,
        lifecycle.BEGIN_STOP,
        actor,
        reason=reason,
        fields={"destroy_requested": delete_workspace},
        detail={"delete_workspace": delete_workspace},
    )
    return was


def finish_stop(sandbox: Sandbox, actor: Actor, *, undo_to: State | None = None) -> Sandbox:
    """Do the engine work of a stop in progress and record its end.

    If the engine refuses or cannot be reached, nothing was removed for certain: with
    `undo_to` the row goes back to that state (the caller may try again), without it the row
    stays `stopping` for the reconciler to finish.
    """
    chaos.point("stop:stopping")
    try:
        containers.remove(sandbox, delete_workspace=sandbox.destroy_requested)
    except BoxyardError as error:
        if undo_to is not None and undo_to != State.STOPPING:
            lifecycle.move(sandbox, lifecycle.CANCEL_STOP, actor, to=undo_to, reason=error.message)
        raise
    chaos.point("stop:volume-removed")
    end = lifecycle.DESTROY if sandbox.destroy_requested else lifecycle.STOP
    lifecycle.move(sandbox, end, actor, reason=sandbox.stop_reason)
    return sandbox


def close_later(
    sandbox_ids: Sequence[UUID | str], actor: Actor, *, delete_workspace: bool, reason: str
) -> int:
    """Have a worker close each of these sandboxes as `actor` (a bulk destroy from the fleet:
    the rows change as they go); returns how many were queued: those the state table lets
    stop now (not one destroyed, nor one moving to another host)."""
    found = list(
        Sandbox.objects.filter(
            pk__in=sandbox_ids, state__in=lifecycle.BEGIN_STOP.sources
        ).values_list("pk", "host_id")
    )
    for sandbox_id, host in found:
        later(DESTROY, str(sandbox_id), delete_workspace, reason, str(actor), host=host)
    return len(found)
