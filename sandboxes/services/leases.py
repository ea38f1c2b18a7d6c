"""The lease's own operations: renew it, keep the sandbox alive, release it, take it over.

The rules every other change obeys (who may act, taking a free lease, fencing by epoch) live
in the guard (`sandboxes.guard`), since every change checks them; these change the lease
itself.
"""

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput, StaleEpoch
from sandboxes import events
from sandboxes.guard import (
    LIVE,
    acting_on,
    lease_duration,
    lease_is_live,
    locked_lease,
    refusal,
)
from sandboxes.models import Lease, Sandbox

MAX_REASON = 200


def renew_lease(
    sandbox: Sandbox, actor: Actor, *, holder: str | None = None, epoch: int | None = None
) -> Lease:
    """Renew the caller's lease (a free one is taken)."""
    with acting_on(
        sandbox, actor, N_("renew the lease"), holder=holder, epoch=epoch, states=LIVE
    ) as acting:
        assert acting.lease is not None
        return acting.lease


def keep_alive(
    sandbox: Sandbox, actor: Actor, *, holder: str | None = None, epoch: int | None = None
) -> Sandbox:
    """Count as activity now (the idle deadline moves) and renew the lease: for a holder
    that is thinking, not running commands. The time to live does not move."""
    with acting_on(sandbox, actor, N_("keep alive"), holder=holder, epoch=epoch) as acting:
        acting.sandbox.record_activity(force=True)
    return acting.sandbox


def release_lease(
    sandbox: Sandbox,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    force: bool = False,
) -> Lease:
    """Free the lease. Only its holder may, unless `force` (an admin or the system)."""
    with acting_on(
        sandbox, actor, N_("release the lease"), holder=holder, epoch=epoch, states=LIVE,
        hold_lease=False,
    ) as acting:  # fmt: skip
        lease, now = locked_lease(acting.sandbox)
        if not force and lease_is_live(lease, now):
            if lease.holder != acting.holder:
                raise refusal(lease, acting.holder)
            if epoch is not None and epoch != lease.epoch:
                raise StaleEpoch(
                    N_(
                        "epoch %(epoch)s is stale; the lease is at epoch %(current)s",
                        epoch=epoch,
                        current=lease.epoch,
                    ),
                    epoch=lease.epoch,
                )
        previous = lease.holder
        lease.holder = ""
        lease.acquired_by = ""
        lease.expires_at = None
        lease.taken_over_from = ""
        lease.save()
        if previous:
            events.record(actor, "lease.released", sandbox=acting.sandbox, previous_holder=previous)
    return lease


def takeover_lease(
    sandbox: Sandbox, actor: Actor, *, holder: str | None = None, reason: str = ""
) -> Lease:
    """Take the lease whoever holds it; the previous holder's calls get 423 until released."""
    if not isinstance(reason, str) or len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason):
        raise InvalidInput(
            "reason", N_("must be at most %(count)s printable characters", count=MAX_REASON)
        )
    with acting_on(
        sandbox, actor, N_("take the sandbox over"), holder=holder or str(actor), states=LIVE,
        hold_lease=False,
    ) as acting:  # fmt: skip
        lease, now = locked_lease(acting.sandbox)
        previous = lease.holder if lease_is_live(lease, now) else ""
        if previous != acting.holder:
            lease.taken_over_from = previous
        lease.holder = acting.holder
        lease.epoch += 1
        lease.acquired_at = now
        lease.acquired_by = str(actor)
        lease.expires_at = now + lease_duration(acting.sandbox)
        lease.save()
        events.record(
            actor, "lease.taken_over", sandbox=acting.sandbox, reason=reason,
            holder=acting.holder, epoch=lease.epoch, previous_holder=previous,
        )  # fmt: skip
    return lease
