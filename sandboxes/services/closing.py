"""Stopping a sandbox: its container removed, its workspace kept (stopped) or deleted
(destroyed), by its holder, an admin, the reaper or the reconciler.

A stop is two steps with the intent recorded in between: the row moves to `stopping` (with
`destroy_requested` saying whether the workspace goes too) in one transaction, then the
engine work is done and the final state recorded. A crash between the two leaves a row that
says what was meant, and the reconciler finishes it (`finish_stop` is idempotent).
"""

from django.db import transaction
from django.db.models.functions import Now

from boxyard import chaos
from boxyard.actors import Actor
from boxyard.errors import BoxyardError, InvalidState
from sandboxes import metrics
from sandboxes.models import Lease, Sandbox, State, StopReason
from sandboxes.services import containers, events, leases


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
    it. `force` skips the lease (admins, reaper).
    """
    with transaction.atomic():
        sandbox = Sandbox.objects.locked().get(pk=sandbox.pk)
        if sandbox.state == State.DESTROYED:
            raise InvalidState("the sandbox is already destroyed", state=sandbox.state)
        if not force:
            leases.authorize(
                sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor
            )
        if sandbox.state == State.STOPPED and not delete_workspace:
            return sandbox
        previous_state = begin_stop(sandbox, actor, reason, delete_workspace=delete_workspace)
    return finish_stop(sandbox, actor, undo_to=previous_state)


def begin_stop(sandbox: Sandbox, actor: Actor, reason: str, *, delete_workspace: bool) -> str:
    """Record the intent to stop a row locked by the caller's transaction; returns the state
    it was in."""
    previous_state = sandbox.state
    sandbox.state = State.STOPPING
    sandbox.stop_reason = reason
    sandbox.destroy_requested = delete_workspace
    sandbox.save(update_fields=["state", "stop_reason", "destroy_requested", "updated_at"])
    events.record(
        actor, "sandbox.stopping", sandbox=sandbox, reason=reason, delete_workspace=delete_workspace,
    )
    return previous_state


def finish_stop(sandbox: Sandbox, actor: Actor, *, undo_to: str | None = None) -> Sandbox:
    """Do the engine work of a stop in progress and record its end.

    If the engine refuses or cannot be reached, nothing was removed for certain: with
    `undo_to` the row goes back to that state (the caller may try again), without it the row
    stays `stopping` for the reconciler to finish.
    """
    chaos.point("stop:stopping")
    try:
        containers.remove(sandbox, delete_workspace=sandbox.destroy_requested)
    except BoxyardError:
        if undo_to is not None:
            Sandbox.objects.filter(pk=sandbox.pk, state=State.STOPPING).update(
                state=undo_to, stop_reason="", destroy_requested=False
            )
        raise
    chaos.point("stop:volume-removed")
    final = State.DESTROYED if sandbox.destroy_requested else State.STOPPED
    with transaction.atomic():
        updated = Sandbox.objects.filter(pk=sandbox.pk, state=State.STOPPING).update(
            state=final,
            stopped_at=Now(),
            destroyed_at=Now() if final == State.DESTROYED else None,
            container_id="",
            pooled=False,
        )
        Lease.objects.filter(sandbox=sandbox).update(holder="", expires_at=None, taken_over_from="")
        sandbox.refresh_from_db()
        if updated:
            events.record(actor, f"sandbox.{final}", sandbox=sandbox, reason=sandbox.stop_reason)
    if updated:
        metrics.count("boxyard_sandboxes_cleaned_total", sandbox.pipeline.slug, sandbox.stop_reason)
    return sandbox
