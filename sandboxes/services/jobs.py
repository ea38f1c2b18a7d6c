"""Periodic jobs that must not overlap: a lock row per job, taken with a conditional update
(on the database's clock), kept fresh by its holder while it works, and lapsing on its own
soon after a holder dies (a killed worker never blocks the job for long)."""

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Q
from django.db.models.functions import Now

from sandboxes.models import PeriodicJob

log = logging.getLogger(__name__)
T = TypeVar("T")


LOCK_SECONDS = 20.0


def run_exclusive(name: str, work: Callable[[], T], lock_seconds: float = LOCK_SECONDS) -> T | None:
    """Run `work` unless another run of job `name` holds its lock (then None). While `work`
    runs the lock is renewed every third of `lock_seconds`; should this process die, it
    lapses `lock_seconds` later."""
    PeriodicJob.objects.get_or_create(name=name)
    token = uuid.uuid4().hex
    taken = (
        PeriodicJob.objects.filter(name=name)
        .filter(Q(running_until__isnull=True) | Q(running_until__lt=Now()))
        .update(
            holder=token,
            running_until=Now() + timedelta(seconds=lock_seconds),
            last_started_at=Now(),
        )
    )
    if not taken:
        log.debug("job %s is running elsewhere; skipped", name)
        return None
    result: object = None
    error = ""
    done = threading.Event()
    keeper = threading.Thread(
        target=_keep_lock, args=(name, token, lock_seconds, done), name=f"job-{name}", daemon=True
    )
    keeper.start()
    try:
        result = work()
        return result
    except Exception as failure:
        error = f"{type(failure).__name__}: {failure}"[:2000]
        raise
    finally:
        done.set()
        keeper.join()
        PeriodicJob.objects.filter(name=name, holder=token).update(
            holder="",
            running_until=None,
            last_finished_at=Now(),
            last_result=_jsonable(result),
            last_error=error,
        )


def _keep_lock(name: str, token: str, lock_seconds: float, done: threading.Event) -> None:
    try:
        while not done.wait(lock_seconds / 3):
            PeriodicJob.objects.filter(name=name, holder=token).update(
                running_until=Now() + timedelta(seconds=lock_seconds)
            )
    finally:
        connection.close()  # this thread's own


def _jsonable(result: object) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    if is_dataclass(result) and not isinstance(result, type):
        return asdict(result)
    return {} if result is None else {"result": str(result)}
