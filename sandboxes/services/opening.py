from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from boxyard.actors import Actor
from boxyard.errors import InvalidState, QuotaExceeded
from pipelines import scope
from pipelines.models import Pipeline
from sandboxes.models import Lease, Sandbox, State
from sandboxes.runtime import agent
from sandboxes.services import containers, events, leases, processes


@dataclass
class Opened:
    sandbox: Sandbox
    lease: Lease
    created: bool


# States that hold a quota slot: a stopped sandbox keeps its workspace but no container.
_QUOTA_STATES = [State.CREATING, State.RUNNING, State.STOPPING, State.UNKNOWN]


def open_sandbox(
    pipeline: Pipeline, variables: object, actor: Actor, holder: str | None = None
) -> Opened:
    """Get or create the one live sandbox of (pipeline, scope key) and take or share its lease.

    Idempotent under concurrency: the row is unique per key among live sandboxes, and the
    container's deterministic name makes every concurrent opener converge on one container.
    Raises InvalidInput (scope variables), QuotaExceeded, LeaseBusy, TakenOver, InvalidState
    and the runtime's errors.
    """
    scope_key = scope.resolve(pipeline.scope_template, variables)
    cleaned = scope.clean_variables(variables)
    with transaction.atomic():
        sandbox, created = _get_or_create(pipeline, scope_key, cleaned, actor)
        lease = leases.acquire(sandbox, leases.clean_holder(holder, sandbox), actor)
        if sandbox.state == State.STOPPING:
            raise InvalidState("the sandbox is stopping; open it again in a moment", state=sandbox.state)
        if sandbox.state in (State.STOPPED, State.ERROR):
            if sandbox.state == State.STOPPED:
                _check_quota(pipeline)  # a stopped sandbox holds no slot until it starts again
            _restart(sandbox, actor)
    if sandbox.state in (State.CREATING, State.UNKNOWN):
        sandbox = containers.provision(sandbox, actor)
        processes.start_after_boot(sandbox)
        if sandbox.state == State.RUNNING and sandbox.agent:
            agent.prepare(sandbox.container_id)  # the bot's first command usually follows
    return Opened(sandbox=sandbox, lease=lease, created=created)


def _get_or_create(
    pipeline: Pipeline, scope_key: str, variables: dict[str, str], actor: Actor
) -> tuple[Sandbox, bool]:
    existing = Sandbox.objects.live().filter(pipeline=pipeline, scope_key=scope_key).first()
    if existing is not None:
        return existing, False
    try:
        return create_row(pipeline, scope_key, variables, actor), True
    except IntegrityError:  # a concurrent opener of the same key created it first
        return Sandbox.objects.live().get(pipeline=pipeline, scope_key=scope_key), False


def create_row(
    pipeline: Pipeline,
    scope_key: str,
    variables: dict[str, str],
    actor: Actor,
    *,
    retention: str | None = None,
    **detail: object,
) -> Sandbox:
    """Record a new sandbox (state creating) with its free lease, within the quotas.

    Call inside a transaction. Raises QuotaExceeded, and IntegrityError when the key already
    has a live sandbox (after rolling back only its own savepoint).
    """
    # Lock the pipeline so concurrent creates of different keys count the quota in turn.
    Pipeline.objects.select_for_update(no_key=True).filter(pk=pipeline.pk).first()
    _check_quota(pipeline)
    with transaction.atomic():  # a savepoint: losing the race must not spoil the outer one
        sandbox = Sandbox.objects.create(
            pipeline=pipeline,
            scope_key=scope_key,
            variables=variables,
            retention=retention or pipeline.retention,
            image=pipeline.effective_image,
            state=State.CREATING,
        )
    sandbox.volume_name = containers.volume_name(sandbox)
    sandbox.container_name = containers.container_name(sandbox)
    sandbox.save(update_fields=["volume_name", "container_name"])
    Sandbox.objects.filter(pk=sandbox.pk).update(
        expires_at=Now() + timedelta(seconds=pipeline.ttl_seconds)
    )
    Lease.objects.create(sandbox=sandbox)
    events.record(actor, "sandbox.created", sandbox=sandbox, scope_key=scope_key, **detail)
    return sandbox


def _check_quota(pipeline: Pipeline) -> None:
    live = Sandbox.objects.filter(pipeline=pipeline, state__in=_QUOTA_STATES).count()
    if live >= pipeline.max_live_sandboxes:
        raise QuotaExceeded(
            f"pipeline {pipeline.slug} has {live} live sandboxes, its maximum "
            f"(max_live_sandboxes={pipeline.max_live_sandboxes})",
            limit=pipeline.max_live_sandboxes,
        )
    total = Sandbox.objects.filter(state__in=_QUOTA_STATES).count()
    if total >= settings.BOXYARD_MAX_LIVE_SANDBOXES:
        raise QuotaExceeded(
            f"this Boxyard runs {total} live sandboxes, the operator's maximum "
            f"(BOXYARD_MAX_LIVE_SANDBOXES={settings.BOXYARD_MAX_LIVE_SANDBOXES})",
            limit=settings.BOXYARD_MAX_LIVE_SANDBOXES,
        )


def _restart(sandbox: Sandbox, actor: Actor) -> None:
    """A stopped or failed sandbox gets a new container generation with the same workspace."""
    previous = sandbox.state
    sandbox.state = State.CREATING
    sandbox.generation += 1
    sandbox.container_id = ""
    sandbox.container_name = containers.container_name(sandbox)
    sandbox.stop_reason = ""
    sandbox.status_detail = ""
    sandbox.stopped_at = None
    sandbox.save()
    events.record(
        actor, "sandbox.restarting", sandbox=sandbox, previous_state=previous,
        generation=sandbox.generation,
    )
