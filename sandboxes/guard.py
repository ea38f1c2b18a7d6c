"""The one guard of every change made to a sandbox: act on it as this holder.

    with acting_on(sandbox, actor, N_("exec"), holder=holder, epoch=epoch) as acting:
        ...  # acting.sandbox: the row, locked and read again; acting.lease: the caller's lease

In one transaction: the holder and epoch are checked as input, the row is locked and read
again, its state must allow the operation (running, unless said otherwise), and the lease is
checked against the database's clock: a free or expired lease is taken by the caller (the
epoch grows), the caller's own is renewed, anyone else's refuses the call. So a holder that
lost the lease never reaches the container, and the operation's own rows (an exec, an event)
are written under the same lock.

The contract, in order (`acting_on`):
1. before any lock: the holder and the epoch are cleaned (InvalidInput; nothing is locked);
2. one transaction (`transaction.atomic`) opens, and in it the sandbox's row is locked first
   (`SELECT … FOR NO KEY UPDATE`, read again), then, when the operation holds a lease, the
   lease's row (`locked_lease`, the same lock, with the database's clock). Always in this
   order, row before lease, so two guards never wait on each other crosswise;
3. under the locks: the state is checked (`require_state`), the lease is taken, renewed or
   refused (`authorize`), the activity stamped; then the caller's body runs, still inside the
   transaction and under both locks. A refusal raises before the body and changes nothing;
4. the transaction commits when the body ends (an exception rolls it all back). What the body
   recorded (`events.record`) tells the dashboards only after that commit (`live.changed`
   publishes on commit), and work queued with `background.later` is enqueued on commit too.
Engine work that takes time (starting, removing a container) belongs after the `with`, outside
the locks: the services do it there and record its end with `lifecycle.move`.

The lease's rules (the contract the bots see):
- a call without a holder acts as the sandbox's default holder, its scope key;
- a free or expired lease is taken by whoever calls; the epoch grows when the holder changes;
- a live lease of another holder refuses the call: 423 for the holder it was taken from by a
  takeover, 409 for anyone else; a stale epoch is 409 too;
- a takeover's lease holds until released, or until the operator's ceiling
  (BOXYARD_TAKEOVER_MAX_SECONDS); calls do not move it, and its end is an event
  (`lease.expired`).
"""

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models.functions import Now

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import (
    N_,
    InvalidInput,
    InvalidState,
    LeaseBusy,
    Message,
    NotFound,
    StaleEpoch,
    TakenOver,
)
from sandboxes import events
from sandboxes.models import Lease, Sandbox, State, StopReason

MAX_HOLDER_LENGTH = 200
# A lease is renewed by a call only when that moves its expiry by at least this much.
RENEW_GRANULARITY = timedelta(seconds=1)
RUNNING: Collection[State] = (State.RUNNING,)
# Every state but destroyed: the lease's own operations and closing work in all of them.
LIVE: Collection[State] = tuple(s for s in State if s != State.DESTROYED)


@dataclass(frozen=True)
class Acting:
    """What the guard established: the locked row, the cleaned holder and epoch and, when
    the operation needs one, the lease it acts under."""

    sandbox: Sandbox
    holder: str
    epoch: int | None
    lease: Lease | None


@contextmanager
def acting_on(
    sandbox: Sandbox,
    actor: Actor,
    operation: str | Message,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    states: Collection[State] = RUNNING,
    hold_lease: bool = True,
    activity: bool = False,
) -> Iterator[Acting]:
    """Guard a change of `sandbox` by `actor` (the body runs inside the transaction).

    `operation` names the change in refusals ("cannot exec: the sandbox is stopped"): an
    `N_("exec")`, so that a refusal the dashboard shows names it in the admin's language.
    `hold_lease=False` skips the lease (an admin's stop, restart or reset needs none; the
    lease's own operations apply their own rule); `activity` counts the call as activity.
    Raises InvalidInput (holder, epoch), NotFound, InvalidState, LeaseBusy, TakenOver and
    StaleEpoch; nothing has changed then.
    """
    cleaned_holder = clean_holder(holder, sandbox)
    cleaned_epoch = clean_epoch(epoch)
    with transaction.atomic():
        locked = _locked(sandbox)
        require_state(locked, operation, states)
        lease = authorize(locked, cleaned_holder, cleaned_epoch, actor) if hold_lease else None
        if activity:
            locked.record_activity()
        yield Acting(sandbox=locked, holder=cleaned_holder, epoch=cleaned_epoch, lease=lease)


def _locked(sandbox: Sandbox) -> Sandbox:
    """The row locked and read again, with the pipeline the caller loaded a moment ago.

    NO KEY UPDATE, not UPDATE: rows that merely reference the sandbox (execs, events, the
    lease) take KEY SHARE locks on it, and a plain FOR UPDATE would queue against them and
    deadlock concurrent operations on PostgreSQL. (SQLite serializes whole transactions.)
    """
    locked = Sandbox.objects.select_for_update(no_key=True).filter(pk=sandbox.pk).first()
    if locked is None:
        raise NotFound(N_("no sandbox %(id)s", id=sandbox.pk))
    if Sandbox.pipeline.is_cached(sandbox):
        locked.pipeline = sandbox.pipeline
    return locked


def require_state(sandbox: Sandbox, operation: str | Message, states: Collection[State]) -> None:
    if sandbox.state in states:
        return
    if tuple(states) == tuple(RUNNING):
        require_running(sandbox, operation)
    raise InvalidState(
        N_(
            "cannot %(operation)s: the sandbox is %(state)s",
            operation=operation,
            state=State(sandbox.state),
        ),
        state=sandbox.state,
    )


def require_running(sandbox: Sandbox, operation: str | Message) -> None:
    if sandbox.state == State.RUNNING:
        return
    if sandbox.stop_reason:
        said = N_(
            "cannot %(operation)s: the sandbox is %(state)s (%(reason)s); open it again to "
            "start it",
            operation=operation,
            state=State(sandbox.state),
            reason=_reason(sandbox.stop_reason),
        )
    else:
        said = N_(
            "cannot %(operation)s: the sandbox is %(state)s; open it again to start it",
            operation=operation,
            state=State(sandbox.state),
        )
    raise InvalidState(said, state=sandbox.state, stop_reason=sandbox.stop_reason)


def _reason(value: str) -> StopReason | str:
    """A stop reason as a choice (its label is words of the admin's language), or as it is."""
    return StopReason(value) if value in StopReason.values else value


def clean_holder(holder: str | None, sandbox: Sandbox) -> str:
    """The holder a call acts as: the one it names, or the sandbox's default (its scope key).
    The holder's rules are checked here, once, for every entry point (InvalidInput)."""
    if holder is None or holder == "":
        return sandbox.scope_key[:MAX_HOLDER_LENGTH]
    if not holder.strip():
        raise InvalidInput("holder", N_("must be a non-empty string"))
    if len(holder) > MAX_HOLDER_LENGTH or any(ord(ch) < 32 for ch in holder):
        raise InvalidInput(
            "holder", N_("must be at most %(count)s printable characters", count=MAX_HOLDER_LENGTH)
        )
    return holder


def clean_epoch(epoch: int | None) -> int | None:
    if epoch is None:
        return None
    if isinstance(epoch, bool) or epoch < 0:  # JSON's true is no epoch
        raise InvalidInput("epoch", N_("must be a non-negative integer"))
    return epoch


# --- the lease ------------------------------------------------------------------------------------


def take_lease(sandbox: Sandbox, holder: str | None, actor: Actor) -> Lease:
    """Take or share the lease for `holder` (an open): the same holder shares it, a free or
    expired one is taken. Call inside a transaction."""
    cleaned = clean_holder(holder, sandbox)
    return authorize(sandbox, cleaned, None, actor)


def authorize(sandbox: Sandbox, holder: str, epoch: int | None, actor: Actor) -> Lease:
    """Check that `holder` may act now, take a free lease for it, and renew it.

    Raises LeaseBusy, TakenOver or StaleEpoch. Call inside a transaction.
    """
    lease, now = locked_lease(sandbox)
    expires_at = now + lease_duration(sandbox)
    acquired_from: str | None = None
    if lease.taken_over and not lease_is_live(lease, now):
        end_takeover(sandbox, lease)  # its ceiling passed: free (its holder's epoch is stale)
    if lease_is_live(lease, now):
        require_holder(lease, holder, epoch)
        if lease.taken_over:
            return lease  # a takeover holds as it is: no call moves its end
    elif epoch is not None and (lease.holder != holder or epoch != lease.epoch):
        # The lease lapsed and may have changed hands since this epoch was issued.
        raise StaleEpoch(
            N_(
                "epoch %(epoch)s is stale (the lease is at epoch %(current)s); open the sandbox "
                "again to take a fresh lease",
                epoch=epoch,
                current=lease.epoch,
            ),
            epoch=lease.epoch,
        )
    elif lease.holder != holder:
        acquired_from = lease.holder
        lease.holder = holder
        lease.epoch += 1
        lease.acquired_at = now
        lease.acquired_by = str(actor)
        lease.taken_over_from = ""
        lease.taken_over = False
    if lease.expires_at is None or expires_at - lease.expires_at >= RENEW_GRANULARITY:
        lease.expires_at = expires_at
        lease.save(
            update_fields=[
                "holder", "epoch", "expires_at", "acquired_at", "acquired_by", "taken_over_from",
                "taken_over",
            ]
        )  # fmt: skip
    # else: renewed less than a second ago; a burst of calls writes the lease once.
    if acquired_from is not None:
        events.record(
            actor, "lease.acquired", sandbox=sandbox, holder=holder, epoch=lease.epoch,
            previous_holder=acquired_from,
        )  # fmt: skip
    return lease


def require_holder(lease: Lease, holder: str, epoch: int | None) -> None:
    """The refusal of a live lease: anyone but its holder is refused (LeaseBusy, TakenOver),
    and its holder too when the epoch it gives is not the lease's (StaleEpoch)."""
    if lease.holder != holder:
        raise refusal(lease, holder)
    if epoch is not None and epoch != lease.epoch:
        raise StaleEpoch(
            N_(
                "epoch %(epoch)s is stale; the lease is at epoch %(current)s",
                epoch=epoch,
                current=lease.epoch,
            ),
            epoch=lease.epoch,
        )


def locked_lease(sandbox: Sandbox) -> tuple[Lease, datetime]:
    """The sandbox's lease, locked, and the database's clock now."""
    lease = Lease.objects.select_for_update(no_key=True).annotate(db_now=Now()).get(sandbox=sandbox)
    now: datetime = lease.db_now
    return lease, now


def lease_is_live(lease: Lease, now: datetime) -> bool:
    """Held now: until its expiry, or, a takeover without a ceiling, until released."""
    if not lease.holder:
        return False
    if lease.expires_at is None:
        return lease.taken_over
    return lease.expires_at > now


def end_takeover(sandbox: Sandbox, lease: Lease) -> None:
    """A takeover's lease that reached its ceiling is free again, and that is an event. Call
    inside a transaction, with the lease locked (`locked_lease`)."""
    holder, ceiling = lease.holder, lease.expires_at
    lease.holder = ""
    lease.acquired_by = ""
    lease.expires_at = None
    lease.taken_over = False
    lease.taken_over_from = ""
    lease.save()
    events.record(
        SYSTEM, "lease.expired", sandbox=sandbox, reason="the takeover reached its ceiling",
        previous_holder=holder, epoch=lease.epoch,
        expired_at=f"{ceiling:%Y-%m-%dT%H:%M:%SZ}" if ceiling else None,
    )  # fmt: skip


def lease_duration(sandbox: Sandbox) -> timedelta:
    return timedelta(seconds=sandbox.pipeline.lease_timeout_seconds)


def refusal(lease: Lease, holder: str) -> LeaseBusy | TakenOver:
    """Why `holder` may not act while `lease` is live: taken over from it, or busy."""
    if holder == lease.taken_over_from:
        return TakenOver(
            N_(
                "the sandbox was taken over by %(holder)s; wait until it is released",
                holder=lease.holder,
            ),
            holder=lease.holder,
            expires_at=lease.expires_at,
        )
    if lease.expires_at is None:
        return LeaseBusy(
            N_("the sandbox is taken over by %(holder)s until released", holder=lease.holder),
            holder=lease.holder,
            expires_at=None,
        )
    return LeaseBusy(
        N_(
            "the sandbox is leased to %(holder)s until %(until)s",
            holder=lease.holder,
            until=f"{lease.expires_at:%Y-%m-%dT%H:%M:%SZ}",
        ),
        holder=lease.holder,
        expires_at=lease.expires_at,
    )
