"""Lease operations as callers see them: renew, release, take over."""

from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import InvalidInput, InvalidState
from sandboxes.models import Lease, Sandbox, State
from sandboxes.services import leases
from sandboxes.services.execs import require_running


def _locked(sandbox: Sandbox) -> Sandbox:
    sandbox = Sandbox.objects.locked().get(pk=sandbox.pk)
    if sandbox.state == State.DESTROYED:
        raise InvalidState("the sandbox is destroyed", state=sandbox.state)
    return sandbox


def renew_lease(sandbox: Sandbox, actor: Actor, *, holder: str | None = None,
                epoch: int | None = None) -> Lease:
    with transaction.atomic():
        sandbox = _locked(sandbox)
        return leases.authorize(
            sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor
        )


def keep_alive(sandbox: Sandbox, actor: Actor, *, holder: str | None = None,
               epoch: int | None = None) -> Sandbox:
    """Count as activity now (the idle deadline moves) and renew the lease: for a holder
    that is thinking, not running commands. The time to live does not move."""
    with transaction.atomic():
        sandbox = _locked(sandbox)
        require_running(sandbox, "keep alive")
        leases.authorize(sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor)
        sandbox.record_activity(force=True)
    return sandbox


def release_lease(sandbox: Sandbox, actor: Actor, *, holder: str | None = None,
                  epoch: int | None = None, force: bool = False) -> Lease:
    with transaction.atomic():
        sandbox = _locked(sandbox)
        return leases.release(
            sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor,
            force=force,
        )


def takeover_lease(sandbox: Sandbox, actor: Actor, *, holder: str | None = None,
                   reason: str = "") -> Lease:
    """Take the lease whoever holds it; the previous holder's calls get 423 until released."""
    if not isinstance(reason, str) or len(reason) > 200 or any(ord(ch) < 32 for ch in reason):
        raise InvalidInput("reason", "must be at most 200 printable characters")
    with transaction.atomic():
        sandbox = _locked(sandbox)
        return leases.takeover(sandbox, leases.clean_holder(holder or str(actor), sandbox), actor,
                               reason=reason)
