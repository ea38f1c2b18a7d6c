"""The warm pool: sandboxes started ahead for a pipeline, so that the open of a new scope key
claims a running one instead of waiting for a container to be made.

A pooled sandbox is an ordinary row (state running, `pooled`, a placeholder scope key
`pool:<id>`) with the profile digest of the pipeline it was made for; a claim gives it the
scope key in the open's own transaction, and a pipeline change retires pooled sandboxes of
the old profile. Refills run in a worker, after every claim and periodically; they stop at
the quotas like any other create.
"""

import logging
import uuid

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import BoxyardError, NoRoom, QuotaExceeded
from hosts.models import HostState
from pipelines.models import Pipeline
from sandboxes import events
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services import specs
from sandboxes.services.background import BOOT, REFILL_POOLS, later
from sandboxes.services.booting import start
from sandboxes.services.closing import begin_stop, finish_stop
from sandboxes.services.creating import create_row

log = logging.getLogger(__name__)

POOL_KEY_PREFIX = "pool:"


def claim(
    pipeline: Pipeline, scope_key: str, variables: dict[str, str], profile: str, actor: Actor
) -> Sandbox | None:
    """Give the oldest ready pooled sandbox of the pipeline's `profile` (its digest now) to
    `scope_key`; None if there is none. Call inside the open's transaction.

    Raises IntegrityError (from a savepoint of its own) when a concurrent open gave the key
    a sandbox first.
    """
    candidate = (
        Sandbox.objects.select_for_update(skip_locked=True, no_key=True, of=("self",))
        .filter(
            pipeline=pipeline,
            pooled=True,
            state=State.RUNNING,
            profile=profile,
            # On a host that takes new sandboxes: not one that is down or being drained.
            host__state=HostState.ACTIVE,
            host__down_since__isnull=True,
        )
        .order_by("created_at")
        .first()
    )
    if candidate is None:
        return None
    candidate.pipeline = pipeline
    candidate.pooled = False
    candidate.scope_key = scope_key
    candidate.variables = variables
    with transaction.atomic():
        candidate.save(update_fields=["pooled", "scope_key", "variables", "updated_at"])
    candidate.record_activity(force=True)  # its idle clock starts now, not when it was pooled
    events.record(actor, "sandbox.claimed", sandbox=candidate, scope_key=scope_key)
    return candidate


def refill_later() -> None:
    """Have a worker top the pools up once the current transaction commits."""
    later(REFILL_POOLS)


def refill_pools() -> dict[str, int]:
    """Bring every pipeline's pool to its size: retire pooled sandboxes of an old profile or
    beyond the size, start new ones. Returns the sandboxes started per pipeline."""
    started: dict[str, int] = {}
    pipelines = Pipeline.objects.filter(
        Q(pool_size__gt=0) | Q(pk__in=Sandbox.objects.filter(pooled=True).values("pipeline"))
    )
    for pipeline in pipelines:
        try:
            started[pipeline.slug] = refill(pipeline)
        except BoxyardError as error:
            log.warning("refilling the pool of %s failed: %s", pipeline.slug, error)
    return started


def refill(pipeline: Pipeline) -> int:
    """One pipeline's pool: returns how many sandboxes it started."""
    profile = specs.profile_digest(pipeline)
    pooled = Sandbox.objects.filter(pipeline=pipeline, pooled=True)
    for stale in pooled.filter(state__in=[State.CREATING, State.RUNNING]).exclude(profile=profile):
        retire(stale, StopReason.ADMIN)  # the pipeline was changed since it was made
    ready = list(
        pooled.filter(state__in=[State.CREATING, State.RUNNING], profile=profile).order_by(
            "created_at"
        )
    )
    for surplus in ready[pipeline.pool_size :]:
        retire(surplus, StopReason.ADMIN)  # the pool was made smaller
    missing = pipeline.pool_size - len(ready)
    started = 0
    for _ in range(max(missing, 0)):
        try:
            sandbox = _pool_row(pipeline, profile)
        except (QuotaExceeded, NoRoom) as error:
            log.info("the pool of %s stops at a quota or its hosts' room: %s", pipeline.slug, error)
            break
        if settings.BOXYARD_HOST_QUEUES:  # booted by a worker of its host
            later(BOOT, str(sandbox.pk), sandbox.generation, host=sandbox.host_id)
            started += 1
            continue
        sandbox = start(sandbox, SYSTEM, ready_agent=settings.BOXYARD_EMBEDDED_WORKER)
        started += sandbox.state == State.RUNNING
    return started


def _pool_row(pipeline: Pipeline, profile: str) -> Sandbox:
    with transaction.atomic():
        return create_row(
            pipeline,
            f"{POOL_KEY_PREFIX}{uuid.uuid4().hex}",
            {},
            SYSTEM,
            pooled=True,
            profile=profile,
        )


def retire(sandbox: Sandbox, reason: str) -> None:
    """Destroy a pooled sandbox nobody claimed (it has no workspace worth keeping)."""
    with transaction.atomic():
        locked = Sandbox.objects.locked().filter(pk=sandbox.pk, pooled=True).first()
        if locked is None or locked.state not in (State.CREATING, State.RUNNING):
            return
        begin_stop(locked, SYSTEM, reason, delete_workspace=True)
    finish_stop(locked, SYSTEM)


def pooled_for(pipeline: Pipeline) -> int:
    """How many ready sandboxes the pipeline's pool holds now."""
    return Sandbox.objects.filter(pipeline=pipeline, pooled=True, state=State.RUNNING).count()
