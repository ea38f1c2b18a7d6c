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
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import RuntimeUnavailable
from sandboxes.images import ensure_image
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services import close_sandbox
from sandboxes.services.jobs import run_exclusive
from sandboxes.services.opening import boot as boot_sandbox
from sandboxes.services.pool import refill_pools as refill_all_pools
from sandboxes.services.reaping import reap_due
from sandboxes.services.reconciling import reconcile as reconcile_all
from sandboxes.services.sampling import sample_fleet as take_sample
from sandboxes.services.watching import start_following, stop_following

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
def reconcile() -> dict[str, Any] | None:
    """Bring rows and containers together (at worker start, then periodically)."""
    done = run_exclusive("reconcile", reconcile_all)
    return asdict(done) if done is not None else None


@shared_task(name="sandboxes.refill_pools", acks_late=True, soft_time_limit=600, time_limit=660)
def refill_pools() -> dict[str, int] | None:
    """Bring every warm pool to its size (after a claim, and periodically)."""
    return run_exclusive("refill_pools", refill_all_pools)


@shared_task(name="sandboxes.sample_fleet", acks_late=True, soft_time_limit=50, time_limit=55)
def sample_fleet() -> int | None:
    """The fleet's minute sample, for the dashboard's charts."""
    return run_exclusive("sample_fleet", take_sample)


@shared_task(name="sandboxes.build_image", acks_late=True, soft_time_limit=1800, time_limit=1860)
def build_image(reference: str, rebuild: bool = False) -> str:
    """Build (Boxyard's own recipes) or pull an image, with its progress in the worker's log;
    returns what was done: present, built or pulled."""
    return ensure_image(reference, rebuild=rebuild, progress=log.info)


@worker_ready.connect
def _reconcile_at_start(**_: Any) -> None:
    reconcile.delay()


@worker_ready.connect
def _follow_the_engine(**_: Any) -> None:
    """A container that dies outside Boxyard is marked lost at once (the embedded worker
    starts its follower itself: it sends no worker_ready)."""
    start_following()


@worker_shutdown.connect
def _stop_following(**_: Any) -> None:
    stop_following()
