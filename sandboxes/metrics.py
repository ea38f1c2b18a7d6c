"""Metrics: counters kept by every process and added up in the database, gauges read from the
rows, served as Prometheus text (`/metrics`) and as JSON (`/api/v1/metrics`).

Counting costs a dictionary update: each process adds its counts up in memory and a
background thread adds them to the `MetricTotal` rows every few seconds (and when the process
exits). A process that dies loses at most those seconds of counts; the events table, which
records every lifecycle change, is the record that loses nothing.
"""

import atexit
import logging
import threading
import time
from collections import defaultdict
from typing import Any

from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import Count, F

from pipelines.models import Pipeline
from sandboxes.models import MetricTotal, Sandbox, State

log = logging.getLogger(__name__)

FLUSH_SECONDS = 5.0
# Off in the test suite, where each test's database transaction must hold all its writes:
# counts are then written when they are read (`snapshot`).
BACKGROUND_FLUSH = True
# Exec durations: the upper bounds (seconds) of the histogram's buckets.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

# name: (type, help). Counter names end in _total; the histogram has _bucket, _sum and _count.
METRICS: dict[str, tuple[str, str]] = {
    "boxyard_sandboxes_created_total": (
        "counter",
        "Sandboxes created (cold or for the warm pool).",
    ),
    "boxyard_sandboxes_reused_total": ("counter", "Opens that found their scope key's sandbox."),
    "boxyard_sandboxes_cleaned_total": ("counter", "Sandboxes stopped or destroyed, by reason."),
    "boxyard_health_check_failures_total": (
        "counter",
        "Sandboxes that failed the check before reuse.",
    ),
    "boxyard_pool_hits_total": ("counter", "Opens of a new scope key served by the warm pool."),
    "boxyard_pool_misses_total": ("counter", "Opens of a new scope key that found the pool empty."),
    "boxyard_execs_total": ("counter", "Commands run, by how they ended."),
    "boxyard_link_reads_total": ("counter", "Downloads (GET and HEAD) of signed file links."),
    "boxyard_exec_duration_seconds": ("histogram", "How long finished commands took."),
    "boxyard_sandboxes": ("gauge", "Sandboxes by state (not destroyed)."),
    "boxyard_pool_ready": ("gauge", "Warm-pool sandboxes ready to be claimed."),
}

_pending: dict[tuple[str, str, str], float] = defaultdict(float)
_lock = threading.Lock()
_flusher: threading.Thread | None = None


def count(name: str, pipeline: str, label: str = "", amount: float = 1.0) -> None:
    """Add to a counter of this process (written to the database within FLUSH_SECONDS)."""
    with _lock:
        _pending[(name, pipeline, label)] += amount
    _start_flusher()


def observe_exec(pipeline: str, state: str, duration_ms: int | None) -> None:
    count("boxyard_execs_total", pipeline, state)
    if duration_ms is None:
        return
    seconds = duration_ms / 1000
    name = "boxyard_exec_duration_seconds"
    with _lock:
        _pending[(name + "_count", pipeline, "")] += 1
        _pending[(name + "_sum", pipeline, "")] += seconds
        for bound in DURATION_BUCKETS:
            if seconds <= bound:
                _pending[(name + "_bucket", pipeline, _bound(bound))] += 1
                break  # stored per bucket; rendered cumulatively
    _start_flusher()


def flush() -> None:
    """Add this process's counts to the database totals."""
    with _lock:
        batch = dict(_pending)
        _pending.clear()
    for (name, pipeline, label), amount in batch.items():
        try:
            _add(name, pipeline, label, amount)
        except Exception:
            log.exception("could not write metric %s", name)
            with _lock:
                _pending[(name, pipeline, label)] += amount


def _add(name: str, pipeline: str, label: str, amount: float) -> None:
    series = MetricTotal.objects.filter(name=name, pipeline=pipeline, label=label)
    if series.update(value=F("value") + amount):
        return
    try:
        with transaction.atomic():
            MetricTotal.objects.create(name=name, pipeline=pipeline, label=label, value=amount)
    except IntegrityError:  # another process created the series first
        series.update(value=F("value") + amount)


def _start_flusher() -> None:
    global _flusher
    if not BACKGROUND_FLUSH or (_flusher is not None and _flusher.is_alive()):
        return
    with _lock:
        if _flusher is not None and _flusher.is_alive():
            return
        _flusher = threading.Thread(target=_flush_forever, name="metrics-flush", daemon=True)
        _flusher.start()


def _flush_forever() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        if not BACKGROUND_FLUSH:
            return
        try:
            close_old_connections()
            flush()
        except Exception:
            log.exception("writing the metrics failed; they are kept for the next try")


@atexit.register
def _flush_at_exit() -> None:
    if BACKGROUND_FLUSH:
        flush()


def _bound(bound: float) -> str:
    return f"{bound:g}"


# --- reading ----------------------------------------------------------------------------------


def flush_and_snapshot(pipeline: Pipeline | None = None) -> dict[str, Any]:
    """Write this process's counts (a read that writes: the JSON API's metrics and the
    sampler), then read every metric as `snapshot` does."""
    flush()
    return _read(pipeline, unwritten=False)


def snapshot(pipeline: Pipeline | None = None) -> dict[str, Any]:
    """Every metric, per pipeline and overall, writing nothing: counts of this process not yet
    written are added from memory (the dashboard, whose pushes must not queue behind the API
    for the database's write lock); counts of other processes come in within FLUSH_SECONDS."""
    return _read(pipeline, unwritten=True)


def _read(pipeline: Pipeline | None, *, unwritten: bool) -> dict[str, Any]:
    totals = MetricTotal.objects.all()
    sandboxes = Sandbox.objects.exclude(state=State.DESTROYED)
    if pipeline is not None:
        totals = totals.filter(pipeline=pipeline.slug)
        sandboxes = sandboxes.filter(pipeline=pipeline)
    per: dict[str, dict[str, Any]] = defaultdict(_empty)
    for name, slug, label, value in totals.values_list("name", "pipeline", "label", "value"):
        _put(per[slug], name, label, value)
    if unwritten:
        with _lock:
            pending = list(_pending.items())
        for (name, slug, label), value in pending:
            if pipeline is None or slug == pipeline.slug:
                _put(per[slug], name, label, value)
    for slug, state, pooled, number in sandboxes.values_list(
        "pipeline__slug", "state", "pooled"
    ).annotate(n=Count("pk")):
        entry = per[slug]
        entry["sandboxes"][state] = entry["sandboxes"].get(state, 0) + number
        if pooled and state == State.RUNNING:
            entry["pool_ready"] += number
    overall = _empty()
    for entry in per.values():
        _merge(overall, entry)
    return {"overall": overall, "pipelines": dict(sorted(per.items()))}


def _empty() -> dict[str, Any]:
    return {
        "sandboxes": {},
        "pool_ready": 0,
        "created": 0,
        "reused": 0,
        "cleaned": {},
        "health_check_failures": 0,
        "pool_hits": 0,
        "pool_misses": 0,
        "link_reads": 0,
        "execs": {},
        "exec_duration": {"count": 0, "sum_seconds": 0.0, "buckets": {}},
    }


_SIMPLE = {
    "boxyard_sandboxes_created_total": "created",
    "boxyard_sandboxes_reused_total": "reused",
    "boxyard_health_check_failures_total": "health_check_failures",
    "boxyard_pool_hits_total": "pool_hits",
    "boxyard_pool_misses_total": "pool_misses",
    "boxyard_link_reads_total": "link_reads",
}


def _put(entry: dict[str, Any], name: str, label: str, value: float) -> None:
    if name in _SIMPLE:
        entry[_SIMPLE[name]] += int(value)
    elif name == "boxyard_sandboxes_cleaned_total":
        entry["cleaned"][label] = entry["cleaned"].get(label, 0) + int(value)
    elif name == "boxyard_execs_total":
        entry["execs"][label] = entry["execs"].get(label, 0) + int(value)
    elif name == "boxyard_exec_duration_seconds_count":
        entry["exec_duration"]["count"] += int(value)
    elif name == "boxyard_exec_duration_seconds_sum":
        entry["exec_duration"]["sum_seconds"] += value
    elif name == "boxyard_exec_duration_seconds_bucket":
        buckets = entry["exec_duration"]["buckets"]
        buckets[label] = buckets.get(label, 0) + int(value)


def _merge(into: dict[str, Any], entry: dict[str, Any]) -> None:
    for key, value in entry.items():
        if isinstance(value, dict):
            _merge(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value


def flush_and_prometheus_text() -> str:
    """Write this process's counts, then every metric in the Prometheus text exposition format
    (version 0.0.4): what `GET /metrics` answers, a read that writes."""
    data = flush_and_snapshot()
    lines: list[str] = []

    def family(name: str) -> None:
        kind, text = METRICS[name]
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {kind}")

    def sample(name: str, labels: dict[str, str], value: float) -> None:
        rendered = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
        lines.append(f"{name}{{{rendered}}} {value:g}" if rendered else f"{name} {value:g}")

    pipelines = data["pipelines"]
    for name, key in _SIMPLE.items():
        family(name)
        for slug, entry in pipelines.items():
            sample(name, {"pipeline": slug}, entry[key])
    for name, key, label in (
        ("boxyard_sandboxes_cleaned_total", "cleaned", "reason"),
        ("boxyard_execs_total", "execs", "state"),
        ("boxyard_sandboxes", "sandboxes", "state"),
    ):
        family(name)
        for slug, entry in pipelines.items():
            for value_label, value in sorted(entry[key].items()):
                sample(name, {"pipeline": slug, label: value_label}, value)
    family("boxyard_pool_ready")
    for slug, entry in pipelines.items():
        sample("boxyard_pool_ready", {"pipeline": slug}, entry["pool_ready"])
    family("boxyard_exec_duration_seconds")
    for slug, entry in pipelines.items():
        duration = entry["exec_duration"]
        cumulative = 0
        for bound in DURATION_BUCKETS:
            cumulative += duration["buckets"].get(_bound(bound), 0)
            sample(
                "boxyard_exec_duration_seconds_bucket",
                {"pipeline": slug, "le": _bound(bound)},
                cumulative,
            )
        sample(
            "boxyard_exec_duration_seconds_bucket",
            {"pipeline": slug, "le": "+Inf"},
            duration["count"],
        )
        sample("boxyard_exec_duration_seconds_sum", {"pipeline": slug}, duration["sum_seconds"])
        sample("boxyard_exec_duration_seconds_count", {"pipeline": slug}, duration["count"])
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
