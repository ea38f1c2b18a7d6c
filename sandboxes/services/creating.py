"""Making sandboxes: the row with its lease (within the quotas), then its container."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from boxyard.actors import Actor
from boxyard.errors import QuotaExceeded
from pipelines.models import Pipeline
from sandboxes import metrics
from sandboxes.models import Lease, Sandbox, State
from sandboxes.runtime import agent
from sandboxes.services import containers, events, processes

# States that hold a quota slot: a stopped sandbox keeps its workspace but no container.
QUOTA_STATES = [State.CREATING, State.RUNNING, State.STOPPING, State.UNKNOWN]


def create_row(
    pipeline: Pipeline,
    scope_key: str,
    variables: dict[str, str],
    actor: Actor,
    *,
    retention: str | None = None,
    pooled: bool = False,
    profile: str = "",
    **detail: object,
) -> Sandbox:
    """Record a new sandbox (state creating) with its free lease, within the quotas.

    Call inside a transaction. Raises QuotaExceeded, and IntegrityError when the key already
    has a live sandbox (after rolling back only its own savepoint).
    """
    # Lock the pipeline so concurrent creates of different keys count the quota in turn.
    Pipeline.objects.select_for_update(no_key=True).filter(pk=pipeline.pk).first()
    check_quota(pipeline)
    with transaction.atomic():  # a savepoint: losing the race must not spoil the outer one
        sandbox = Sandbox.objects.create(
            pipeline=pipeline,
            scope_key=scope_key,
            variables=variables,
            retention=retention or pipeline.retention,
            image=pipeline.effective_image,
            state=State.CREATING,
            pooled=pooled,
            profile=profile or containers.profile_digest(pipeline),
        )
    sandbox.volume_name = containers.volume_name(sandbox)
    sandbox.container_name = containers.container_name(sandbox)
    sandbox.save(update_fields=["volume_name", "container_name"])
    Sandbox.objects.filter(pk=sandbox.pk).update(
        expires_at=Now() + timedelta(seconds=pipeline.ttl_seconds)
    )
    Lease.objects.create(sandbox=sandbox)
    if pooled:
        detail["pooled"] = True
    events.record(actor, "sandbox.created", sandbox=sandbox, scope_key=scope_key, **detail)
    metrics.count("boxyard_sandboxes_created_total", pipeline.slug)
    return sandbox


def check_quota(pipeline: Pipeline) -> None:
    live = Sandbox.objects.filter(pipeline=pipeline, state__in=QUOTA_STATES).count()
    if live >= pipeline.max_live_sandboxes:
        raise QuotaExceeded(
            f"pipeline {pipeline.slug} has {live} live sandboxes, its maximum "
            f"(max_live_sandboxes={pipeline.max_live_sandboxes})",
            limit=pipeline.max_live_sandboxes,
        )
    total = Sandbox.objects.filter(state__in=QUOTA_STATES).count()
    if total >= settings.BOXYARD_MAX_LIVE_SANDBOXES:
        raise QuotaExceeded(
            f"this Boxyard runs {total} live sandboxes, the operator's maximum "
            f"(BOXYARD_MAX_LIVE_SANDBOXES={settings.BOXYARD_MAX_LIVE_SANDBOXES})",
            limit=settings.BOXYARD_MAX_LIVE_SANDBOXES,
        )


def provision_and_start(sandbox: Sandbox, actor: Actor, *, ready_agent: bool = True) -> Sandbox:
    """The container, the pipeline's managed processes in it, and (with `ready_agent`) this
    process's channel to its agent opened in the background for the first command."""
    sandbox = containers.provision(sandbox, actor)
    processes.start_after_boot(sandbox)
    if ready_agent and sandbox.state == State.RUNNING and sandbox.agent:
        agent.prepare(sandbox.container_id)
    return sandbox
