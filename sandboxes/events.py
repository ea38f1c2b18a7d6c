"""The history: every change to a sandbox or a pipeline is an append-only event (who, what,
when, why), written in the transaction that makes the change."""

from typing import Any

from boxyard.actors import Actor
from sandboxes import live
from sandboxes.models import Event, Sandbox


def record(
    actor: Actor | str,
    action: str,
    *,
    sandbox: Sandbox | None = None,
    pipeline_id: int | None = None,
    host_id: int | None = None,
    reason: str = "",
    **detail: Any,
) -> Event:
    """Append an event about a sandbox (and so its pipeline), a pipeline alone, or a Docker
    host (`host_id`).

    Call it inside the transaction that makes the change it records; once that commits, the
    dashboards hear that the sandbox changed.
    """
    event = Event.objects.create(
        actor=str(actor),
        action=action,
        sandbox=sandbox,
        pipeline_id=sandbox.pipeline_id if sandbox is not None else pipeline_id,
        host_id=host_id,
        reason=reason[:200],
        detail=detail,
    )
    if sandbox is not None:
        live.changed(sandbox.pk, sandbox.pipeline_id, touched_by(action))
    return event


# The parts of a sandbox's page an event touches besides the events themselves, by the kind
# of event (the word before the dot); a sandbox's own lifecycle touches every part.
_TOUCHES: dict[str, frozenset[str]] = {
    "lease": frozenset({live.STATUS}),
    "session": frozenset({live.SESSIONS}),
    "file": frozenset({live.FILES}),
    "files": frozenset({live.FILES}),
    "process": frozenset({live.PROCESSES}),
    "terminal": frozenset({live.EXECS, live.SESSIONS}),
}


def touched_by(action: str) -> frozenset[str]:
    """The parts of a sandbox's page that an event of `action` changes."""
    kind = action.partition(".")[0]
    return _TOUCHES.get(kind, live.PARTS) | {live.EVENTS}
