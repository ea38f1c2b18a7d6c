"""Celery tasks: each takes ids, re-reads its rows and calls one service.

Every task is safe to run twice (at-least-once delivery with late acknowledgement): the
services check the state they expect with conditional updates, and containers have
deterministic names. Only an unreachable engine is worth a retry, with backoff and jitter;
anything else is recorded on the row by the service (an `error` state, an event) and left.
The periodic jobs take a lock in the database, so two schedulers or a slow run never make two
runs at once.
"""

import logging
from dataclasses import asdict
from typing import Any

from celery import shared_task
from django.conf import settings

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import RuntimeUnavailable
from hosts.engines import get_runtime
from hosts.models import DockerHost
from sandboxes.images import ensure_image
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services import close_sandbox
from sandboxes.services.background import RECONCILE, later
from sandboxes.services.jobs import run_exclusive
from sandboxes.services.moving import move_all as move_everything
from sandboxes.services.moving import move_sandbox
from sandboxes.services.opening import boot as boot_sandbox
from sandboxes.services.pool import refill_pools as refill_all_pools
from sandboxes.services.pruning import JOB as PRUNE_JOB
from sandboxes.services.pruning import prune as prune_all
from sandboxes.services.reaping import reap_due
from sandboxes.services.reconciling import reconcile as reconcile_all
from sandboxes.services.sampling import sample_fleet as take_sample

log = logging.getLogger(__name__)

_RETRY_ENGINE: dict[str, Any] = {
    "autoretry_for": (RuntimeUnavailable,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 10,
}


@shared_task(
    name="sandboxes.boot", acks_late=True, soft_time_limit=600, time_limit=660, **_RETRY_ENGINE
)
def boot(sandbox_id: str, generation: int) -> str | None:
    """Make the container of a sandbox opened in the background (state creating)."""
    sandbox = boot_sandbox(sandbox_id, generation, ready_agent=settings.BOXYARD_EMBEDDED_WORKER)
    return sandbox.state if sandbox is not None else None


@shared_task(
    name="sandboxes.destroy", acks_late=True, soft_time_limit=300, time_limit=330, **_RETRY_ENGINE
)
def destroy(
    sandbox_id: str,
    delete_workspace: bool = True,
    reason: str = StopReason.ADMIN,
    actor: str = str(SYSTEM),
) -> str | None:
    """Stop or destroy a sandbox in the background, as `actor` asked (the dashboard's bulk
    destroy: the admin who chose them)."""
    sandbox = Sandbox.objects.select_related("pipeline").filter(pk=sandbox_id).first()
    if sandbox is None or sandbox.state == State.DESTROYED:
        return None
    return close_sandbox(
        sandbox, Actor.parse(actor), delete_workspace=delete_workspace, reason=reason, force=True
    ).state


@shared_task(name="sandboxes.reap", acks_late=True, soft_time_limit=240, time_limit=270)
def reap() -> dict[str, Any] | None:
    """Stop what sat idle past its deadline or reached its time to live."""
    reaped = run_exclusive("reap", reap_due)
    return asdict(reaped) if reaped is not None else None


@shared_task(name="sandboxes.reconcile", acks_late=True, soft_time_limit=240, time_limit=270)
def reconcile(host: int | None = None) -> dict[str, Any] | None:
    """Bring rows and containers together on every Docker host that answers (at worker
    start, then periodically), or on one (`host`: it came back). With host queues, the pass
    over every host is one task per host, in each host's queue."""
    if host is None and settings.BOXYARD_HOST_QUEUES:
        hosts = list(DockerHost.objects.values_list("pk", flat=True))
        for each in hosts:
            later(RECONCILE, each, host=each)
        return {"hosts": len(hosts)}
    name = f"reconcile:{host}" if host else "reconcile"
    done = run_exclusive(name, lambda: reconcile_all(host=host))
    return asdict(done) if done is not None else None


@shared_task(name="sandboxes.refill_pools", acks_late=True, soft_time_limit=600, time_limit=660)
def refill_pools() -> dict[str, int] | None:
    """Bring every warm pool to its size (after a claim, and periodically)."""
    return run_exclusive("refill_pools", refill_all_pools)


@shared_task(name="sandboxes.sample_fleet", acks_late=True, soft_time_limit=50, time_limit=55)
def sample_fleet() -> int | None:
    """The fleet's minute sample, for the dashboard's charts."""
    return run_exclusive("sample_fleet", take_sample)


@shared_task(name="sandboxes.prune", acks_late=True, soft_time_limit=600, time_limit=660)
def prune() -> dict[str, Any] | None:
    """Retention: old commands' output, old history (every BOXYARD_PRUNE_INTERVAL_SECONDS)."""
    pruned = run_exclusive(PRUNE_JOB, prune_all)
    return asdict(pruned) if pruned is not None else None


@shared_task(name="sandboxes.build_image", acks_late=True, soft_time_limit=1800, time_limit=1860)
def build_image(reference: str, rebuild: bool = False, host: int | None = None) -> str:
    """Build (Boxyard's own recipes) or pull an image on a Docker host's engine (else this
    machine's), with its progress in the worker's log; returns what was done: present, built
    or pulled."""
    return ensure_image(reference, rebuild=rebuild, progress=log.info, runtime=get_runtime(host))


@shared_task(
    name="sandboxes.move", acks_late=True, soft_time_limit=3600, time_limit=3660, **_RETRY_ENGINE
)
def move(sandbox_id: str, target: int | None, actor: str) -> str | None:
    """Move a sandbox to another Docker host (None: where placement puts it), as `actor`
    asked; in its host's queue."""
    sandbox = Sandbox.objects.select_related("pipeline", "host").filter(pk=sandbox_id).first()
    if sandbox is None:
        return None
    to = DockerHost.objects.filter(pk=target).first() if target is not None else None
    return move_sandbox(sandbox, to, Actor.parse(actor)).target


@shared_task(name="sandboxes.move_all", acks_late=True, soft_time_limit=86400, time_limit=86460)
def move_all(host: int, actor: str) -> int:
    """Move every sandbox of a draining host elsewhere, one at a time."""
    return len(move_everything(DockerHost.objects.get(pk=host), Actor.parse(actor)))
