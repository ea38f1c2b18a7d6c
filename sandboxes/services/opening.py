"""Opening: from a pipeline and a chat's variables to a working sandbox with its lease, in
three steps: the scope key (`pipelines.scope`), the key's sandbox with the caller's lease
(`claiming`), the sandbox made ready (`booting`: a health check, or its container). Also the
worker's boot of a sandbox opened in the background, and an admin's restart."""

import uuid
from dataclasses import dataclass
from uuid import UUID

from boxyard import chaos
from boxyard.actors import SYSTEM, Actor
from boxyard.errors import N_, NotFound
from pipelines import scope
from pipelines.models import Pipeline
from sandboxes import lifecycle
from sandboxes.guard import acting_on
from sandboxes.models import Lease, Sandbox, State
from sandboxes.services import booting, claiming, containers


@dataclass
class Opened:
    sandbox: Sandbox
    lease: Lease
    created: bool  # a sandbox new to this scope key (made cold or claimed from the pool)
    source: claiming.Source = "existing"


def open_sandbox(
    pipeline: Pipeline,
    variables: scope.Variables | None,
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
    return open_scope(
        pipeline,
        scope.scope_of(pipeline.scope_template, variables),
        actor,
        holder,
        background=background,
    )


def open_own_sandbox(
    pipeline: Pipeline,
    variables: scope.Variables | None,
    actor: Actor,
    holder: str | None = None,
    *,
    background: bool = False,
) -> Opened:
    """A new sandbox of its own, whatever the pipeline's scope: its scope key is generated
    (`own-<hex>`), so no chat shares it; it is found again by its id. The variables given
    are kept on it as they are (none of them decides its key)."""
    own = scope.Scope(key=f"own-{uuid.uuid4().hex}", variables=scope.clean_variables(variables))
    return open_scope(pipeline, own, actor, holder, background=background)


def resume_sandbox(sandbox: Sandbox, actor: Actor, holder: str | None = None) -> Opened:
    """Open this sandbox again by its scope key, as an open of its chat would: a stopped one
    starts again on its workspace (a new container), a running one is checked; the lease is
    taken or shared. Raises what `open_sandbox` raises."""
    if sandbox.state == State.DESTROYED:  # its key may be another sandbox's by now
        raise NotFound(N_("no sandbox %(id)s", id=sandbox.pk))
    kept = scope.Scope(key=sandbox.scope_key, variables=dict(sandbox.variables or {}))
    return open_scope(sandbox.pipeline, kept, actor, holder)


def open_scope(
    pipeline: Pipeline,
    scoped: scope.Scope,
    actor: Actor,
    holder: str | None = None,
    *,
    background: bool = False,
) -> Opened:
    """`open_sandbox` for a scope key the caller names itself rather than the pipeline's
    template: a door whose clients name their sandboxes (the Bay API's cargos) or want one
    of their own. The same claim, lease, quotas and readiness."""
    claimed = claiming.claim(pipeline, scoped, actor, holder)
    chaos.point("create:row")
    sandbox = booting.ready(
        claimed.sandbox, actor, check_health=claimed.source != "cold", background=background
    )
    return Opened(
        sandbox=sandbox,
        lease=claimed.lease,
        created=claimed.source != "existing",
        source=claimed.source,
    )


def boot(sandbox_id: UUID | str, generation: int, *, ready_agent: bool) -> Sandbox | None:
    """Make the container of a sandbox that is waiting for one (a worker's boot task);
    nothing if the row has moved on (another generation, already running, stopped)."""
    sandbox = (
        Sandbox.objects.select_related("pipeline")
        .filter(pk=sandbox_id, generation=generation)
        .first()
    )
    if sandbox is None or sandbox.state not in (State.CREATING, State.UNKNOWN):
        return sandbox
    return booting.start(sandbox, SYSTEM, ready_agent=ready_agent)


def restart_sandbox(sandbox: Sandbox, actor: Actor) -> Sandbox:
    """A new container on the same workspace (an admin's restart): the lease, the history and
    the sessions' saved state stay."""
    with acting_on(
        sandbox, actor, N_("restart"), states=lifecycle.RESTART.sources, hold_lease=False
    ) as acting:
        locked = acting.sandbox
        old_container = locked.container_id
        lifecycle.move(locked, lifecycle.RESTART, actor, reason="restarted by an admin")
    containers.remove_replaced(old_container, locked.host_id)
    return booting.start(locked, actor)
