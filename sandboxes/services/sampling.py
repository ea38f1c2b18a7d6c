"""Taking the fleet's minute samples (the dashboard's charts) and forgetting old ones."""

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from sandboxes import live, metrics
from sandboxes.models import FleetSample

KEEP = timedelta(days=7)


def sample_fleet() -> int:
    """One sample per pipeline and one for all of them; returns how many were written."""
    now = timezone.now()
    snapshot = metrics.flush_and_snapshot()
    rows = [_sample(now, "", snapshot["overall"])]
    rows += [_sample(now, slug, entry) for slug, entry in snapshot["pipelines"].items() if slug]
    with transaction.atomic():
        FleetSample.objects.bulk_create(rows)
        FleetSample.objects.filter(at__lt=now - KEEP).delete()
        live.sampled()
    return len(rows)


def _sample(at: datetime, pipeline: str, entry: dict[str, Any]) -> FleetSample:
    return FleetSample(
        at=at,
        pipeline=pipeline,
        live=entry["sandboxes"],
        created=entry["created"],
        reused=entry["reused"],
        cleaned=entry["cleaned"],
    )
