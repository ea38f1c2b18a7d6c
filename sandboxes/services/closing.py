from django.db import transaction
from django.db.models.functions import Now

from boxyard.actors import Actor
from boxyard.errors import BoxyardError, InvalidState
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
    it. The row moves to `stopping` first, so a crash between the engine call and the final
    state leaves a row that says what was meant. `force` skips the lease (admins, reaper).
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
        previous_state = sandbox.state
        sandbox.state = State.STOPPING
        sandbox.stop_reason = reason
        sandbox.save(update_fields=["state", "stop_reason", "updated_at"])
        events.record(
            actor, "sandbox.stopping", sandbox=sandbox, reason=reason,
            delete_workspace=delete_workspace,
        )

    try:
        containers.remove(sandbox, delete_workspace=delete_workspace)
    except BoxyardError:
        # The engine said no or could not be reached: nothing was removed for certain, so the
        # sandbox is what it was, and the caller may try again.
        Sandbox.objects.filter(pk=sandbox.pk, state=State.STOPPING).update(
            state=previous_state, stop_reason=""
        )
        raise

    final = State.DESTROYED if delete_workspace else State.STOPPED
    with transaction.atomic():
        Sandbox.objects.filter(pk=sandbox.pk, state=State.STOPPING).update(
            state=final,
            stopped_at=Now(),
            destroyed_at=Now() if delete_workspace else None,
            container_id="",
        )
        Lease.objects.filter(sandbox=sandbox).update(holder="", expires_at=None, taken_over_from="")
        sandbox.refresh_from_db()
        events.record(actor, f"sandbox.{final}", sandbox=sandbox, reason=reason)
    return sandbox
