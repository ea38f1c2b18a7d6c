"""The fleet's minute samples and the charts drawn from them."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone, translation

from sandboxes import metrics
from sandboxes.charts import fleet_charts
from sandboxes.models import FleetSample
from sandboxes.services.sampling import KEEP, sample_fleet

pytestmark = pytest.mark.django_db


def test_a_sample_takes_every_pipeline_and_the_whole_fleet(make_pipeline) -> None:
    make_pipeline(slug="support")
    metrics.count("boxyard_sandboxes_created_total", "support", amount=3)
    metrics.count("boxyard_sandboxes_cleaned_total", "support", "idle", amount=2)
    assert sample_fleet() == 2
    overall = FleetSample.objects.get(pipeline="")
    support = FleetSample.objects.get(pipeline="support")
    assert (overall.created, support.created, support.cleaned) == (3, 3, {"idle": 2})


def test_old_samples_are_forgotten() -> None:
    FleetSample.objects.create(at=timezone.now() - KEEP - timedelta(minutes=1), pipeline="")
    sample_fleet()
    assert FleetSample.objects.count() == 1


def test_charts_show_what_changed_between_samples() -> None:
    start = timezone.now() - timedelta(minutes=3)
    for minute, (created, idle, live) in enumerate([(0, 0, 0), (5, 1, 4), (9, 3, 6)]):
        FleetSample.objects.create(
            at=start + timedelta(minutes=minute),
            pipeline="",
            live={"running": live},
            created=created,
            cleaned={"idle": idle},
        )
    charts = fleet_charts()
    assert "Live sandboxes" in charts["live"] and "<polyline" in charts["live"]
    assert ">6</text>" in charts["live"]  # the live chart's top: the most at once
    assert ">5</text>" in charts["activity"]  # the most created in one interval
    assert "Idle timeout" in charts["stops"]  # a reason by its name
    # The scale's foot and unit, and each moment's value on hover.
    assert ">0</text>" in charts["live"] and ">sandboxes</text>" in charts["live"]
    assert re.search(r"<title>\d\d:\d\d UTC · live: 6</title>", charts["live"])
    assert re.search(r"<title>\d\d:\d\d UTC · created: 5</title>", charts["activity"])
    with translation.override("zh-hans"):
        chinese = fleet_charts()
    assert "Idle timeout" not in chinese["stops"] and "created" not in chinese["activity"]


def test_a_chart_says_when_it_has_too_few_samples() -> None:
    assert "Not enough samples yet" in fleet_charts()["live"]
