"""The lease's own operations: renew it, keep the sandbox alive, release it, take it over.

The rules every other change obeys (who may act, taking a free lease, fencing by epoch) live
in the guard (`sandboxes.guard`), since every change checks them; these change the lease
itself.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Now

from boxyard.actors import Actor
from boxyard.errors import (
    N_,
    InvalidInput,
    InvalidState,
    LeaseBusy,
    StaleEpoch,
    TakenOver,
)
from sandboxes import events
from sandboxes.guard import (
    LIVE,
    acting_on,
    end_takeover,
    lease_is_live,
    locked_lease,
    require_holder,
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
            require_holder(lease, acting.holder, acting.epoch)
        previous = lease.holder
        lease.holder = ""
        lease.acquired_by = ""
        lease.expires_at = None
        lease.taken_over_from = ""
        lease.taken_over = False
        lease.save()
        if previous:
            events.record(actor, "lease.released", sandbox=acting.sandbox, previous_holder=previous)
    return lease


def takeover_lease(
    sandbox: Sandbox, actor: Actor, *, holder: str | None = None, reason: str = ""
) -> Lease:
    """Take the lease whoever holds it; the previous holder's calls get 423 until released.

    The takeover holds until released (calls do not move its end), or until the operator's
    ceiling, BOXYARD_TAKEOVER_MAX_SECONDS, when one is set."""
    # The one check of a takeover's reason, for the API and the dashboard alike.
    if len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason):
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
        ceiling = settings.BOXYARD_TAKEOVER_MAX_SECONDS
        lease.expires_at = now + timedelta(seconds=ceiling) if ceiling else None
        lease.taken_over = True
        lease.save()
        events.record(
            actor, "lease.taken_over", sandbox=acting.sandbox, reason=reason,
            holder=acting.holder, epoch=lease.epoch, previous_holder=previous,
        )  # fmt: skip
    return lease


def hold(sandbox: Sandbox, actor: Actor, *, epoch: int | None = None) -> Lease | None:
    """What an open dashboard page or terminal of `actor` does every few seconds: end a
    takeover past its ceiling (an event), then keep the admin's lease.

    With `epoch` (a terminal, opened under that epoch): the lease must still be the admin's at
    that epoch; it is renewed (a takeover's end does not move) and returned; raises LeaseBusy,
    TakenOver or StaleEpoch when it was lost, InvalidState when the sandbox stopped. Without
    (a page): the lease is renewed if the admin holds it, and never taken; None if not held.
    """
    end_expired_takeover(sandbox)
    holder, fenced = str(actor), epoch
    if epoch is not None and not Lease.objects.filter(sandbox=sandbox, holder__gt="").exists():
        raise StaleEpoch(
            N_("the lease is free: the takeover reached its time limit, or it was released"),
            epoch=epoch,
        )
    if epoch is None:
        lease = Lease.objects.filter(sandbox=sandbox).first()
        if lease is None or lease.holder != holder:
            return None
        fenced = lease.epoch  # renewed as it is: should it change hands meanwhile, not taken
    try:
        with acting_on(sandbox, actor, N_("keep the lease"), holder=holder, epoch=fenced) as acting:
            return acting.lease
    except (InvalidState, LeaseBusy, TakenOver, StaleEpoch):
        if epoch is not None:
            raise
        return None


def end_expired_takeover(sandbox: Sandbox) -> bool:
    """End the sandbox's takeover if its ceiling has passed (`lease.expired`); True if so."""
    if not expired_takeovers().filter(sandbox=sandbox).exists():
        return False
    with transaction.atomic():
        lease, now = locked_lease(sandbox)
        if not lease.taken_over or lease_is_live(lease, now):
            return False
        end_takeover(sandbox, lease)
    return True


def expired_takeovers() -> QuerySet[Lease]:
    """Takeovers past their ceiling that nobody has ended yet."""
    return Lease.objects.filter(taken_over=True, holder__gt="", expires_at__lte=Now())
