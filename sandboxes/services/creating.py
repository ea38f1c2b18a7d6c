"""New sandboxes' rows, within the quotas: the pipeline's and the operator's."""

from django.conf import settings

from boxyard.actors import Actor
from boxyard.errors import N_, QuotaExceeded
from pipelines.models import Pipeline
from sandboxes import lifecycle
from sandboxes.models import QUOTA_STATES, Sandbox
from sandboxes.services import placing, specs


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

    Call inside a transaction. Raises QuotaExceeded, NoRoom (no Docker host can take it), and
    IntegrityError when the key already has a live sandbox (after rolling back only its own
    savepoint).
    """
    check_quota(pipeline)
    if pooled:
        detail["pooled"] = True
    host = placing.place(pipeline)  # locks the hosts until the row is made
    detail["host"] = host.name
    return lifecycle.create(
        pipeline,
        host,
        scope_key,
        variables,
        actor,
        retention=retention or pipeline.retention,
        profile=profile or specs.profile_digest(pipeline),
        pooled=pooled,
        detail=detail,
    )


def check_quota(pipeline: Pipeline) -> None:
    """Refuse (QuotaExceeded) a sandbox that would pass the pipeline's or the operator's
    maximum of live sandboxes. Call inside the transaction that makes or restarts it: the
    pipeline's row is locked first (`lock_pipeline`), so that concurrent claims of the
    pipeline (new keys, stopped sandboxes starting again) count in turn, each seeing the
    others' rows."""
    lock_pipeline(pipeline)
    live = Sandbox.objects.filter(pipeline=pipeline, state__in=QUOTA_STATES).count()
    if live >= pipeline.max_live_sandboxes:
        raise QuotaExceeded(
            N_(
                "pipeline %(pipeline)s has %(count)s live sandboxes, its maximum "
                "(max_live_sandboxes=%(limit)s)",
                pipeline=pipeline.slug,
                count=live,
                limit=pipeline.max_live_sandboxes,
            ),
            limit=pipeline.max_live_sandboxes,
        )
    total = Sandbox.objects.filter(state__in=QUOTA_STATES).count()
    if total >= settings.BOXYARD_MAX_LIVE_SANDBOXES:
        raise QuotaExceeded(
            N_(
                "this Boxyard runs %(count)s live sandboxes, the operator's maximum "
                "(BOXYARD_MAX_LIVE_SANDBOXES=%(limit)s)",
                count=total,
                limit=settings.BOXYARD_MAX_LIVE_SANDBOXES,
            ),
            limit=settings.BOXYARD_MAX_LIVE_SANDBOXES,
        )


def lock_pipeline(pipeline: Pipeline) -> None:
    """Lock the pipeline's row until the caller's transaction ends (a no-op on SQLite, which
    runs one writing transaction at a time)."""
    Pipeline.objects.select_for_update(no_key=True).filter(pk=pipeline.pk).first()
