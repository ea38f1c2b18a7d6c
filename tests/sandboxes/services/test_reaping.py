"""Reaping against the real engine: idle and time-to-live deadlines, what keeps a sandbox from
being idle, what a reaped sandbox leaves (temporary: nothing; persistent: its workspace) and
what a bot is told when it comes back."""

from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from boxyard.errors import InvalidState
from pipelines.models import Retention
from sandboxes import services
from sandboxes.models import Event, Lease, Sandbox, State, StopReason
from sandboxes.services.reaping import due_for_idle, reap_due
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def open_idle(pipeline: Any, bot: Any, variables: dict = CHAT) -> Sandbox:
    """A sandbox past its idle deadline, its lease lapsed: due for idle reaping."""
    sandbox = services.open_sandbox(pipeline, variables, bot).sandbox
    make_idle(sandbox)
    return sandbox


def make_idle(sandbox: Sandbox) -> None:
    """As if the idle timeout and the lease had passed since the sandbox was last used."""
    idle = timedelta(seconds=sandbox.pipeline.idle_timeout_seconds + 1)
    Lease.objects.filter(sandbox=sandbox).update(expires_at=Now() - timedelta(seconds=1))
    Sandbox.objects.filter(pk=sandbox.pk).update(
        last_activity_at=Now() - idle, idle_deadline=Now() - timedelta(seconds=1)
    )


def run(sandbox: Sandbox, bot: Any, cmd: list[str] | str, **kwargs: Any) -> Any:
    sandbox = Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk)
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd, **kwargs), bot)


def test_an_idle_temporary_sandbox_is_destroyed_with_its_workspace(
    pipeline, bot, docker_engine
) -> None:
    sandbox = open_idle(pipeline, bot)
    reaped = reap_due()
    assert reaped.idle == [str(sandbox.pk)]
    sandbox.refresh_from_db()
    assert (sandbox.state, sandbox.stop_reason) == (State.DESTROYED, StopReason.IDLE)
    assert docker_engine.list_containers({"io.boxyard.sandbox": str(sandbox.pk)}) == []
    assert sandbox.volume_name not in docker_engine.list_volumes(
        {"io.boxyard.sandbox": str(sandbox.pk)}
    )
    actions = list(Event.objects.filter(sandbox=sandbox).values_list("action", "reason"))
    assert ("sandbox.destroyed", "idle") in actions
    # A bot that comes back with the sandbox's id is told why it is gone.
    with pytest.raises(InvalidState, match=r"destroyed \(idle\)") as refused:
        run(sandbox, bot, "true")
    assert refused.value.as_dict()["stop_reason"] == "idle"
    # Its scope key opens a new sandbox.
    again = services.open_sandbox(pipeline, CHAT, bot)
    assert again.created and again.sandbox.pk != sandbox.pk


def test_an_idle_persistent_sandbox_is_stopped_and_starts_again_with_its_files(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo kept > notes.txt")
    make_idle(sandbox)
    reap_due()
    sandbox.refresh_from_db()
    assert (sandbox.state, sandbox.stop_reason) == (State.STOPPED, StopReason.IDLE)
    assert docker_engine.list_containers({"io.boxyard.sandbox": str(sandbox.pk)}) == []
    reopened = services.open_sandbox(pipeline, CHAT, bot)
    assert reopened.sandbox.pk == sandbox.pk and reopened.sandbox.generation == 2
    assert run(reopened.sandbox, bot, "cat notes.txt").stdout == "kept\n"
    assert reopened.sandbox.expires_at > timezone.now() + timedelta(hours=23)  # a fresh run


def test_a_held_lease_keeps_a_sandbox_from_idling_but_not_from_its_ttl(
    pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    make_idle(sandbox)
    Lease.objects.filter(sandbox=sandbox).update(expires_at=Now() + timedelta(minutes=5))
    assert not reap_due().idle
    Sandbox.objects.filter(pk=sandbox.pk).update(expires_at=Now() - timedelta(seconds=1))
    assert reap_due().ttl == [str(sandbox.pk)]
    sandbox.refresh_from_db()
    assert (sandbox.state, sandbox.stop_reason) == (State.DESTROYED, StopReason.TTL)
    assert Lease.objects.get(sandbox=sandbox).holder == ""


def test_a_running_background_command_is_activity(pipeline, bot, docker_engine) -> None:
    sandbox = open_idle(pipeline, bot)
    started = run(sandbox, bot, "sleep 30", background=True)
    make_idle(sandbox)
    assert not reap_due().idle
    services.kill_exec(services.exec_output_recording_end(started)[1], bot)
    make_idle(sandbox)
    assert reap_due().idle == [str(sandbox.pk)]


def test_managed_processes_keep_their_sandbox_alive(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(processes=[{"name": "server", "cmd": ["sleep", "3600"]}])
    sandbox = open_idle(pipeline, bot)
    assert not reap_due().idle
    Sandbox.objects.filter(pk=sandbox.pk).update(expires_at=Now() - timedelta(seconds=1))
    assert reap_due().ttl == [str(sandbox.pk)]


def test_activity_moves_the_idle_deadline(pipeline, bot, docker_engine) -> None:
    sandbox = open_idle(pipeline, bot)
    run(sandbox, bot, "true")
    sandbox.refresh_from_db()
    assert sandbox.idle_deadline > timezone.now() + timedelta(
        seconds=pipeline.idle_timeout_seconds - 5
    )
    make_idle(sandbox)
    services.write_file(
        Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk), "a.txt", b"x", bot
    )
    assert not due_for_idle().filter(pk=sandbox.pk).exists()
    make_idle(sandbox)
    kept = services.keep_alive(Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk), bot)
    assert kept.idle_deadline > timezone.now()
    assert not due_for_idle().filter(pk=sandbox.pk).exists()


def test_pooled_sandboxes_do_not_idle(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(pool_size=1)
    services.pool.refill(pipeline)
    pooled = Sandbox.objects.get(pipeline=pipeline, pooled=True)
    make_idle(pooled)
    assert not reap_due().idle


def test_a_reap_that_lost_the_race_to_a_command_does_nothing(pipeline, bot, docker_engine) -> None:
    """Scanned as idle, then used before its row was locked: not reaped."""
    sandbox = open_idle(pipeline, bot)
    assert due_for_idle().filter(pk=sandbox.pk).exists()
    run(sandbox, bot, "true")  # activity after the scan
    assert services.reaping.reap(sandbox.pk, StopReason.IDLE) is False
    sandbox.refresh_from_db()
    assert sandbox.state == State.RUNNING
