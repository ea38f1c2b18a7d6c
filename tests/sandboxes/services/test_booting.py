"""Booting, the engine half of an open, on its own: a running sandbox is checked before it is
handed out (a container that does not answer is replaced, on the same workspace, in a new
generation), one waiting for a container gets it now or from a worker, and a started one
runs its pipeline's managed processes. Health failures are proven on the real engine; what
is only bookkeeping uses the fake runtime."""

import threading
from typing import Any

import pytest
from celery import current_app

from boxyard.errors import RuntimeUnavailable
from sandboxes import lifecycle, metrics, services
from sandboxes.models import Event, Sandbox, State
from sandboxes.runtime import LABEL_SANDBOX, agent
from sandboxes.services import booting, containers
from sandboxes.services.creating import create_row
from tests.conftest import CHAT, wait_for


@pytest.fixture
def queued(monkeypatch: Any) -> list[tuple[str, list[Any]]]:
    sent: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, args=(), **_: sent.append((name, list(args)))
    )
    return sent


def health_failures(pipeline: Any) -> int:
    entry = metrics.flush_and_snapshot(pipeline)["pipelines"].get(pipeline.slug, {})
    return int(entry.get("health_check_failures", 0))


def agent_processes(sandbox: Sandbox) -> dict[str, str]:
    """The processes the sandbox's agent runs, by name, asked of the agent itself (listing
    them through the service would start them)."""
    listed = agent.channel(sandbox).call("process.list")["processes"]
    return {process["name"]: process["state"] for process in listed}


# --- on the real engine ---------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_start_runs_the_pipelines_processes_and_a_dead_container_is_replaced(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(workspace_mb=32, processes=[{"name": "mcp", "cmd": "cat"}])
    sandbox = booting.start(create_row(pipeline, "group_1", {}, bot), bot)
    assert sandbox.state == State.RUNNING and sandbox.agent
    assert agent_processes(sandbox) == {"mcp": "running"}
    old_id, old_name = sandbox.container_id, sandbox.container_name

    docker_engine.remove_container(old_id)  # behind Boxyard's back
    ready = booting.ready(sandbox, bot)

    assert (ready.state, ready.generation, ready.health_failures) == (State.RUNNING, 2, 1)
    assert ready.container_id != old_id and ready.container_name.endswith("-g2")
    [failed] = Event.objects.filter(sandbox=sandbox, action="sandbox.health_failed")
    assert (failed.actor, failed.detail) == ("bot:support-bot", {"container": old_name})
    restarting = Event.objects.get(sandbox=sandbox, action="sandbox.restarting")
    assert restarting.reason == "health check failed"
    assert health_failures(pipeline) == 1
    [left] = docker_engine.list_containers({LABEL_SANDBOX: str(sandbox.pk)})
    assert left.id == ready.container_id and left.running
    assert agent_processes(ready) == {"mcp": "running"}  # started again in the new one


def opening(container: str) -> bool:
    """Whether this process is opening its channel to the container's agent right now."""
    return any(each.name == f"agent-open-{container[:12]}" for each in threading.enumerate())


@pytest.mark.docker
@pytest.mark.django_db
def test_start_readies_the_agent_only_when_asked(make_pipeline, bot, docker_engine) -> None:
    """A worker booting a sandbox for another process opens no channel it would not use."""
    pipeline = make_pipeline(workspace_mb=32)
    quiet = booting.start(create_row(pipeline, "a", {}, bot), bot, ready_agent=False)
    readied = booting.start(create_row(pipeline, "b", {}, bot), bot)
    asked = opening(readied.container_id) or agent.is_open(readied.container_id)
    # The channel asked for, after the first sandbox was started, has been tried (its opening
    # thread is done; opening is best effort): one the first start had begun would have been
    # tried by now too (it would have begun earlier).
    wait_for(lambda: not opening(readied.container_id), 10)
    assert asked and quiet.state == State.RUNNING and not opening(quiet.container_id)
    assert not agent.is_open(quiet.container_id)


# --- the bookkeeping, with the fake runtime -----------------------------------------------------------


@pytest.fixture
def running(pipeline: Any, bot: Any, fake_runtime: Any) -> Sandbox:
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


@pytest.mark.django_db
def test_a_sandbox_that_answers_is_handed_out_as_it_is(running, bot, fake_runtime) -> None:
    events_before = Event.objects.count()
    ready = booting.ready(running, bot)
    assert (ready.state, ready.generation, ready.container_id) == (
        State.RUNNING,
        1,
        running.container_id,
    )
    assert Event.objects.count() == events_before
    assert health_failures(running.pipeline) == 0


@pytest.mark.django_db
def test_without_the_check_a_dead_container_goes_unnoticed(running, bot, fake_runtime) -> None:
    """A sandbox made a moment ago (a cold open) is not checked."""
    fake_runtime.kill(running.container_id)
    ready = booting.ready(running, bot, check_health=False)
    assert (ready.state, ready.generation, ready.health_failures) == (State.RUNNING, 1, 0)


@pytest.mark.django_db
def test_a_sandbox_in_the_background_is_booted_by_a_worker(
    pipeline, bot, fake_runtime, queued, django_capture_on_commit_callbacks
) -> None:
    row = create_row(pipeline, "group_1", {}, bot)
    with django_capture_on_commit_callbacks(execute=True):
        ready = booting.ready(row, bot, background=True)
        assert queued == []  # the worker must find the row committed
    assert ready.state == State.CREATING
    assert fake_runtime.containers == {}
    assert queued == [("sandboxes.boot", [str(row.pk), 1])]


@pytest.mark.django_db
def test_a_failed_check_in_the_background_queues_the_new_generation(
    running, bot, fake_runtime, queued, django_capture_on_commit_callbacks
) -> None:
    fake_runtime.kill(running.container_id)
    with django_capture_on_commit_callbacks(execute=True):
        ready = booting.ready(running, bot, background=True)
    assert (ready.state, ready.generation, ready.health_failures) == (State.CREATING, 2, 1)
    assert fake_runtime.containers == {}  # the dead one removed, the new one not made yet
    assert queued == [("sandboxes.boot", [str(running.pk), 2])]
    assert Event.objects.filter(sandbox=running, action="sandbox.health_failed").count() == 1


@pytest.mark.django_db
def test_a_sandbox_whose_container_was_lost_gets_it_again(running, bot, fake_runtime) -> None:
    fake_runtime.remove_container(running.container_id)
    containers.gone(running, RuntimeError("no such container"), bot)
    assert running.state == State.UNKNOWN
    ready = booting.ready(running, bot)
    assert (ready.state, ready.generation, ready.status_detail) == (State.RUNNING, 1, "")
    assert fake_runtime.inspect_container(ready.container_name).running
    assert ready.health_failures == 0
    assert Event.objects.filter(sandbox=running, action="sandbox.started").count() == 2


@pytest.mark.django_db
def test_a_check_another_process_already_acted_on_changes_nothing(
    running, bot, fake_runtime
) -> None:
    """Two opens find the dead container at once; one replaces it, the other's restart is
    refused and it hands out what the first made."""
    fake_runtime.kill(running.container_id)
    stale_copy = Sandbox.objects.select_related("pipeline").get(pk=running.pk)
    first = booting.ready(running, bot)
    second = booting.ready(stale_copy, bot)
    assert first.generation == second.generation == 2
    assert second.container_id == first.container_id
    assert Event.objects.filter(sandbox=running, action="sandbox.health_failed").count() == 1
    assert Sandbox.objects.get(pk=running.pk).health_failures == 1


@pytest.mark.django_db
def test_an_open_that_loses_the_restart_race_still_gets_a_running_sandbox(
    running, bot, fake_runtime
) -> None:
    fake_runtime.kill(running.container_id)
    stale_copy = Sandbox.objects.select_related("pipeline").get(pk=running.pk)
    # Another open found the dead container first and is between its restart and its start.
    lifecycle.move(running, lifecycle.RESTART, bot, reason="health check failed")
    ready = booting.ready(stale_copy, bot)
    assert (ready.state, ready.generation) == (State.RUNNING, 2)


@pytest.mark.django_db
def test_an_open_migrates_a_sandbox_started_without_the_agent(running, bot, fake_runtime) -> None:
    """A running sandbox made without the agent gets a new container with it, its workspace
    kept; the restart says why. One that runs the current agent is handed out as it is."""
    assert booting.ready(running, bot).generation == 1
    Sandbox.objects.filter(pk=running.pk).update(agent="")
    running.refresh_from_db()
    old_name, volume = running.container_name, running.volume_name
    ready = booting.ready(running, bot)
    assert (ready.state, ready.generation, ready.volume_name) == (State.RUNNING, 2, volume)
    assert ready.agent and ready.health_failures == 0
    [migrated] = Event.objects.filter(sandbox=running, action="sandbox.agent_migrated")
    assert migrated.detail == {"container": old_name}
    restarting = Event.objects.get(sandbox=running, action="sandbox.restarting")
    assert restarting.reason == "migrated to the current agent"


@pytest.mark.django_db
def test_no_sandbox_starts_without_the_agent_binary(
    pipeline, bot, fake_runtime, settings, tmp_path
) -> None:
    settings.BOXYARD_AGENT_BINARY = str(tmp_path / "missing")
    row = create_row(pipeline, "group_1", {}, bot)
    with pytest.raises(RuntimeUnavailable, match="bin/setup"):
        booting.start(row, bot)
    row.refresh_from_db()
    assert row.state == State.CREATING and not fake_runtime.containers
