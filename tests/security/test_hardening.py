"""The hardened defaults, read back from the engine and proven from inside a sandbox."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from sandboxes import services
from sandboxes.runtime import ROOT
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def sh(sandbox, bot, cmd, timeout=30):
    request = services.clean_request(sandbox, cmd=cmd, timeout_seconds=timeout)
    return services.run_exec(sandbox, request, bot)


@pytest.fixture
def sandbox(pipeline, bot, docker_engine):
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def test_host_config_is_hardened(sandbox, docker_engine) -> None:
    data = docker_engine.api.inspect_container(sandbox.container_id)
    host = data["HostConfig"]
    # The agent, the container's main process, runs as root with just what it needs over the
    # sandbox user's processes; every command runs as the sandbox user, with nothing.
    assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == ["KILL", "SETGID", "SETUID"]
    assert data["Config"]["User"] == "0:0"
    # What it keeps of its commands' output in all: 32 MiB (a sixteenth of 1 GiB is more).
    assert data["Config"]["Cmd"] == [
        "/.boxyard/boxyard-agent", "serve", "--user", "10001:10001", "--output-bytes", "33554432"
    ]  # fmt: skip
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert not any("seccomp=unconfined" in opt for opt in host["SecurityOpt"])
    assert host["NetworkMode"] == "none"
    assert host["PidMode"] in ("", "private") and host["IpcMode"] == "private"
    assert host["Init"] is True
    assert host["PidsLimit"] == 256
    assert host["Memory"] == host["MemorySwap"] == 1024 * 1024 * 1024
    assert (host["CpuPeriod"], host["CpuQuota"]) == (10_000, 10_000)  # one CPU, in 10 ms slices
    assert host["CpuShares"] == 256  # a quarter of a host process's weight
    assert host["LogConfig"]["Config"]["max-size"] == "1m"
    mounts = data["Mounts"]
    by_target = {m["Destination"]: m for m in mounts}
    assert set(by_target) == {"/workspace", "/home/user", "/.boxyard"}
    # The E2B SDKs' home is the same workspace, writable as it is.
    assert by_target["/home/user"]["Name"] == by_target["/workspace"]["Name"]
    assert by_target["/home/user"]["RW"] is True
    # The agent's volume: read-only, and shared by every sandbox of the engine.
    assert by_target["/.boxyard"]["Type"] == "volume" and by_target["/.boxyard"]["RW"] is False
    assert not any("docker.sock" in (m.get("Source") or "") for m in mounts)
    assert "/tmp" in host["Tmpfs"]
    assert host["Tmpfs"]["/.boxyard-run"].endswith("mode=0711")  # the agent's, root's only
    # The workspace is a disk of its own, of the pipeline's size.
    volume = docker_engine.api.inspect_volume(by_target["/workspace"]["Name"])
    assert volume["Options"]["type"] == "ext4" and volume["Options"]["device"].startswith(
        "/dev/loop"
    )
    assert sandbox.workspace_limit_bytes == sandbox.pipeline.workspace_mb * 1024 * 1024


def test_the_disk_keeper_may_make_loop_devices_and_nothing_else(sandbox, docker_engine) -> None:
    from sandboxes.runtime.docker.disks import DISKS_VOLUME, KEEPER

    data = docker_engine.api.inspect_container(KEEPER)
    host = data["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == ["MKNOD", "SYS_ADMIN"]
    assert host["Privileged"] is False and host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True and "no-new-privileges:true" in host["SecurityOpt"]
    assert host["DeviceCgroupRules"] == ["b 7:* rwm"]
    assert [d["PathOnHost"] for d in host["Devices"]] == ["/dev/loop-control"]
    assert [m["Name"] for m in data["Mounts"]] == [DISKS_VOLUME]


def test_root_is_read_only_but_tmp_and_workspace_are_writable(sandbox, bot) -> None:
    etc = sh(sandbox, bot, "echo x > /etc/owned")
    assert etc.exit_code != 0 and "Read-only file system" in etc.stderr
    assert (
        sh(sandbox, bot, "echo x > /tmp/ok && echo x > /workspace/ok && echo fine").stdout
        == "fine\n"
    )


def test_no_network_but_loopback(sandbox, bot) -> None:
    interfaces = sh(sandbox, bot, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert interfaces.stdout.split() == ["lo"]
    routes = sh(sandbox, bot, "tail -n +2 /proc/net/route")
    assert routes.stdout == ""


def test_pids_limit_stops_a_fork_bomb(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(pids_limit=64)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    limit = sh(
        sandbox, bot, "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"
    )
    assert limit.stdout.strip() == "64"
    sh(sandbox, bot, "export KEPT=yes")
    bomb = sh(
        sandbox,
        bot,
        "i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; echo spawned",
        timeout=10,
    )
    # The loop never got to its end: a fork failed, and the shell's last words say so.
    detail = f"exit {bomb.exit_code}, stdout {bomb.stdout!r}, stderr {bomb.stderr!r}, error {bomb.error!r}"
    assert "spawned" not in bomb.stdout and bomb.exit_code != 0, detail
    assert "can't fork" in bomb.stderr or "Resource temporarily unavailable" in bomb.stderr, detail
    # The limit held, and the agent lived through it (its threads count against the same
    # limit). busybox sh gives up when it cannot fork, so the session may have been started
    # again: it still knows what it was told before.
    after = sh(sandbox, bot, "echo alive $KEPT")
    assert after.stdout == "alive yes\n"


def test_memory_limit_kills_with_137(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(memory_mb=64)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    limit = sh(
        sandbox,
        bot,
        "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
    )
    # An engine that does not enforce it fails here, saying so: this is not a skip.
    assert limit.stdout.strip() not in ("", "max", "9223372036854771712"), (
        f"this engine does not enforce memory limits (the cgroup says {limit.stdout.strip()!r})"
    )
    hog = sh(sandbox, bot, ["sh", "-c", "x=a; while :; do x=$x$x; done"])
    assert hog.exit_code == 137
    assert sh(sandbox, bot, "echo alive").stdout == "alive\n"


@pytest.mark.django_db(transaction=True)  # starts from several threads at once
def test_the_out_of_memory_killer_takes_a_command_before_the_agent(
    sandbox, bot, docker_engine
) -> None:
    score = "cat /proc/self/oom_score_adj"
    assert sh(sandbox, bot, score).stdout == "1000\n"  # in the session's shell
    fresh = services.clean_request(sandbox, cmd=score, one_shot=True)
    assert services.run_exec(sandbox, fresh, bot).stdout == "1000\n"
    # Many starts at once: each one's child gets the command's score, the agent keeps its own.
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda _: services.run_exec(sandbox, fresh, bot).stdout, range(24)))
    assert scores == ["1000\n"] * 24
    agent = docker_engine.exec(
        sandbox.container_id,
        [
            "sh",
            "-c",
            "for d in /proc/[0-9]*; do grep -q '^PPid:[[:space:]]*1$' $d/status 2>/dev/null"
            " && cat $d/comm $d/oom_score_adj; done",
        ],
        user=ROOT,
    )
    name, own = agent.stdout.decode().split()
    assert name == "boxyard-agent" and int(own) < 1000


def test_skills_are_mounted_read_only_unless_rw(
    make_pipeline, bot, docker_engine, settings, tmp_path
) -> None:
    from pipelines.models import Skill

    settings.BOXYARD_SKILL_ROOTS = [str(tmp_path)]
    for name in ("web-search", "scratchpad"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(f"# {name}\n")
        (tmp_path / name).chmod(0o777)
    pipeline = make_pipeline()
    Skill.objects.create(
        pipeline=pipeline, name="web-search", host_path=str(tmp_path / "web-search")
    )
    Skill.objects.create(
        pipeline=pipeline, name="scratchpad", host_path=str(tmp_path / "scratchpad"), mode="rw"
    )
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert sh(sandbox, bot, "cat .skills/web-search/README.md").stdout == "# web-search\n"
    ro = sh(sandbox, bot, "touch .skills/web-search/x")
    assert ro.exit_code != 0 and "Read-only" in ro.stderr
    assert sh(sandbox, bot, "touch .skills/scratchpad/notes && echo ok").stdout == "ok\n"
    assert (tmp_path / "scratchpad" / "notes").exists()
    with pytest.raises(Exception, match="read-only"):
        services.write_file(sandbox, ".skills/web-search/evil.sh", b"x", bot)
