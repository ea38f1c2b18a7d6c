from typing import Any

from boxyard.actors import Actor
from pipelines.models import Pipeline
from sandboxes import live
from sandboxes.models import Event, Sandbox


def record(
    actor: Actor | str,
    action: str,
    *,
    sandbox: Sandbox | None = None,
    pipeline: Pipeline | None = None,
    reason: str = "",
    **detail: Any,
) -> Event:
    """Append an event. Call it inside the transaction that makes the change it records;
    once that commits, the dashboards hear that the sandbox changed."""
    if sandbox is not None:
        live.changed(sandbox.pk, sandbox.pipeline_id)
    return Event.objects.create(
        actor=str(actor),
        action=action,
        sandbox=sandbox,
        pipeline=pipeline or (sandbox.pipeline if sandbox is not None else None),
        reason=reason,
        detail=detail,
    )
