"""Reaping: sandboxes stopped because they sat idle too long or reached their time to live.

The deadlines are columns (`idle_deadline`, moved by every activity; `expires_at`, set when
a run starts), so a periodic scan finds what is due whichever process made it so, and a
restart forgets nothing. A reaped temporary sandbox is destroyed with its workspace; a
persistent one is stopped with its workspace kept, and the next open starts it again.

Not idle, whatever its deadline says: a sandbox whose lease is held and live (a person or a
bot is working with it), one with a command running (foreground or background), and one
whose pipeline keeps managed processes running in it (an MCP server is what it is there
for). The time to live applies to all of them.
"""

import logging
from dataclasses import dataclass, field
from uuid import UUID

from django.db import transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from boxyard.actors import SYSTEM
from boxyard.errors import BoxyardError
from pipelines.models import Retention
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services.closing import begin_stop, finish_stop
from sandboxes.services.leases import end_expired_takeover, expired_takeovers

log = logging.getLogger(__name__)

# States a time to live ends: every state that holds a container or a claim on one.
_TTL_STATES = [State.RUNNING, State.UNKNOWN, State.ERROR]


@dataclass
class Reaped:
    """What one pass did: sandbox ids by reason, and what could not be reaped (retried next)."""

    idle: list[str] = field(default_factory=list)
    ttl: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def due_for_ttl() -> QuerySet[Sandbox]:
    return Sandbox.objects.filter(state__in=_TTL_STATES, expires_at__lte=Now())


def due_for_idle() -> QuerySet[Sandbox]:
    """Running sandboxes past their idle deadline that nothing keeps busy."""
    leased = Q(lease__holder__gt="") & (
        Q(lease__expires_at__gt=Now()) | Q(lease__taken_over=True, lease__expires_at=None)
    )
    return (
        Sandbox.objects.filter(state=State.RUNNING, pooled=False, idle_deadline__lte=Now())
        .exclude(leased)
        .exclude(pk__in=Sandbox.objects.busy().values("pk"))
        .filter(pipeline__processes=[])
    )


def reap_due(limit: int = 200) -> Reaped:
    """End the takeovers past their ceiling (events), then reap what is due now: time to
    live first (it wins over idleness), then idleness."""
    for lease in expired_takeovers().select_related("sandbox")[:limit]:
        end_expired_takeover(lease.sandbox)
    reaped = Reaped()
    for reason, candidates, done in (
        (StopReason.TTL, due_for_ttl(), reaped.ttl),
        (StopReason.IDLE, due_for_idle(), reaped.idle),
    ):
        for sandbox_id in list(candidates.values_list("pk", flat=True)[:limit]):
            try:
                if reap(sandbox_id, reason):
                    done.append(str(sandbox_id))
            except BoxyardError as error:
                log.warning("reaping %s (%s) failed: %s", sandbox_id, reason, error)
                reaped.failed.append(str(sandbox_id))
    return reaped


def reap(sandbox_id: UUID | str, reason: str) -> bool:
    """Stop one sandbox for `reason` if it is still due once its row is locked (a command or
    a lease may have arrived since the scan); True if it was reaped."""
    due = due_for_ttl() if reason == StopReason.TTL else due_for_idle()
    with transaction.atomic():
        sandbox = Sandbox.objects.locked().filter(pk=sandbox_id).first()
        if sandbox is None or not due.filter(pk=sandbox_id).exists():
            return False
        destroy = sandbox.retention == Retention.TEMPORARY
        begin_stop(sandbox, SYSTEM, reason, delete_workspace=destroy)
    finish_stop(sandbox, SYSTEM)  # a failure leaves it stopping: the reconciler finishes it
    return True
