"""An engine restart loses no workspace.

Restarting the machine's Docker Engine would stop every container on the machine, so this
runs on a second engine of the tests' own (`tests/engines.py`), and restarts it for real in
the middle of the test: its dockerd is stopped (stopping its containers with it) and a new one
started on the same data root. Everything Boxyard does against the engine goes to that one
meanwhile, through one runtime object that lives through the restart, as a Boxyard process
does.
"""

import pytest

from pipelines.models import Retention
from sandboxes import services
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services.reconciling import reconcile
from tests.conftest import CHAT
from tests.engines import on_second_engine, second_engine  # noqa: F401 - fixtures
from tests.sandboxes.services.test_reconciling import assert_converged

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def test_an_engine_restart_loses_no_workspace(
    make_pipeline,
    bot,
    on_second_engine,
) -> None:
    """A persistent sandbox's files are in its workspace, not in its container: the restart
    stops the container, the reconciler finds it lost, and the next open starts a new
    container on the same workspace, where the file still is."""
    engine = on_second_engine
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    request = services.clean_request(sandbox, cmd="echo precious > data.txt")
    wrote = services.run_exec(sandbox, request, bot)
    assert wrote.exit_code == 0, wrote.stderr

    engine.restart()

    container = engine.runtime.inspect_container(sandbox.container_id)
    assert container is not None and not container.running, "the restart stopped the container"
    reconciled = reconcile(grace_seconds=0)
    assert str(sandbox.pk) in reconciled.lost, reconciled
    lost = Sandbox.objects.get(pk=sandbox.pk)
    assert (lost.state, lost.stop_reason) == (State.STOPPED, StopReason.LOST)
    assert_converged(engine.runtime)

    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert reopened.pk == sandbox.pk and reopened.container_id != sandbox.container_id
    again = services.run_exec(reopened, services.clean_request(reopened, cmd="cat data.txt"), bot)
    assert again.stdout == "precious\n", again.stderr
    # The disk kept its loop device through the restart (not a second one beside it), and
    # destroying the sandbox leaves no device behind.
    assert len(engine.loop_devices()) == 1, engine.loop_devices()
    services.close_sandbox(reopened, bot, delete_workspace=True)
    assert engine.loop_devices() == []
