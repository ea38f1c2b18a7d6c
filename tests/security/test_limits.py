"""Limits that hold: the workspace's disk, /tmp, memory and output, each driven past its limit
from inside the sandbox while a neighbour keeps answering."""

import shutil

import pytest

from boxyard.errors import WorkspaceFull
from sandboxes import services
from sandboxes.models import ExecState
from sandboxes.runtime import ROOT
from sandboxes.runtime.docker.disks import KEEPER
from tests.conftest import CHAT, wait_for
from tests.security.conftest import leftovers, run

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

MIB = 1024 * 1024
OTHER_CHAT = {"launcher_type": "group", "launcher_id": "other", "sender_id": "2"}


def host_free_bytes(engine) -> int:
    """Free space where the engine keeps its volumes (the disks' files among them)."""
    return shutil.disk_usage(engine.api.info()["DockerRootDir"]).free


def volume_device(engine, sandbox) -> str:
    return engine.api.inspect_volume(sandbox.volume_name)["Options"]["device"]


def in_keeper(engine, command: str) -> str:
    created = engine.api.exec_create(KEEPER, ["sh", "-c", command], user=ROOT)
    return engine.api.exec_start(created["Id"]).decode()


def test_workspace_fill_stops_at_the_quota(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked(workspace_mb=32)
    free_before = host_free_bytes(docker_engine)
    fill = run(
        sandbox, bot, "dd if=/dev/zero of=/workspace/fill bs=1M count=200", timeout_seconds=60
    )
    assert fill.exit_code != 0 and "No space left on device" in fill.stderr, fill.stderr
    size = int(run(sandbox, bot, "stat -c %s /workspace/fill").stdout)
    assert size <= 32 * MIB
    # The host gave the workspace no more than its quota (with some room for the host's own
    # writes meanwhile; without a quota it would have lost 200 MiB).
    assert free_before - host_free_bytes(docker_engine) < 32 * MIB + 16 * MIB
    neighbour.answers()
    # Through the API, the same limit is a 507 naming it, and nothing is left behind.
    run(sandbox, bot, "rm -f /workspace/fill")
    with pytest.raises(WorkspaceFull):
        services.write_file(sandbox, "big.bin", b"\0" * (40 * MIB), bot)
    assert run(sandbox, bot, "ls -A /workspace").stdout == ""
    usage = services.workspace_usage(services.open_sandbox(sandbox.pipeline, CHAT, bot).sandbox)
    assert usage.enforced and usage.limit_bytes == 32 * MIB
    assert usage.used_bytes is not None and usage.used_bytes < 8 * MIB


def test_quota_survives_restart_stop_start_and_a_lost_loop_device(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(workspace_mb=32, retention="persistent")
    first = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(first, bot, "echo mine > owner")
    device = volume_device(docker_engine, first)
    first = services.restart_sandbox(first, bot)
    first = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert run(first, bot, "cat owner").stdout == "mine\n"
    # Stopped (its container goes, its workspace stays), then its loop device is lost, as
    # every loop device is when the engine's host restarts; another workspace takes it.
    services.close_sandbox(first, bot)
    in_keeper(docker_engine, f"losetup -d {device}")
    other = services.open_sandbox(pipeline, OTHER_CHAT, bot).sandbox
    run(other, bot, "echo theirs > owner")
    again = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert run(again, bot, "cat owner").stdout == "mine\n"
    assert run(other, bot, "cat owner").stdout == "theirs\n"
    fill = run(again, bot, "dd if=/dev/zero of=fill bs=1M count=100", timeout_seconds=60)
    assert "No space left on device" in fill.stderr


def test_a_larger_quota_grows_the_disk_when_it_starts_again(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(workspace_mb=32, retention="persistent")
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo kept > note")
    services.close_sandbox(sandbox, bot)
    pipeline.workspace_mb = 64
    pipeline.save()
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert run(sandbox, bot, "cat note").stdout == "kept\n"
    assert sandbox.workspace_limit_bytes == 64 * MIB
    wrote = run(
        sandbox, bot, "dd if=/dev/zero of=fill bs=1M count=48 && echo fits", timeout_seconds=60
    )
    assert wrote.stdout.endswith("fits\n"), wrote.stderr
    # A smaller quota cannot shrink a disk that holds files: it applies to new workspaces.
    services.close_sandbox(sandbox, bot)
    pipeline.workspace_mb = 16
    pipeline.save()
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert sandbox.workspace_limit_bytes == 64 * MIB
    assert (
        services.open_sandbox(pipeline, OTHER_CHAT, bot).sandbox.workspace_limit_bytes == 16 * MIB
    )


def test_the_api_shows_the_workspaces_size_and_use(attacked, bot, docker_engine) -> None:
    from django.test import Client

    from pipelines.models import PipelineToken

    sandbox = attacked(workspace_mb=32)
    run(sandbox, bot, "dd if=/dev/zero of=four bs=1M count=4")
    _, token = PipelineToken.issue(sandbox.pipeline, name="tests")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}", SERVER_NAME="localhost")
    workspace = client.get(f"/api/v1/sandboxes/{sandbox.pk}").json()["workspace"]
    assert workspace["enforced"] is True and workspace["limit_bytes"] == 32 * MIB
    assert 4 * MIB <= workspace["used_bytes"] < 12 * MIB


def test_workspaces_made_before_disks_keep_working_without_a_limit(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(workspace_mb=32, retention="persistent")
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.close_sandbox(sandbox, bot)
    # What an install of before made: a plain volume of the local driver, owned by the user.
    docker_engine.remove_workspace(sandbox.volume_name)
    docker_engine.api.create_volume(
        sandbox.volume_name,
        labels={"io.boxyard.managed": "1", "io.boxyard.deployment": sandbox_deployment()},
    )
    helper = docker_engine.api.create_container(
        "boxyard/busybox:1",
        ["sh", "-c", "echo old > /w/old && chown -R 10001:10001 /w"],
        user=ROOT,
        host_config=docker_engine.api.create_host_config(binds=[f"{sandbox.volume_name}:/w"]),
    )
    docker_engine.api.start(helper["Id"])
    docker_engine.api.wait(helper["Id"])
    docker_engine.api.remove_container(helper["Id"])
    again = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert run(again, bot, "cat old").stdout == "old\n"
    assert again.workspace_limit_bytes is None
    assert not services.workspace_usage(again).enforced


def sandbox_deployment() -> str:
    from django.conf import settings

    return settings.BOXYARD_DEPLOYMENT


def test_tmp_fill_stops_at_its_size(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked(tmp_mb=16)
    fill = run(sandbox, bot, "dd if=/dev/zero of=/tmp/fill bs=1M count=100", timeout_seconds=60)
    assert fill.exit_code != 0 and "No space left on device" in fill.stderr
    assert int(run(sandbox, bot, "stat -c %s /tmp/fill").stdout) <= 16 * MIB
    neighbour.answers()


def test_memory_bomb_is_killed_and_flagged(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked(memory_mb=64)
    for fresh in (False, True):
        hog = run(sandbox, bot, ["sh", "-c", "x=a; while :; do x=$x$x; done"], one_shot=fresh)
        assert (hog.exit_code, hog.oom_killed) == (137, True), (hog.exit_code, hog.error)
        assert "out of memory" in hog.error
    # A kill of Boxyard's own is not taken for the kernel's.
    spin = run(sandbox, bot, "while :; do :; done", timeout_seconds=1)
    assert spin.state == ExecState.TIMED_OUT and not spin.oom_killed
    neighbour.answers()
    assert run(sandbox, bot, "echo alive").stdout == "alive\n"


def test_compute_mode_says_oom_killed(make_pipeline, bot, docker_engine) -> None:
    from sandboxes.services.compute import run_code

    pipeline = make_pipeline(memory_mb=64)
    result = run_code(pipeline, bot, language="sh", code="x=a; while :; do x=$x$x; done")
    assert (result.exec.exit_code, result.exec.oom_killed, result.ok) == (137, True, False)


def test_output_flood_is_cut_and_harms_nobody(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked()
    flood = run(
        sandbox, bot, "head -c 200000000 /dev/zero | tr '\\0' a; echo done >&2", timeout_seconds=120
    )
    assert flood.state == ExecState.COMPLETED and flood.exit_code == 0
    assert flood.stdout_bytes == 200_000_000 and flood.stdout_truncated
    assert len(flood.stdout) == sandbox.pipeline.output_limit_bytes
    assert flood.stderr == "done\n"
    assert leftovers(docker_engine, sandbox) == []
    neighbour.answers()


def test_the_workspace_is_the_sandbox_users_whatever_the_image(
    make_pipeline, bot, docker_engine, settings
) -> None:
    """An image whose /workspace is root's (and says nothing of it) still gives the sandbox
    user a workspace of its own: the disk is made so."""
    api = docker_engine.api
    helper = api.create_container(
        settings.BOXYARD_TEST_IMAGE,
        ["sh", "-c", "chown 0:0 /workspace && chmod 755 /workspace"],
        user=ROOT,
    )
    api.start(helper["Id"])
    api.wait(helper["Id"])
    reference = "boxyard-test/root-workspace:1"
    api.commit(
        helper["Id"],
        repository="boxyard-test/root-workspace",
        tag="1",
        changes=["LABEL io.boxyard.workspace-uid="],
    )
    api.remove_container(helper["Id"])
    settings.BOXYARD_IMAGE_ALLOWLIST = [*settings.BOXYARD_IMAGE_ALLOWLIST, reference]
    try:
        sandbox = services.open_sandbox(make_pipeline(image=reference), CHAT, bot).sandbox
        seen = run(sandbox, bot, "stat -c %u /workspace; touch /workspace/mine && echo ok")
        assert seen.stdout == "10001\nok\n", seen.stderr
    finally:
        api.remove_image(reference, force=True)  # its container goes with the test's others


def test_the_reconciler_deletes_a_disk_whose_volume_was_removed_outside(
    attacked, bot, docker_engine, monkeypatch
) -> None:
    from sandboxes.services import reconciling
    from sandboxes.services.reconciling import reconcile

    # A disk a second old counts (not one being made, a moment before its volume).
    monkeypatch.setattr(reconciling, "DISK_GRACE_SECONDS", 1.0)

    sandbox = attacked(workspace_mb=16)
    services.close_sandbox(sandbox, bot)  # its container goes, its workspace stays
    image = in_keeper(docker_engine, f"readlink -f /disks/names/{sandbox.volume_name}").strip()
    assert image in in_keeper(docker_engine, "ls /disks/images/*.img")
    docker_engine.api.remove_volume(sandbox.volume_name, force=True)  # not through Boxyard
    wait_for(lambda: sandbox.volume_name in reconcile(grace_seconds=0).disks_removed, 10)
    assert image not in in_keeper(docker_engine, "ls /disks/images/*.img 2>/dev/null; true")
    assert sandbox.volume_name not in in_keeper(docker_engine, "ls /disks/names")
    assert sandbox.volume_name not in in_keeper(docker_engine, "losetup -a")


def test_cpu_is_held_to_the_pipelines_share(attacked, bot, docker_engine, neighbour) -> None:
    from tests.security.conftest import cpu_share

    sandbox = attacked(cpus=0.5)
    spin = run(
        sandbox,
        bot,
        "(while :; do :; done) & (while :; do :; done) & wait",
        background=True,
        timeout_seconds=30,
    )
    share = cpu_share(docker_engine, sandbox, 2.0)
    assert 0.3 < share < 0.6, f"two spinners used {share:.2f} of a CPU under a limit of 0.5"
    neighbour.answers()
    services.kill_exec(spin, bot)
