"""Leases: who controls a sandbox, with a fencing epoch.

Every function here must run inside the transaction that also records the operation it
guards (an exec row, a file write event): the lease row is locked, checked against the
database clock and renewed in that one transaction, so a holder that lost the lease can
never act.

Rules (PRODUCT.md, "The bot API"):
- a call without a holder acts as the sandbox's default holder, its scope key;
- a free or expired lease is taken by whoever calls; the epoch grows when the holder changes;
- a live lease of another holder refuses the call: 423 for the holder it was taken from by a
  takeover, 409 for anyone else; a stale epoch is 409 too.
"""

from datetime import datetime, timedelta

from django.db.models.functions import Now

from boxyard.actors import Actor
from boxyard.errors import InvalidInput, LeaseBusy, StaleEpoch, TakenOver
from sandboxes.models import Lease, Sandbox
from sandboxes.services import events

MAX_HOLDER_LENGTH = 200
# A lease is renewed by a call only when that moves its expiry by at least this much.
RENEW_GRANULARITY = timedelta(seconds=1)


def clean_holder(holder: object, sandbox: Sandbox) -> str:
    if holder is None or holder == "":
        return sandbox.scope_key[:MAX_HOLDER_LENGTH]
    if not isinstance(holder, str) or not holder.strip():
        raise InvalidInput("holder", "must be a non-empty string")
    if len(holder) > MAX_HOLDER_LENGTH or any(ord(ch) < 32 for ch in holder):
        raise InvalidInput(
            "holder", f"must be at most {MAX_HOLDER_LENGTH} printable characters"
        )
    return holder


def clean_epoch(epoch: object) -> int | None:
    if epoch is None:
        return None
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidInput("epoch", "must be a non-negative integer")
    return epoch


def _locked(sandbox: Sandbox) -> tuple[Lease, datetime]:
    lease = Lease.objects.select_for_update(no_key=True).annotate(db_now=Now()).get(sandbox=sandbox)
    return lease, lease.db_now  # type: ignore[attr-defined]


def _is_live(lease: Lease, now: datetime) -> bool:
    return bool(lease.holder) and lease.expires_at is not None and lease.expires_at > now


def _ttl(sandbox: Sandbox) -> timedelta:
    return timedelta(seconds=sandbox.pipeline.lease_timeout_seconds)


def _refuse(lease: Lease, holder: str) -> None:
    if holder == lease.taken_over_from:
        raise TakenOver(
            f"the sandbox was taken over by {lease.holder}; wait until it is released",
            holder=lease.holder,
            expires_at=lease.expires_at,
        )
    raise LeaseBusy(
        f"the sandbox is leased to {lease.holder} until {lease.expires_at:%Y-%m-%dT%H:%M:%SZ}",
        holder=lease.holder,
        expires_at=lease.expires_at,
    )


def authorize(sandbox: Sandbox, holder: str, epoch: int | None, actor: Actor) -> Lease:
    """Check that `holder` may act now, take a free lease for it, and renew it.

    Raises LeaseBusy, TakenOver or StaleEpoch. Call inside a transaction.
    """
    lease, now = _locked(sandbox)
    if _is_live(lease, now):
        if lease.holder != holder:
            _refuse(lease, holder)
        if epoch is not None and epoch != lease.epoch:
            raise StaleEpoch(
                f"epoch {epoch} is stale; the lease is at epoch {lease.epoch}",
                epoch=lease.epoch,
            )
    elif epoch is not None and (lease.holder != holder or epoch != lease.epoch):
        # The lease lapsed and may have changed hands since this epoch was issued.
        raise StaleEpoch(
            f"epoch {epoch} is stale (the lease is at epoch {lease.epoch}); open the sandbox "
            "again to take a fresh lease",
            epoch=lease.epoch,
        )
    elif lease.holder != holder:
        _acquire(lease, holder, now, actor, sandbox)
    expires_at = now + _ttl(sandbox)
    if lease.expires_at is None or expires_at - lease.expires_at >= RENEW_GRANULARITY:
        lease.expires_at = expires_at
        lease.save(update_fields=["holder", "epoch", "expires_at", "acquired_at", "taken_over_from"])
    # else: renewed less than a second ago; a burst of calls writes the lease once.
    return lease


def _acquire(lease: Lease, holder: str, now: datetime, actor: Actor, sandbox: Sandbox) -> None:
    previous = lease.holder
    lease.holder = holder
    lease.epoch += 1
    lease.acquired_at = now
    lease.taken_over_from = ""
    events.record(
        actor, "lease.acquired", sandbox=sandbox, holder=holder, epoch=lease.epoch,
        previous_holder=previous,
    )


def acquire(sandbox: Sandbox, holder: str, actor: Actor) -> Lease:
    """Take or share the lease (open): same holder shares, a free lease is taken."""
    return authorize(sandbox, holder, None, actor)


def takeover(sandbox: Sandbox, holder: str, actor: Actor, reason: str = "") -> Lease:
    """Make `holder` the holder whatever the lease's state; the old holder gets 423 after."""
    lease, now = _locked(sandbox)
    previous = lease.holder if _is_live(lease, now) else ""
    lease.taken_over_from = previous if previous != holder else lease.taken_over_from
    lease.holder = holder
    lease.epoch += 1
    lease.acquired_at = now
    lease.expires_at = now + _ttl(sandbox)
    lease.save()
    events.record(
        actor, "lease.taken_over", sandbox=sandbox, reason=reason, holder=holder,
        epoch=lease.epoch, previous_holder=previous,
    )
    return lease


def release(
    sandbox: Sandbox, holder: str, epoch: int | None, actor: Actor, *, force: bool = False
) -> Lease:
    """Free the lease. Only its holder may, unless `force` (an admin or the system)."""
    lease, now = _locked(sandbox)
    if not force and _is_live(lease, now):
        if lease.holder != holder:
            _refuse(lease, holder)
        if epoch is not None and epoch != lease.epoch:
            raise StaleEpoch(
                f"epoch {epoch} is stale; the lease is at epoch {lease.epoch}", epoch=lease.epoch
            )
    previous = lease.holder
    lease.holder = ""
    lease.expires_at = None
    lease.taken_over_from = ""
    lease.save()
    if previous:
        events.record(actor, "lease.released", sandbox=sandbox, previous_holder=previous)
    return lease
