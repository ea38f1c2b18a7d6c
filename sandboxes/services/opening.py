"""Opening: from a pipeline and a chat's variables to a working sandbox with its lease.

The scope key decides the sandbox: the live one of the key if there is one (checked for
health first), else one claimed from the pipeline's warm pool, else one made cold (or, as
the pipeline's pool policy says, a wait for the pool or a refusal).
"""

import time
from dataclasses import dataclass
from typing import Literal

from django.db import IntegrityError, transaction

from boxyard import chaos
from boxyard.actors import SYSTEM, Actor
from boxyard.errors import BoxyardError, InvalidState, PoolExhausted, RuntimeFailure
from pipelines import scope
from pipelines.models import Pipeline, PoolExhausted as PoolPolicy
from sandboxes import metrics
from sandboxes.models import Lease, Sandbox, State
from sandboxes.runtime import get_runtime
from sandboxes.runtime.agent import channel, forget, is_open
from sandboxes.services import containers, events, leases, pool
from sandboxes.services.background import BOOT, later
from sandboxes.services.creating import check_quota, create_row, provision_and_start

Source = Literal["existing", "pool", "cold"]
_POOL_POLL_SECONDS = 0.05


@dataclass
class Opened:
    sandbox: Sandbox
    lease: Lease
    created: bool  # a sandbox new to this scope key (made cold or claimed from the pool)
    source: Source = "existing"


def open_sandbox(
    pipeline: Pipeline,
    variables: object,
    actor: Actor,
    holder: str | None = None,
    *,
    background: bool = False,
) -> Opened:
    """Get or create the one live sandbox of (pipeline, scope key) and take or share its lease.

    Idempotent under concurrency: the row is unique per key among live sandboxes, and the
    container's deterministic name makes every concurrent opener converge on one container.
    With `background`, a sandbox that needs a container is returned at once in `creating`
    and a worker boots it. Raises InvalidInput (scope variables), QuotaExceeded,
    PoolExhausted, LeaseBusy, TakenOver, InvalidState and the runtime's errors.
    """
    scope_key = scope.resolve(pipeline.scope_template, variables)
    cleaned = scope.clean_variables(variables)
    waited_until: float | None = None
    while True:
        with transaction.atomic():
            found = _find_or_make(pipeline, scope_key, cleaned, actor, first_try=waited_until is None)
            if found is not None:
                sandbox, source = found
                lease = leases.acquire(sandbox, leases.clean_holder(holder, sandbox), actor)
                _make_startable(sandbox, pipeline, actor)
                if background and sandbox.state in (State.CREATING, State.UNKNOWN):
                    later(BOOT, str(sandbox.pk), sandbox.generation)
                break
        # The pool is empty and the pipeline waits for it to refill.
        now = time.monotonic()
        waited_until = waited_until or now + pipeline.pool_wait_seconds
        if now >= waited_until:
            raise PoolExhausted(
                f"the warm pool of pipeline {pipeline.slug} has no ready sandbox (waited "
                f"{pipeline.pool_wait_seconds} s); try again in a moment",
                retry_after=1,
            )
        time.sleep(_POOL_POLL_SECONDS)

    chaos.point("create:row")
    if source == "existing":
        metrics.count("boxyard_sandboxes_reused_total", pipeline.slug)
    elif source == "pool":
        metrics.count("boxyard_pool_hits_total", pipeline.slug)
    if sandbox.state == State.RUNNING and source != "cold":
        sandbox = _healthy(sandbox, actor)
    if not background and sandbox.state in (State.CREATING, State.UNKNOWN):
        sandbox = provision_and_start(sandbox, actor)
    return Opened(sandbox=sandbox, lease=lease, created=source != "existing", source=source)


def boot(sandbox_id: object, generation: int, *, ready_agent: bool) -> Sandbox | None:
    """Make the container of a sandbox that is waiting for one (a worker's boot task);
    nothing if the row has moved on (another generation, already running, stopped)."""
    sandbox = (
        Sandbox.objects.select_related("pipeline").filter(pk=sandbox_id, generation=generation).first()
    )
    if sandbox is None or sandbox.state not in (State.CREATING, State.UNKNOWN):
        return sandbox
    return provision_and_start(sandbox, SYSTEM, ready_agent=ready_agent)


def _find_or_make(
    pipeline: Pipeline, scope_key: str, variables: dict[str, str], actor: Actor, *, first_try: bool
) -> tuple[Sandbox, Source] | None:
    """The key's live sandbox, a pooled one given to the key, or a new one; None when the
    pipeline's pool policy says to wait for the pool."""
    existing = Sandbox.objects.live().filter(pipeline=pipeline, scope_key=scope_key).first()
    if existing is not None:
        return existing, "existing"
    try:
        if pipeline.pool_size:
            claimed = pool.claim(pipeline, scope_key, variables, actor)
            if claimed is not None:
                pool.refill_later()
                return claimed, "pool"
            if first_try:
                pool.refill_later()
                events.record(actor, "pool.missed", pipeline=pipeline, scope_key=scope_key)
                metrics.count("boxyard_pool_misses_total", pipeline.slug)
            if pipeline.pool_exhausted == PoolPolicy.FAIL:
                raise PoolExhausted(
                    f"the warm pool of pipeline {pipeline.slug} has no ready sandbox; try again "
                    "in a moment", retry_after=1,
                )
            if pipeline.pool_exhausted == PoolPolicy.WAIT:
                return None
        return create_row(pipeline, scope_key, variables, actor), "cold"
    except IntegrityError:  # a concurrent opener of the same key got there first
        return Sandbox.objects.live().get(pipeline=pipeline, scope_key=scope_key), "existing"


def _make_startable(sandbox: Sandbox, pipeline: Pipeline, actor: Actor) -> None:
    """A stopping sandbox cannot be opened yet; a stopped or failed one starts again."""
    if sandbox.state == State.STOPPING:
        raise InvalidState("the sandbox is stopping; open it again in a moment", state=sandbox.state)
    if sandbox.state in (State.STOPPED, State.ERROR):
        if sandbox.state == State.STOPPED:
            check_quota(pipeline)  # a stopped sandbox holds no slot until it starts again
        _restart(sandbox, actor)


def _restart(sandbox: Sandbox, actor: Actor, reason: str = "") -> None:
    """A new container generation with the same workspace (call with the row locked)."""
    previous = sandbox.state
    sandbox.state = State.CREATING
    sandbox.generation += 1
    sandbox.container_id = ""
    sandbox.container_name = containers.container_name(sandbox)
    sandbox.stop_reason = ""
    sandbox.status_detail = ""
    sandbox.stopped_at = None
    sandbox.destroy_requested = False
    sandbox.save()
    events.record(
        actor, "sandbox.restarting", sandbox=sandbox, reason=reason, previous_state=previous,
        generation=sandbox.generation,
    )


# --- the health check before reuse --------------------------------------------------------------


def restart_sandbox(sandbox: Sandbox, actor: Actor) -> Sandbox:
    """A new container on the same workspace (an admin's restart): the lease, the history and
    the sessions' saved state stay."""
    with transaction.atomic():
        locked = Sandbox.objects.locked().get(pk=sandbox.pk)
        if locked.state in (State.DESTROYED, State.STOPPING, State.CREATING):
            raise InvalidState(f"cannot restart a sandbox that is {locked.state}", state=locked.state)
        old_container = locked.container_id
        _restart(locked, actor, reason="restarted by an admin")
    _remove_old(old_container)
    return provision_and_start(locked, actor)


def _healthy(sandbox: Sandbox, actor: Actor) -> Sandbox:
    """The sandbox if its container answers; else it gets a new container on the same
    workspace (the failure counted and recorded), which is returned."""
    if _answers(sandbox):
        return sandbox
    with transaction.atomic():
        locked = Sandbox.objects.locked().get(pk=sandbox.pk)
        if locked.state != State.RUNNING or locked.container_id != sandbox.container_id:
            return locked  # another process dealt with it meanwhile
        old_container = locked.container_id
        locked.health_failures += 1
        locked.save(update_fields=["health_failures", "updated_at"])
        events.record(actor, "sandbox.health_failed", sandbox=locked, container=locked.container_name)
        _restart(locked, actor, reason="health check failed")
    metrics.count("boxyard_health_check_failures_total", locked.pipeline.slug)
    _remove_old(old_container)
    return provision_and_start(locked, actor)


def _remove_old(container: str) -> None:
    """The container of the generation just replaced; if the engine refuses now, it is a
    stale generation the reconciler removes."""
    if not container:
        return
    forget(container)
    try:
        get_runtime().remove_container(container)
    except BoxyardError:
        pass


def _answers(sandbox: Sandbox) -> bool:
    """A cheap check: the agent answers on this process's open channel, or else the engine
    says the container runs (an agent killed by the sandbox's own code comes back with the
    next channel; that is no reason for a new container). An unreachable engine is not an
    answer either way: its RuntimeUnavailable goes to the caller."""
    if sandbox.agent and is_open(sandbox.container_id):
        try:
            channel(sandbox.container_id).call("ping", deadline=2)
            return True
        except RuntimeFailure:
            pass
    info = get_runtime().inspect_container(sandbox.container_id)
    return info is not None and info.running
