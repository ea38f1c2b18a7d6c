"""The workspace disks' files tell nothing: a loop device's file is named in
/sys/block/loop*/loop/backing_file, which every sandbox may read, and a workspace's name is its
sandbox's id. Each disk's file has a random name; a disk named after its workspace, as disks
were, is renamed (attached or not) and keeps working."""

import re

import pytest

from sandboxes import services
from sandboxes.models import Sandbox
from tests.conftest import CHAT
from tests.security.conftest import run
from tests.security.test_limits import OTHER_CHAT, in_keeper, volume_device

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

RANDOM_FILE = re.compile(r"/images/[0-9a-f]{32}\.img$")


def backing_file(sandbox, bot, device: str) -> str:
    """The file of a loop device, as the sandbox reads it."""
    sys = f"/sys/block/{device.removeprefix('/dev/')}/loop/backing_file"
    return run(sandbox, bot, f"cat {sys}").stdout.strip()


def test_no_sandbox_learns_the_sandboxes_of_its_engine_from_the_loop_devices(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(workspace_mb=16)
    one = services.open_sandbox(pipeline, CHAT, bot).sandbox
    other = services.open_sandbox(pipeline, OTHER_CHAT, bot).sandbox
    everything = run(one, bot, "cat /sys/block/loop*/loop/backing_file 2>/dev/null; true").stdout
    for sandbox in (one, other):
        seen = backing_file(one, bot, volume_device(docker_engine, sandbox))
        assert seen and seen in everything  # the sandbox reads its file's name, and the other's
        assert RANDOM_FILE.search(seen), seen
    for sandbox in Sandbox.objects.all():
        assert sandbox.id.hex not in everything and str(sandbox.id) not in everything


def test_a_disk_named_after_its_workspace_is_renamed_and_keeps_working(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(workspace_mb=16, retention="persistent")
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo kept > note")
    name = sandbox.volume_name
    device = volume_device(docker_engine, sandbox)
    # As disks were made before: the file named after the workspace, attached and mounted.
    in_keeper(
        docker_engine,
        f'cd /disks && rm -f {name}.img && mv "$(readlink -f names/{name})" {name}.img',
    )
    in_keeper(docker_engine, f"rm /disks/names/{name}")
    assert backing_file(sandbox, bot, device).endswith(f"/{name}.img")
    # The keeper's next operation, whatever it is for, renames it.
    services.open_sandbox(pipeline, OTHER_CHAT, bot)
    seen = backing_file(sandbox, bot, device)
    assert RANDOM_FILE.search(seen) and sandbox.id.hex not in seen, seen
    assert run(sandbox, bot, "echo more >> note && cat note").stdout == "kept\nmore\n"
    # Stopped and started again: the same disk, found under its new name, and still its size.
    services.close_sandbox(sandbox, bot)
    again = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert run(again, bot, "cat note").stdout == "kept\nmore\n"
    assert volume_device(docker_engine, again) == device
    fill = run(again, bot, "dd if=/dev/zero of=fill bs=1M count=40", timeout_seconds=60)
    assert "No space left on device" in fill.stderr
    # The old name stays a second link to the same file, for a Boxyard of an earlier version.
    same = f'[ /disks/{name}.img -ef "$(readlink -f /disks/names/{name})" ] && echo same'
    assert in_keeper(docker_engine, same) == "same\n"
