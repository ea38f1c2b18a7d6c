"""Retention: what the database keeps of commands' output and of the history, so that it stops
growing however much the bots run. One pass (`prune`, run by the periodic job every
BOXYARD_PRUNE_INTERVAL_SECONDS and by `manage.py prune`):

- clears the output stored with commands that started more than BOXYARD_OUTPUT_RETENTION_DAYS
  ago, then, while what stays is more than BOXYARD_OUTPUT_KEEP_MB, the oldest output first;
  the command's row stays (who ran what, when, how it ended, how many bytes it wrote) with a
  note that its output was pruned;
- deletes what is older than BOXYARD_HISTORY_RETENTION_DAYS: events, the rows of finished
  commands, the rows of sandboxes destroyed before then (with their sessions and lease), the
  dashboard's login records and expired login sessions.

Running commands and live sandboxes are never touched. Work goes in batches, each its own
short transaction, so that the API's writes never wait long behind a pass.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.models import AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.sessions.models import Session
from django.db import models, transaction
from django.db.models import Case, F, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Concat
from django.utils import timezone

from sandboxes.models import Event, Exec, ExecState, PeriodicJob, Sandbox, State

log = logging.getLogger(__name__)

JOB = "prune"
BATCH = 500
CLEAR_BYTES = 8 * 1024 * 1024
PRUNED_NOTE = "its output was pruned (retention)"
_MB = 1024 * 1024


@dataclass(frozen=True)
class Pruned:
    """What one pass removed, and what the database holds after it."""

    outputs_expired: int = 0  # commands whose output was older than its retention
    outputs_over_budget: int = 0  # commands whose output went to keep the total in budget
    output_bytes_freed: int = 0
    events: int = 0
    execs: int = 0
    sandboxes: int = 0
    logins: int = 0
    stored_output_bytes: int = 0
    stored_events: int = 0


@dataclass(frozen=True)
class Stored:
    """The size of what is kept, as the dashboard shows it."""

    output_bytes: int
    events: int
    as_of: datetime | None  # the pass that measured it; None: measured now


def prune(now: datetime | None = None) -> Pruned:
    """One retention pass over the whole installation (see the module's docstring)."""
    now = now or timezone.now()
    output_cutoff = now - timedelta(days=settings.BOXYARD_OUTPUT_RETENTION_DAYS)
    history_cutoff = now - timedelta(days=settings.BOXYARD_HISTORY_RETENTION_DAYS)
    finished = Exec.objects.exclude(state=ExecState.RUNNING)

    expired, freed = _clear(finished.filter(started_at__lt=output_cutoff, output_size__gt=0))
    over, freed_for_budget = _keep_within(settings.BOXYARD_OUTPUT_KEEP_MB * _MB)
    events = _delete(Event.objects.filter(created_at__lt=history_cutoff))
    execs = _delete(finished.filter(started_at__lt=history_cutoff))
    gone = Sandbox.objects.filter(state=State.DESTROYED).filter(
        Q(destroyed_at__lt=history_cutoff)
        | Q(destroyed_at__isnull=True, updated_at__lt=history_cutoff)
    )
    sandboxes = _delete(gone)
    logins = _delete(AccessLog.objects.filter(attempt_time__lt=history_cutoff))
    logins += _delete(AccessFailureLog.objects.filter(attempt_time__lt=history_cutoff))
    _delete(Session.objects.filter(expire_date__lt=now))
    stored = measure()
    pruned = Pruned(
        outputs_expired=expired,
        outputs_over_budget=over,
        output_bytes_freed=freed + freed_for_budget,
        events=events,
        execs=execs,
        sandboxes=sandboxes,
        logins=logins,
        stored_output_bytes=stored.output_bytes,
        stored_events=stored.events,
    )
    if expired or over or events or execs or sandboxes or logins:
        log.info("retention: %s", pruned)
    return pruned


def measure() -> Stored:
    """The output and the events stored now."""
    total = Exec.objects.aggregate(total=Sum("output_size"))["total"] or 0
    return Stored(output_bytes=int(total), events=Event.objects.count(), as_of=None)


def stored() -> Stored:
    """The size of what is kept as the last pass measured it (at most a pass old, and cheap
    to read on every push of the dashboard); measured now if no pass has run yet."""
    job = PeriodicJob.objects.filter(name=JOB).values_list("last_result", "last_finished_at")
    for result, finished_at in job:
        if isinstance(result, dict) and "stored_output_bytes" in result:
            return Stored(
                output_bytes=int(result["stored_output_bytes"]),
                events=int(result.get("stored_events", 0)),
                as_of=finished_at,
            )
    return measure()


def _keep_within(budget: int) -> tuple[int, int]:
    """Clear the oldest stored output until what stays is at most `budget` bytes."""
    total = Exec.objects.aggregate(total=Sum("output_size"))["total"] or 0
    excess = int(total) - budget
    if excess <= 0:
        return 0, 0
    chosen: list[object] = []
    covered = 0
    oldest = (
        Exec.objects.exclude(state=ExecState.RUNNING)
        .filter(output_size__gt=0)
        .order_by("started_at", "id")
        .values_list("pk", "output_size")
    )
    for pk, size in oldest.iterator(chunk_size=BATCH):
        chosen.append(pk)
        covered += size
        if covered >= excess:
            break
    cleared, freed = 0, 0
    for start in range(0, len(chosen), BATCH):
        done, bytes_freed = _clear(Exec.objects.filter(pk__in=chosen[start : start + BATCH]))
        cleared += done
        freed += bytes_freed
    return cleared, freed


def _clear(execs: QuerySet[Exec]) -> tuple[int, int]:
    """Clear the stored output of `execs` (finished ones with output), keeping their rows with
    a note; returns how many, and the bytes freed. A transaction frees at most CLEAR_BYTES, so
    that the API's writers never wait long for the database."""
    cleared, freed = 0, 0
    while True:
        batch = list(
            execs.filter(output_size__gt=0)
            .exclude(state=ExecState.RUNNING)
            .values_list("pk", "output_size")[:BATCH]
        )
        for chunk in _by_size(batch):
            cleared += _clear_rows([pk for pk, _ in chunk])
            freed += sum(size for _, size in chunk)
        if len(batch) < BATCH:
            return cleared, freed


def _by_size(rows: list[tuple[Any, int]]) -> list[list[tuple[Any, int]]]:
    chunks: list[list[tuple[Any, int]]] = []
    size = 0
    for row in rows:
        if not chunks or size + row[1] > CLEAR_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += row[1]
    return chunks


def _clear_rows(pks: list[Any]) -> int:
    with transaction.atomic():
        return Exec.objects.filter(pk__in=pks, output_size__gt=0).update(
            stdout="",
            stderr="",
            output_size=0,
            stdout_truncated=Case(
                When(stdout_bytes__gt=0, then=Value(True)), default=F("stdout_truncated")
            ),
            stderr_truncated=Case(
                When(stderr_bytes__gt=0, then=Value(True)), default=F("stderr_truncated")
            ),
            error=Case(
                When(error="", then=Value(PRUNED_NOTE)),
                default=Concat(F("error"), Value("; " + PRUNED_NOTE)),
                output_field=models.TextField(),
            ),
        )


def _delete(rows: QuerySet[Any]) -> int:
    """Delete `rows` a batch at a time; returns how many rows of their own model went. (Events
    are append-only for everything else: their model's plain manager deletes them here.)"""
    deleted = 0
    model = rows.model
    while True:
        batch = list(rows.values_list("pk", flat=True)[:BATCH])
        if not batch:
            return deleted
        with transaction.atomic():
            _, by_model = model._base_manager.filter(pk__in=batch).delete()
        went = int(by_model.get(model._meta.label, 0))
        deleted += went
        if len(batch) < BATCH or not went:
            return deleted
