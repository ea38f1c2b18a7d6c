"""Reconciliation against the real engine, and chaos: a process killed at every step of
creating and of stopping a sandbox, containers removed from outside. After one pass of the
reconciler: no orphan container, no row stuck in creating or stopping, no duplicate, and no
workspace lost."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from boxyard import chaos
from boxyard.actors import SYSTEM
from pipelines.models import Retention
from sandboxes import services
from sandboxes.models import Lease, Sandbox, State, StopReason
from sandboxes.runtime import LABEL_DEPLOYMENT, LABEL_GENERATION, LABEL_SANDBOX, ContainerSpec
from sandboxes.services import specs
from sandboxes.services.creating import create_row
from sandboxes.services.reconciling import reconcile
from tests.conftest import CHAT, DEPLOYMENT, database_url

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[3]


def ours(engine: Any) -> list[Any]:
    return engine.list_containers({LABEL_DEPLOYMENT: DEPLOYMENT})


def run(sandbox: Sandbox, bot: Any, cmd: str) -> Any:
    sandbox = Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk)
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), bot)


def assert_converged(engine: Any) -> None:
    """The invariants the reconciler promises, checked against both sides."""
    rows = {str(row.pk): row for row in Sandbox.objects.all()}
    assert not [row for row in rows.values() if row.state in (State.CREATING, State.STOPPING)]
    containers_by_sandbox: dict[str, list[Any]] = {}
    for info in ours(engine):
        containers_by_sandbox.setdefault(info.labels.get(LABEL_SANDBOX, ""), []).append(info)
    for sandbox_id, found in containers_by_sandbox.items():
        row = rows.get(sandbox_id)
        assert row is not None, f"orphan container {found[0].name}"
        assert len(found) == 1, f"duplicate containers for {sandbox_id}"
        assert row.state == State.RUNNING and found[0].running
        assert found[0].labels[LABEL_GENERATION] == str(row.generation)
        assert row.container_id == found[0].id
    for row in rows.values():
        if row.state == State.RUNNING:
            assert str(row.pk) in containers_by_sandbox, f"running row {row.pk} has no container"
    volumes = set(engine.list_volumes({LABEL_DEPLOYMENT: DEPLOYMENT}))
    for row in rows.values():
        if row.state != State.DESTROYED:
            assert row.volume_name in volumes, f"the workspace of {row.pk} was lost"
        else:
            assert row.volume_name not in volumes


def in_subprocess(code: str, crash_at: str) -> int:
    """Run `code` (Django set up, this test's database and deployment) in a new process that
    dies at the crash point; its exit status."""
    env = dict(os.environ)
    env.update(
        BOXYARD_CRASH_AT=crash_at,
        BOXYARD_DEPLOYMENT=DEPLOYMENT,
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        BOXYARD_DATA_DIR=str(settings.DATA_DIR),
    )
    script = "import django; django.setup()\n" + code
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode not in (0, 137):
        raise AssertionError(f"the subprocess failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.returncode


# --- the decision table, one case at a time ----------------------------------------------------


def test_a_container_without_a_row_is_removed(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    Sandbox.objects.filter(pk=sandbox.pk).delete()  # as if the row had never been committed
    done = reconcile(grace_seconds=0)
    assert done.containers_removed and ours(docker_engine) == []
    assert done.volumes_without_row == [sandbox.volume_name]  # kept: it may be someone's data
    assert sandbox.volume_name in docker_engine.list_volumes({LABEL_DEPLOYMENT: DEPLOYMENT})


def test_young_containers_are_left_alone_during_the_grace_period(
    pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    Sandbox.objects.filter(pk=sandbox.pk).delete()
    assert not reconcile(grace_seconds=3600).containers_removed
    assert len(ours(docker_engine)) == 1


def test_a_container_removed_from_outside_makes_its_sandbox_lost_not_its_workspace(
    pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo precious > data.txt")
    docker_engine.remove_container(sandbox.container_id)
    done = reconcile(grace_seconds=0)
    assert done.lost == [str(sandbox.pk)]
    sandbox.refresh_from_db()
    assert (sandbox.state, sandbox.stop_reason) == (State.STOPPED, StopReason.LOST)
    assert Lease.objects.get(sandbox=sandbox).holder == ""
    assert_converged(docker_engine)
    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert reopened.pk == sandbox.pk and run(reopened, bot, "cat data.txt").stdout == "precious\n"


def test_an_exited_container_is_replaced_on_the_next_open(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    docker_engine.stop_container(sandbox.container_id, timeout=0)
    reconcile(grace_seconds=0)
    assert_converged(docker_engine)
    assert Sandbox.objects.get(pk=sandbox.pk).stop_reason == StopReason.LOST
    assert services.open_sandbox(pipeline, CHAT, bot).sandbox.state == State.RUNNING


def test_a_stale_generation_is_removed(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    stale_spec = specs.build_spec(sandbox, {})
    stale = ContainerSpec(
        **{
            **stale_spec.__dict__,
            "name": stale_spec.name + "-old",
            "labels": {**stale_spec.labels, LABEL_GENERATION: "0"},
        }
    )
    docker_engine.ensure_container(stale)
    assert len(ours(docker_engine)) == 2
    done = reconcile(grace_seconds=0)
    assert done.containers_removed == [stale.name]
    assert_converged(docker_engine)


def test_an_unknown_sandbox_whose_container_runs_is_adopted(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    Sandbox.objects.filter(pk=sandbox.pk).update(state=State.UNKNOWN, container_id="")
    done = reconcile(grace_seconds=0)
    assert done.adopted == [str(sandbox.pk)]
    assert_converged(docker_engine)


def test_the_workspace_of_a_destroyed_sandbox_goes(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.close_sandbox(sandbox, bot, delete_workspace=False)
    Sandbox.objects.filter(pk=sandbox.pk).update(state=State.DESTROYED)  # its volume stayed
    done = reconcile(grace_seconds=0)
    assert done.volumes_removed == [sandbox.volume_name]
    assert_converged(docker_engine)


def test_a_second_pass_changes_nothing(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    docker_engine.remove_container(sandbox.container_id)
    assert reconcile(grace_seconds=0).changed()
    assert not reconcile(grace_seconds=0).changed()


# --- chaos: a process killed at each step -------------------------------------------------------


@pytest.mark.parametrize("crash_at", chaos.CREATE_POINTS)
def test_a_create_killed_at_any_step_is_finished_by_the_reconciler(
    pipeline, bot, docker_engine, crash_at
) -> None:
    code = (
        "from sandboxes import services\n"
        "from sandboxes.models import Pipeline\n"
        f"services.open_sandbox(Pipeline.objects.get(pk={pipeline.pk}), {CHAT!r}, services.SYSTEM)\n"
    )
    assert in_subprocess(code, crash_at) == 137
    sandbox = Sandbox.objects.get(pipeline=pipeline)
    assert sandbox.state == State.CREATING
    reconcile(grace_seconds=0)
    assert_converged(docker_engine)
    sandbox.refresh_from_db()
    assert sandbox.state == State.RUNNING
    assert run(sandbox, bot, "echo alive").stdout == "alive\n"


@pytest.mark.parametrize("crash_at", chaos.CREATE_POINTS[1:])
def test_a_restart_killed_at_any_step_keeps_the_workspace(
    make_pipeline, bot, docker_engine, crash_at
) -> None:
    """A persistent sandbox, stopped, started again by a process that dies on the way."""
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo precious > data.txt")
    services.close_sandbox(sandbox, bot)
    code = (
        "from sandboxes import services\n"
        "from sandboxes.models import Pipeline\n"
        f"services.open_sandbox(Pipeline.objects.get(pk={pipeline.pk}), {CHAT!r}, services.SYSTEM)\n"
    )
    assert in_subprocess(code, crash_at) == 137
    reconcile(grace_seconds=0)
    assert_converged(docker_engine)
    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert reopened.pk == sandbox.pk and run(reopened, bot, "cat data.txt").stdout == "precious\n"


@pytest.mark.parametrize("crash_at", chaos.STOP_POINTS)
@pytest.mark.parametrize("delete_workspace", [False, True], ids=["stop", "destroy"])
def test_a_stop_killed_at_any_step_is_finished_by_the_reconciler(
    make_pipeline, bot, docker_engine, crash_at, delete_workspace
) -> None:
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo precious > data.txt")
    code = (
        "from sandboxes import services\n"
        "from sandboxes.models import Sandbox\n"
        f"services.close_sandbox(Sandbox.objects.get(pk='{sandbox.pk}'), services.SYSTEM, "
        f"delete_workspace={delete_workspace})\n"
    )
    assert in_subprocess(code, crash_at) == 137
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.STOPPING
    reconcile(grace_seconds=0)
    assert_converged(docker_engine)
    sandbox.refresh_from_db()
    assert sandbox.state == (State.DESTROYED if delete_workspace else State.STOPPED)
    if not delete_workspace:
        reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
        assert run(reopened, bot, "cat data.txt").stdout == "precious\n"


def test_a_boot_task_lost_with_its_worker_is_booted_by_the_reconciler(
    pipeline, bot, docker_engine
) -> None:
    """An open in the background whose task was never run (the worker died with it)."""
    opened = services.open_sandbox(pipeline, CHAT, bot, background=True)
    assert opened.sandbox.state == State.CREATING
    assert reconcile(grace_seconds=0).booted == [str(opened.sandbox.pk)]
    assert_converged(docker_engine)


def test_many_interrupted_operations_at_once_converge_in_one_pass(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    keys = [{"launcher_type": "group", "launcher_id": str(n)} for n in range(6)]
    opened = [services.open_sandbox(pipeline, key, bot).sandbox for key in keys[:4]]
    docker_engine.remove_container(opened[0].container_id)  # removed from outside
    with transaction.atomic():  # a stop that stopped half-way
        locked = Sandbox.objects.locked().get(pk=opened[1].pk)
        services.closing.begin_stop(locked, SYSTEM, StopReason.ADMIN, delete_workspace=False)
    Sandbox.objects.filter(pk=opened[2].pk).delete()  # a row gone, its container left
    with transaction.atomic():  # a create that never got its container
        create_row(pipeline, "group_4", keys[4], bot)
    services.open_sandbox(pipeline, keys[5], bot, background=True)  # a boot task lost
    reconcile(grace_seconds=0)
    assert_converged(docker_engine)
    assert Sandbox.objects.filter(state=State.RUNNING).count() == 3  # opened[3] and the two booted
