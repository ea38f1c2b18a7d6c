"""The embedded mode's worker and scheduler (what `manage.py serve` runs in its own process):
a sandbox opened in the background is booted, an idle one is reaped by the periodic job, and
the reconciler runs when the worker starts."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models.functions import Now

from config.celery import app
from config.embedded import start_worker_and_scheduler
from sandboxes import services
from sandboxes.models import Lease, PeriodicJob, Sandbox, State, StopReason
from sandboxes.runtime import LABEL_DEPLOYMENT
from tests.conftest import CHAT, DEPLOYMENT, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(settings: Any, tmp_path: Any, docker_engine: Any) -> Iterator[Any]:
    settings.CELERY_BEAT_SCHEDULE_FILENAME = str(tmp_path / "beat-schedule")
    app.control.purge()  # nothing queued by earlier tests
    running = start_worker_and_scheduler()
    yield running
    running.stop(in_sighandler=False)
    for thread_scheduler in _schedulers():
        thread_scheduler.stop()


def _schedulers() -> list[Any]:
    import threading

    from celery.beat import _Threaded

    return [thread for thread in threading.enumerate() if isinstance(thread, _Threaded)]


def test_a_sandbox_opened_in_the_background_is_booted_by_the_worker(worker, pipeline, bot) -> None:
    opened = services.open_sandbox(pipeline, CHAT, bot, background=True)
    assert opened.sandbox.state == State.CREATING and opened.created
    took = wait_for(lambda: Sandbox.objects.get(pk=opened.sandbox.pk).state == State.RUNNING, 30)
    assert took < 30
    sandbox = Sandbox.objects.select_related("pipeline").get(pk=opened.sandbox.pk)
    result = services.run_exec(sandbox, services.clean_request(sandbox, cmd="echo booted"), bot)
    assert result.stdout == "booted\n"


def test_an_idle_sandbox_is_gone_within_its_idle_timeout_and_30_seconds(
    worker, make_pipeline, bot
) -> None:
    """The scheduler's reap job (every 10 s by default) finds it; nothing calls it by hand."""
    pipeline = make_pipeline(idle_timeout_seconds=2)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    Lease.objects.filter(sandbox=sandbox).update(expires_at=Now())  # the bot went away
    took = wait_for(lambda: Sandbox.objects.get(pk=sandbox.pk).state == State.DESTROYED, 32)
    assert took <= 2 + 30
    assert Sandbox.objects.get(pk=sandbox.pk).stop_reason == StopReason.IDLE
    # It was the scheduler's job, which records its end just after the pass that reaped.
    wait_for(lambda: PeriodicJob.objects.get(name="reap").last_finished_at is not None, 10)


def test_the_worker_reconciles_when_it_starts(
    settings, pipeline, bot, docker_engine, tmp_path
) -> None:
    settings.BOXYARD_RECONCILE_GRACE_SECONDS = 0
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    docker_engine.remove_container(sandbox.container_id)  # while no worker was running
    settings.CELERY_BEAT_SCHEDULE_FILENAME = str(tmp_path / "beat-schedule")
    app.control.purge()
    running = start_worker_and_scheduler()
    try:
        wait_for(lambda: Sandbox.objects.get(pk=sandbox.pk).state == State.STOPPED, 30)
    finally:
        running.stop(in_sighandler=False)
        for scheduler in _schedulers():
            scheduler.stop()
    assert Sandbox.objects.get(pk=sandbox.pk).stop_reason == StopReason.LOST
    assert docker_engine.list_containers({LABEL_DEPLOYMENT: DEPLOYMENT}) == []
