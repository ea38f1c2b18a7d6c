"""A sandbox's lifetime (its time to live) set by its holder, within the pipeline's ceiling.

A run of a sandbox may last the pipeline's `ttl_seconds` from its start (`lifecycle` sets
`expires_at` there when it starts); a caller may ask for less, or move its end again later,
never past that ceiling. The reaper stops it when `expires_at` passes.
"""

from datetime import datetime, timedelta

from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput
from pipelines.models import Pipeline
from sandboxes import events
from sandboxes.guard import acting_on
from sandboxes.models import Sandbox


def lifetime_ceiling(sandbox: Sandbox) -> datetime:
    """The latest end this run of the sandbox may have."""
    started = sandbox.started_at or timezone.now()
    return started + timedelta(seconds=sandbox.pipeline.ttl_seconds)


def check_lifetime(pipeline: Pipeline, seconds: int, *, field: str = "seconds") -> None:
    """Refuse (InvalidInput) a lifetime no run of the pipeline's sandboxes may have: before a
    sandbox is opened for it, so that nothing changes."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
        raise InvalidInput(field, N_("must be a positive whole number of seconds"))
    if seconds > pipeline.ttl_seconds:
        raise InvalidInput(
            field,
            N_(
                "%(seconds)s s is past the pipeline's ceiling, ttl_seconds=%(ceiling)s",
                seconds=seconds,
                ceiling=pipeline.ttl_seconds,
            ),
        )


def set_lifetime(
    sandbox: Sandbox,
    actor: Actor,
    seconds: int,
    *,
    field: str = "seconds",
    holder: str | None = None,
    epoch: int | None = None,
) -> Sandbox:
    """End this run of the sandbox `seconds` from now (it is stopped then, as at its TTL).

    `field` names the caller's own field in a refusal. Raises InvalidInput (not a positive
    whole number, or past the pipeline's ceiling) and the guard's refusals.
    """
    check_lifetime(sandbox.pipeline, seconds, field=field)
    with acting_on(sandbox, actor, N_("set the lifetime"), holder=holder, epoch=epoch) as acting:
        locked = acting.sandbox
        ends = timezone.now() + timedelta(seconds=seconds)
        ceiling = lifetime_ceiling(locked)
        if ends > ceiling + timedelta(seconds=1):  # a second's grace for the clocks' rounding
            raise InvalidInput(
                field,
                N_(
                    "%(seconds)s s would end the sandbox past its pipeline's ceiling "
                    "(ttl_seconds=%(ceiling)s from its start); at most %(left)s s from now",
                    seconds=seconds,
                    ceiling=locked.pipeline.ttl_seconds,
                    left=max(0, int((ceiling - timezone.now()).total_seconds())),
                ),
            )
        Sandbox.objects.filter(pk=locked.pk).update(expires_at=ends)
        locked.expires_at = ends
        events.record(actor, "sandbox.lifetime_set", sandbox=locked, expires_at=ends.isoformat())
    return locked
