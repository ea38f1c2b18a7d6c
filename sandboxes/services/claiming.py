"""Claiming: which sandbox a scope key gets, with the caller's lease. The database half of an
open, in one transaction: the key's live sandbox; else a pooled one given to the key; else a
new row, made cold (or, as the pipeline's pool policy says, a wait for the pool or a
refusal). A stopped or failed sandbox starts again in a new generation; a stopping one is
refused for the moment. Then the lease is taken or shared, and what happened counted."""

import time
from dataclasses import dataclass
from typing import Literal

from django.db import IntegrityError, transaction

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidState, PoolExhausted
from boxyard.threads import waiting
from pipelines.models import Pipeline, PoolPolicy
from pipelines.scope import Scope
from sandboxes import events, lifecycle, metrics
from sandboxes.guard import take_lease
from sandboxes.models import Lease, Sandbox, State
from sandboxes.services import pool, specs
from sandboxes.services.creating import check_quota, create_row

Source = Literal["existing", "pool", "cold"]
_POOL_POLL_SECONDS = 0.05
# What an empty pool's policy says to do, when it does not say to make one cold.
_WAIT, _REFUSE = "wait", "refuse"


@dataclass
class Claim:
    sandbox: Sandbox
    lease: Lease
    source: Source  # the key's own sandbox, one from the warm pool, or a new one


def claim(pipeline: Pipeline, scope: Scope, actor: Actor, holder: str | None) -> Claim:
    """The scope key's sandbox, startable, with `holder`'s lease.

    Idempotent under concurrency: the row is unique per key among live sandboxes, so
    concurrent claims of a new key converge on one row. Raises QuotaExceeded, PoolExhausted,
    LeaseBusy, TakenOver and InvalidState (stopping).
    """
    waited_until: float | None = None
    while True:
        with transaction.atomic():
            found = _find_or_make(pipeline, scope, actor, first_try=waited_until is None)
            if isinstance(found, tuple):
                sandbox, source = found
                lease = take_lease(sandbox, holder, actor)
                break
        # The pool is empty: the miss is recorded (and the refill asked for) as it commits.
        if found == _REFUSE:
            raise PoolExhausted(
                N_(
                    "the warm pool of pipeline %(pipeline)s has no ready sandbox; try again "
                    "in a moment",
                    pipeline=pipeline.slug,
                ),
                retry_after=1,
            )
        now = time.monotonic()
        waited_until = waited_until or now + pipeline.pool_wait_seconds
        if now >= waited_until:
            raise PoolExhausted(
                N_(
                    "the warm pool of pipeline %(pipeline)s has no ready sandbox (waited "
                    "%(seconds)s s); try again in a moment",
                    pipeline=pipeline.slug,
                    seconds=pipeline.pool_wait_seconds,
                ),
                retry_after=1,
            )
        with waiting():
            time.sleep(_POOL_POLL_SECONDS)
    if source == "existing":
        metrics.count("boxyard_sandboxes_reused_total", pipeline.slug)
    elif source == "pool":
        metrics.count("boxyard_pool_hits_total", pipeline.slug)
    return Claim(sandbox=sandbox, lease=lease, source=source)


def _find_or_make(
    pipeline: Pipeline, scope: Scope, actor: Actor, *, first_try: bool
) -> tuple[Sandbox, Source] | str:
    """The key's live sandbox (startable: a stopped or failed one starts again), a pooled one
    given to the key, or a new one; else what the pipeline's pool policy says to do when the
    pool is empty: _WAIT for it, or _REFUSE."""
    key = scope.key
    existing = Sandbox.objects.live().filter(pipeline=pipeline, scope_key=key).first()
    if existing is not None:
        if existing.state == State.STOPPING:
            raise InvalidState(
                N_("the sandbox is stopping; open it again in a moment"), state=existing.state
            )
        if existing.state == State.MOVING:
            raise InvalidState(
                N_("the sandbox is moving to another Docker host; open it again in a moment"),
                state=existing.state,
            )
        if existing.state in (State.STOPPED, State.ERROR):
            check_quota(pipeline)  # a stopped or failed sandbox holds no slot until it starts
            lifecycle.move(existing, lifecycle.RESTART, actor)
        return existing, "existing"
    profile = specs.profile_digest(pipeline)  # what the pipeline's containers are made of now
    try:
        if pipeline.pool_size:
            claimed = pool.claim(pipeline, key, scope.variables, profile, actor)
            if claimed is not None:
                pool.refill_later()
                return claimed, "pool"
            if first_try:
                pool.refill_later()
                events.record(actor, "pool.missed", pipeline_id=pipeline.pk, scope_key=key)
                metrics.count("boxyard_pool_misses_total", pipeline.slug)
            if pipeline.pool_exhausted == PoolPolicy.FAIL:
                return _REFUSE
            if pipeline.pool_exhausted == PoolPolicy.WAIT:
                return _WAIT
        return create_row(pipeline, key, scope.variables, actor, profile=profile), "cold"
    except IntegrityError:  # a concurrent claim of the same key got there first
        return Sandbox.objects.live().get(pipeline=pipeline, scope_key=key), "existing"
