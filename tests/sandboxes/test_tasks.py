"""The Celery tasks, run in the test's process: each re-reads its row and does nothing if
the row has moved on, so a task delivered twice or late is harmless."""

from typing import Any

import pytest

from boxyard.errors import RuntimeUnavailable
from sandboxes import services, tasks
from sandboxes.models import PeriodicJob, Sandbox, State
from sandboxes.runtime import set_runtime
from sandboxes.runtime.docker import DockerRuntime
from tests.conftest import CHAT, DEPLOYMENT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def ran(result: Any) -> Any:
    """An eagerly run task's result. Celery refuses `get()` in a process that has run a
    worker (it takes the caller for a task); an embedded worker started by a test before
    leaves that mark, and nothing here waits on a worker."""
    return result.get(disable_sync_subtasks=False)


def test_boot_is_safe_to_run_twice_and_ignores_another_generation(
    pipeline, bot, docker_engine
) -> None:
    opened = services.open_sandbox(pipeline, CHAT, bot, background=True)
    sandbox = opened.sandbox
    assert ran(tasks.boot.apply(args=[str(sandbox.pk), sandbox.generation + 1])) is None
    assert ran(tasks.boot.apply(args=[str(sandbox.pk), sandbox.generation])) == State.RUNNING
    assert ran(tasks.boot.apply(args=[str(sandbox.pk), sandbox.generation])) == State.RUNNING
    assert len(docker_engine.list_containers({"io.boxyard.deployment": DEPLOYMENT})) == 1


def test_boot_retries_only_while_the_engine_is_unreachable(
    pipeline, bot, docker_engine, tmp_path, monkeypatch
) -> None:
    """Run eagerly, the retries happen at once: an unreachable engine is tried again up to
    the limit (the row stays creating for the reconciler); another failure is not."""
    sandbox = services.open_sandbox(pipeline, CHAT, bot, background=True).sandbox
    calls: list[int] = []
    real_boot = tasks.boot_sandbox

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_boot(*args, **kwargs)

    monkeypatch.setattr(tasks, "boot_sandbox", counted)
    set_runtime(DockerRuntime(base_url=f"unix://{tmp_path}/no-docker.sock"))
    try:
        result = tasks.boot.apply(args=[str(sandbox.pk), sandbox.generation])
    finally:
        set_runtime(None)
    assert result.state == "FAILURE" and isinstance(result.result, RuntimeUnavailable)
    assert len(calls) == tasks.boot.max_retries + 1
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.CREATING

    calls.clear()
    Sandbox.objects.filter(pk=sandbox.pk).update(image="not/allowed:1")
    failed = tasks.boot.apply(args=[str(sandbox.pk), sandbox.generation])
    assert failed.state == "FAILURE" and len(calls) == 1
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.ERROR


def test_destroy_of_a_destroyed_sandbox_does_nothing(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert ran(tasks.destroy.apply(args=[str(sandbox.pk)])) == State.DESTROYED
    assert ran(tasks.destroy.apply(args=[str(sandbox.pk)])) is None
    assert ran(tasks.destroy.apply(args=["5c0ffee0-0000-4000-8000-000000000000"])) is None


def test_periodic_jobs_record_their_last_run(pipeline, bot, docker_engine) -> None:
    assert ran(tasks.reap.apply()) == {"idle": [], "ttl": [], "failed": []}
    assert ran(tasks.reconcile.apply())["failed"] == []
    assert ran(tasks.refill_pools.apply()) == {}
    for name in ("reap", "reconcile", "refill_pools"):
        job = PeriodicJob.objects.get(name=name)
        assert job.last_finished_at is not None and job.holder == ""


def test_build_image_keeps_an_image_that_is_current(docker_engine) -> None:
    from django.conf import settings

    assert ran(tasks.build_image.apply(args=[settings.BOXYARD_TEST_IMAGE])) == "present"
