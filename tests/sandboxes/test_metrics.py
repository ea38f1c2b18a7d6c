"""Metrics: what is counted, per pipeline and overall, as JSON (the API) and as Prometheus
text (/metrics, protected)."""

import re
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.test import Client

from pipelines.models import PipelineToken
from sandboxes import metrics, services
from sandboxes.models import Lease, MetricTotal, Sandbox
from sandboxes.services import pool
from sandboxes.services.reaping import reap_due
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

OTHER = {"launcher_type": "group", "launcher_id": "other"}


def run(sandbox: Sandbox, bot: Any, cmd: str) -> Any:
    sandbox = Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk)
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), bot)


def test_the_lifecycle_and_the_commands_are_counted(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(slug="support", pool_size=1)
    first = services.open_sandbox(pipeline, CHAT, bot)  # the pool is empty: a miss, made cold
    services.open_sandbox(pipeline, CHAT, bot)  # reused
    pool.refill(pipeline)
    services.open_sandbox(pipeline, OTHER, bot)  # a pool hit
    run(first.sandbox, bot, "true")
    run(first.sandbox, bot, "sleep 0.3; exit 3")
    docker_engine.stop_container(first.sandbox.container_id, timeout=0)
    services.open_sandbox(pipeline, CHAT, bot)  # reused after a failed health check
    Lease.objects.update(expires_at=Now())
    Sandbox.objects.update(idle_deadline=Now() - timedelta(seconds=1))
    reap_due()

    support = metrics.flush_and_snapshot()["pipelines"]["support"]
    assert support["created"] == 2  # one cold, one for the pool (no worker ran the refills)
    assert (support["reused"], support["pool_hits"], support["pool_misses"]) == (2, 1, 1)
    assert support["health_check_failures"] == 1
    assert support["cleaned"] == {"idle": 2}
    assert support["execs"] == {"completed": 2}
    duration = support["exec_duration"]
    assert duration["count"] == 2 and 0.3 <= duration["sum_seconds"] < 5
    assert sum(duration["buckets"].values()) == 2


def test_a_bot_sees_its_own_pipeline_and_an_admin_sees_all(
    make_pipeline, bot, docker_engine, django_user_model
) -> None:
    support, billing = make_pipeline(slug="support"), make_pipeline(slug="billing")
    services.open_sandbox(support, CHAT, bot)
    services.open_sandbox(billing, CHAT, bot)
    services.open_sandbox(billing, OTHER, bot)
    token = PipelineToken.issue(billing, name="t")[1]
    seen = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/metrics").json()
    assert list(seen["pipelines"]) == ["billing"]
    assert seen["overall"]["created"] == 2 and seen["overall"]["sandboxes"] == {"running": 2}
    admin = Client()
    admin.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    everything = admin.get("/api/v1/metrics").json()
    assert set(everything["pipelines"]) == {"support", "billing"}
    assert everything["overall"]["created"] == 3


def test_prometheus_text_needs_the_metrics_token_or_an_admin(
    settings, make_pipeline, bot, docker_engine, django_user_model
) -> None:
    settings.BOXYARD_METRICS_TOKEN = "scrape-me"
    pipeline = make_pipeline(slug="support")
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "true")
    assert Client().get("/metrics").status_code == 401
    assert Client(HTTP_AUTHORIZATION="Bearer wrong").get("/metrics").status_code == 401
    response = Client(HTTP_AUTHORIZATION="Bearer scrape-me").get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert 'boxyard_sandboxes_created_total{pipeline="support"} 1' in text
    assert 'boxyard_sandboxes{pipeline="support",state="running"} 1' in text
    assert 'boxyard_execs_total{pipeline="support",state="completed"} 1' in text
    buckets = [
        float(v)
        for v in re.findall(
            r'exec_duration_seconds_bucket\{pipeline="support",le="[^"]+"\} (\S+)', text
        )
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 1  # cumulative, ending at +Inf = count
    for line in text.splitlines():  # every sample line is name{labels} value
        assert line.startswith("#") or re.fullmatch(r"[a-z_]+(\{[^}]*\})? [0-9.e+-]+", line), line
    admin = Client()
    admin.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    assert admin.get("/metrics").status_code == 200
    settings.BOXYARD_METRICS_TOKEN = ""
    assert Client(HTTP_AUTHORIZATION="Bearer ").get("/metrics").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_counts_reach_the_database_without_being_read(monkeypatch, make_pipeline) -> None:
    """Each process writes its counts in the background, so every process's totals add up."""
    monkeypatch.setattr(metrics, "BACKGROUND_FLUSH", True)
    monkeypatch.setattr(metrics, "FLUSH_SECONDS", 0.1)
    metrics.count("boxyard_sandboxes_reused_total", "support")
    metrics.count("boxyard_sandboxes_reused_total", "support")
    deadline = time.monotonic() + 10
    while not MetricTotal.objects.filter(name="boxyard_sandboxes_reused_total").exists():
        assert time.monotonic() < deadline, "the counts were not written"
        time.sleep(0.05)
    assert (
        MetricTotal.objects.get(name="boxyard_sandboxes_reused_total", pipeline="support").value
        == 2
    )


def test_a_reading_that_must_not_write_adds_the_unwritten_counts_from_memory(make_pipeline) -> None:
    metrics.count("boxyard_sandboxes_created_total", "support")
    metrics.flush()
    metrics.count("boxyard_sandboxes_created_total", "support", amount=2)
    metrics.count("boxyard_sandboxes_created_total", "billing")
    metrics.count("boxyard_sandboxes_cleaned_total", "support", "idle")
    read = metrics.snapshot()
    assert read["overall"]["created"] == 4 and read["overall"]["cleaned"] == {"idle": 1}
    assert (
        MetricTotal.objects.get(name="boxyard_sandboxes_created_total", pipeline="support").value
        == 1
    )
    support = make_pipeline(slug="support")
    assert metrics.snapshot(support)["overall"]["created"] == 3
    assert metrics.flush_and_snapshot()["overall"]["created"] == 4  # now written
    assert (
        MetricTotal.objects.get(name="boxyard_sandboxes_created_total", pipeline="support").value
        == 3
    )
