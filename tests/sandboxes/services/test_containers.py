"""A sandbox's container on the real engine, one step at a time: made for the row's
generation and started (once, however often asked), refused for an image off the allowlist,
removed with or without its workspace, and found gone or dead under a running sandbox."""

from typing import Any

import pytest
from django.db import transaction

from boxyard.errors import ImageNotAllowed, InvalidState, RuntimeFailure
from sandboxes import lifecycle
from sandboxes.guard import take_lease
from sandboxes.models import Event, Lease, Sandbox, State
from sandboxes.runtime import (
    LABEL_AGENT,
    LABEL_DEPLOYMENT,
    LABEL_GENERATION,
    LABEL_PIPELINE,
    LABEL_SANDBOX,
)
from sandboxes.runtime.agent import agent_build
from sandboxes.services import containers
from sandboxes.services.creating import create_row
from tests.conftest import DEPLOYMENT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

MIB = 1024 * 1024
OURS = {LABEL_DEPLOYMENT: DEPLOYMENT}


@pytest.fixture
def small(make_pipeline: Any) -> Any:
    """A pipeline with a small workspace disk: quicker to make."""
    return make_pipeline(workspace_mb=32)


@pytest.fixture
def row(small: Any, bot: Any, docker_engine: Any) -> Sandbox:
    return create_row(small, "group_1", {}, bot)


@pytest.fixture
def running(row: Sandbox, bot: Any) -> Sandbox:
    return containers.provision(row, bot)


def started(sandbox: Sandbox) -> list[Event]:
    return list(Event.objects.filter(sandbox=sandbox, action="sandbox.started"))


def test_provision_starts_the_container_of_the_rows_generation(
    row, small, bot, docker_engine
) -> None:
    sandbox = containers.provision(row, bot)

    info = docker_engine.inspect_container(row.container_name)
    assert info is not None and info.running
    assert sandbox.state == State.RUNNING
    assert (sandbox.container_id, sandbox.container_name) == (info.id, row.container_name)
    assert info.labels[LABEL_SANDBOX] == str(row.pk)
    assert info.labels[LABEL_PIPELINE] == small.slug
    assert info.labels[LABEL_GENERATION] == "1"
    assert info.labels[LABEL_DEPLOYMENT] == DEPLOYMENT
    build = agent_build()
    assert build is not None, "the agent binary is missing: run bin/setup"
    assert sandbox.agent == info.labels[LABEL_AGENT] == build.digest
    assert sandbox.workspace_limit_bytes == 32 * MIB
    assert sandbox.started_at is not None and sandbox.idle_deadline is not None
    [event] = started(sandbox)
    assert event.actor == "bot:support-bot"
    assert event.detail == {"generation": 1, "container": row.container_name}
    # The row as stored says the same.
    stored = Sandbox.objects.get(pk=row.pk)
    assert (stored.container_id, stored.agent, stored.workspace_limit_bytes) == (
        info.id,
        build.digest,
        32 * MIB,
    )


def test_provisioning_again_finds_the_same_container(running, bot, docker_engine) -> None:
    """Every opener of a sandbox may provision it; only the first start counts."""
    again = containers.provision(Sandbox.objects.select_related("pipeline").get(pk=running.pk))
    assert again.state == State.RUNNING and again.container_id == running.container_id
    assert len(docker_engine.list_containers({LABEL_SANDBOX: str(running.pk)})) == 1
    assert len(started(running)) == 1


def test_an_image_off_the_allowlist_puts_the_row_in_error(
    row, bot, settings, docker_engine
) -> None:
    settings.BOXYARD_IMAGE_ALLOWLIST = ["boxyard/default:*"]  # no longer the test image
    with pytest.raises(ImageNotAllowed, match="allowlist"):
        containers.provision(row, bot)
    stored = Sandbox.objects.get(pk=row.pk)
    assert (stored.state, stored.stop_reason) == (State.ERROR, "error")
    assert row.image in stored.status_detail and "allowlist" in stored.status_detail
    assert docker_engine.inspect_container(row.container_name) is None
    assert docker_engine.list_containers({LABEL_SANDBOX: str(row.pk)}) == []
    error = Event.objects.get(sandbox=row, action="sandbox.error")
    assert error.reason.startswith("image: ")


def test_remove_keeps_the_workspace_unless_asked(running, docker_engine) -> None:
    containers.remove(running, delete_workspace=False)
    assert docker_engine.inspect_container(running.container_id) is None
    assert running.volume_name in docker_engine.list_volumes(OURS)

    containers.remove(running, delete_workspace=True)  # the container is gone already: fine
    assert running.volume_name not in docker_engine.list_volumes(OURS)


def test_remove_by_name_when_no_container_was_recorded(row, docker_engine, bot) -> None:
    """A create that died before recording its container left one under the row's name."""
    made = containers.provision(Sandbox.objects.select_related("pipeline").get(pk=row.pk), bot)
    assert row.container_id == ""  # this copy was read before the start was recorded
    containers.remove(row, delete_workspace=True)
    assert docker_engine.inspect_container(made.container_id) is None
    assert row.volume_name not in docker_engine.list_volumes(OURS)


def test_remove_replaced_takes_only_the_old_generations_container(
    running, bot, docker_engine
) -> None:
    old = running.container_id
    lifecycle.move(running, lifecycle.RESTART, bot, reason="again")
    containers.provision(running, bot)
    containers.remove_replaced(old, None)
    containers.remove_replaced("", None)  # nothing to remove: nothing asked of the engine
    assert docker_engine.inspect_container(old) is None
    [left] = docker_engine.list_containers({LABEL_SANDBOX: str(running.pk)})
    assert (left.id, left.labels[LABEL_GENERATION]) == (running.container_id, "2")


def test_a_container_gone_under_a_running_sandbox(running, bot, docker_engine) -> None:
    docker_engine.remove_container(running.container_id)
    error = containers.gone(running, RuntimeFailure("no such container"), bot)
    assert isinstance(error, InvalidState) and error.extra["state"] == State.UNKNOWN
    assert "open the sandbox again" in error.message
    stored = Sandbox.objects.get(pk=running.pk)
    assert (stored.state, stored.status_detail) == (State.UNKNOWN, "no such container")
    assert running.volume_name in docker_engine.list_volumes(OURS)
    lost = Event.objects.get(sandbox=running, action="sandbox.container_lost")
    assert lost.reason == "no such container"


def test_word_of_an_older_container_changes_nothing(running, bot) -> None:
    with transaction.atomic():
        take_lease(running, "agent-a", bot)
    assert not containers.mark_lost(running, container_id="an-older-container")
    stored = Sandbox.objects.select_related("lease").get(pk=running.pk)
    assert (stored.state, stored.container_id) == (State.RUNNING, running.container_id)
    assert stored.lease.holder == "agent-a"
    assert not Event.objects.filter(sandbox=running, action="sandbox.stopped").exists()


def test_a_dead_container_stops_its_sandbox_as_lost(running, bot, docker_engine) -> None:
    with transaction.atomic():
        take_lease(running, "agent-a", bot)
    docker_engine.stop_container(running.container_id, timeout=0)
    assert containers.mark_lost(running, container_id=running.container_id, exit_code=137)
    stored = Sandbox.objects.get(pk=running.pk)
    assert (stored.state, stored.stop_reason, stored.container_id) == (State.STOPPED, "lost", "")
    assert Lease.objects.get(sandbox=running).holder == ""
    stopped = Event.objects.get(sandbox=running, action="sandbox.stopped")
    assert (stopped.actor, stopped.reason, stopped.detail) == (
        "system:boxyard",
        "lost",
        {"exit_code": 137},
    )
    assert not containers.mark_lost(running, container_id=running.container_id)  # once only
