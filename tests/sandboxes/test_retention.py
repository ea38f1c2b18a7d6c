"""Retention, against the real engine and database: a pass (`manage.py prune`, and the
scheduler's periodic job in a served Boxyard) clears the output of commands older than
BOXYARD_OUTPUT_RETENTION_DAYS and then the oldest while the rest is over
BOXYARD_OUTPUT_KEEP_MB, keeping each command's row with a note; it deletes events, finished
commands and destroyed sandboxes older than BOXYARD_HISTORY_RETENTION_DAYS, and keeps what is
recent and what is live. The fleet page shows what is stored."""

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from axes.models import AccessFailureLog, AccessLog
from django.core.management import call_command
from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from sandboxes import services
from sandboxes.models import Event, Exec, ExecState, PeriodicJob, Sandbox, State
from sandboxes.services.pruning import measure
from tests.conftest import CHAT, wait_for
from tests.servers import served

pytestmark = [pytest.mark.docker]

# 200,000 bytes on each stream: 400,000 stored (under the default 256 KiB a stream).
BIG = "head -c 200000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"


def run(sandbox: Sandbox, bot: Any, cmd: str) -> Exec:
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), bot)


def started(record: Exec, ago: timedelta) -> None:
    Exec.objects.filter(pk=record.pk).update(started_at=timezone.now() - ago)


def prune() -> str:
    out = io.StringIO()
    call_command("prune", stdout=out)
    return out.getvalue()


@pytest.fixture
def box(pipeline: Any, bot: Any, docker_engine: Any) -> Sandbox:
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


@pytest.mark.django_db
def test_prune_removes_old_output_and_history_per_the_settings_and_keeps_what_is_recent(
    box: Sandbox, pipeline: Any, bot: Any, settings: Any
) -> None:
    week_old = run(box, bot, "echo old; echo warned >&2")
    recent = run(box, bot, "echo recent")
    month_old = run(box, bot, "echo ancient")
    still_running = services.run_exec(
        box, services.clean_request(box, cmd="sleep 60", background=True), bot
    )
    started(week_old, timedelta(days=8))
    started(month_old, timedelta(days=31))
    started(still_running, timedelta(days=31))
    for record in (AccessLog, AccessFailureLog):
        old_login = record.objects.create(username="alice", ip_address="127.0.0.1")
        record.objects.filter(pk=old_login.pk).update(
            attempt_time=timezone.now() - timedelta(days=31)
        )
        record.objects.create(username="bob", ip_address="127.0.0.1")
    old_event = Event.objects.create(actor="bot:x", action="sandbox.note", sandbox=box)
    Event._base_manager.filter(pk=old_event.pk).update(
        created_at=timezone.now() - timedelta(days=31)
    )
    recent_events = set(Event.objects.exclude(pk=old_event.pk).values_list("pk", flat=True))
    assert recent_events
    other = {**CHAT, "launcher_id": "other"}
    long_gone = services.open_sandbox(pipeline, other, bot).sandbox
    services.close_sandbox(long_gone, bot, delete_workspace=True, force=True)
    Sandbox.objects.filter(pk=long_gone.pk).update(destroyed_at=timezone.now() - timedelta(days=31))
    lately = {**CHAT, "launcher_id": "lately"}
    lately_gone = services.open_sandbox(pipeline, lately, bot).sandbox
    services.close_sandbox(lately_gone, bot, delete_workspace=True, force=True)

    # The settings decide: with ten days of output and forty of history, nothing goes.
    settings.BOXYARD_OUTPUT_RETENTION_DAYS = 10
    settings.BOXYARD_HISTORY_RETENTION_DAYS = 40
    prune()
    assert Exec.objects.get(pk=week_old.pk).stdout == "old\n"
    assert Exec.objects.filter(pk=month_old.pk).exists()
    assert Event.objects.filter(pk=old_event.pk).exists()
    assert Sandbox.objects.filter(pk=long_gone.pk).exists()

    settings.BOXYARD_OUTPUT_RETENTION_DAYS = 7  # the defaults
    settings.BOXYARD_HISTORY_RETENTION_DAYS = 30
    said = prune()
    cleared = Exec.objects.get(pk=week_old.pk)
    assert (cleared.stdout, cleared.stderr, cleared.output_size) == ("", "", 0)
    # The row stays, saying what it was and that its output went.
    assert cleared.exit_code == 0 and cleared.state == ExecState.COMPLETED
    assert (cleared.stdout_bytes, cleared.stderr_bytes) == (4, 7) and cleared.truncated
    assert cleared.error == "its output was pruned (retention)"
    kept = Exec.objects.get(pk=recent.pk)
    assert kept.stdout == "recent\n" and kept.output_size == 7 and not kept.error
    assert not Exec.objects.filter(pk=month_old.pk).exists()
    assert not Event.objects.filter(pk=old_event.pk).exists()
    assert recent_events <= set(Event.objects.values_list("pk", flat=True))
    assert not Sandbox.objects.filter(pk=long_gone.pk).exists()
    assert Sandbox.objects.filter(pk=lately_gone.pk).exists()
    assert Sandbox.objects.get(pk=box.pk).state == State.RUNNING
    assert Exec.objects.get(pk=still_running.pk).state == ExecState.RUNNING
    for record in (AccessLog, AccessFailureLog):
        assert list(record.objects.values_list("username", flat=True)) == ["bob"]
    assert "1 commands past their retention" in said and "1 destroyed sandboxes" in said
    assert "1 events" in said and "2 login records" in said
    # The next pass finds nothing more; what a command runs now is kept.
    run(box, bot, "echo again")
    assert "Output cleared: 0 commands past their retention, 0 over" in prune()
    assert Exec.objects.get(pk=recent.pk).stdout == "recent\n"


@pytest.mark.django_db
def test_output_over_the_keep_budget_is_cleared_oldest_first(
    box: Sandbox, bot: Any, settings: Any
) -> None:
    records = [run(box, bot, BIG) for _ in range(4)]
    for age, record in zip((4, 3, 2, 1), records, strict=True):
        started(record, timedelta(minutes=age))
    assert [Exec.objects.get(pk=r.pk).output_size for r in records] == [400_000] * 4
    settings.BOXYARD_OUTPUT_KEEP_MB = 1  # 1,048,576 bytes for 1,600,000 stored
    said = prune()
    sizes = [Exec.objects.get(pk=r.pk).output_size for r in records]
    assert sizes == [0, 0, 400_000, 400_000]  # the two oldest went, no more
    newest = Exec.objects.get(pk=records[-1].pk)
    assert newest.stdout == "o" * 200_000 and newest.stderr == "e" * 200_000
    assert "pruned" in Exec.objects.get(pk=records[0].pk).error
    assert "2 over the budget" in said and measure().output_bytes == 800_000
    assert "2 over the budget" not in prune()  # within the budget now


@pytest.mark.django_db
def test_the_fleet_page_shows_what_is_stored(box: Sandbox, bot: Any, admin_client: Any) -> None:
    run(box, bot, BIG)
    prune()
    stored = measure()
    assert stored.output_bytes >= 400_000 and stored.events > 0
    page = admin_client.get("/").content.decode()
    assert f'<dd data-testid="stored-output">{filesizeformat(stored.output_bytes)}</dd>' in page
    assert f'<dd data-testid="stored-events">{stored.events}</dd>' in page


@pytest.mark.django_db(transaction=True)
def test_the_served_schedulers_periodic_job_prunes(
    tmp_path: Path, make_pipeline: Any, docker_engine: Any
) -> None:
    """`manage.py serve` (the embedded worker) runs the pass every
    BOXYARD_PRUNE_INTERVAL_SECONDS, as `celery beat` does from the same schedule."""
    pipeline = make_pipeline()
    sandbox = Sandbox.objects.create(
        pipeline=pipeline,
        scope_key="gone",
        state=State.DESTROYED,
        destroyed_at=timezone.now(),
        retention="temporary",
        image="x",
        volume_name="v-gone",
    )
    old = Exec.objects.create(
        sandbox=sandbox,
        command="yes",
        cwd="/workspace",
        actor="bot:x",
        state=ExecState.COMPLETED,
        timeout_seconds=10,
        exit_code=0,
        stdout="y\n" * 5000,
        stdout_bytes=10_000,
    )
    assert old.output_size == 10_000
    started(old, timedelta(days=8))
    # The embedded worker and scheduler, whichever broker the run has.
    with served(
        tmp_path, BOXYARD_PRUNE_INTERVAL_SECONDS="1", BOXYARD_EMBEDDED_WORKER="true"
    ) as server:
        wait_for(lambda: Exec.objects.get(pk=old.pk).output_size == 0, 60, server.tail)
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    assert "pruned" in Exec.objects.get(pk=old.pk).error
    job = PeriodicJob.objects.get(name="prune")
    assert job.last_finished_at is not None and not job.last_error
