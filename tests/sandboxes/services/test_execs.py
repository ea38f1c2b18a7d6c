"""Foreground exec against the real engine."""

import time

import pytest

from boxyard.errors import (
    InvalidInput,
    InvalidState,
    LeaseBusy,
    RuntimeUnavailable,
    StaleEpoch,
    TakenOver,
)
from sandboxes import services
from sandboxes.models import Event, Exec, ExecState, Sandbox
from sandboxes.runtime import answers
from sandboxes.runtime.agent import channel
from sandboxes.runtime.port import PROTOCOL, port_of
from tests.conftest import CHAT, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture
def sandbox(pipeline, bot, docker_engine):
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def run(sandbox, bot, cmd, **kwargs):
    holder = kwargs.pop("holder", None)
    epoch = kwargs.pop("epoch", None)
    request = services.clean_request(sandbox, cmd=cmd, **kwargs)
    return services.run_exec(sandbox, request, bot, holder=holder, epoch=epoch)


def test_argv_and_shell_string(sandbox, bot) -> None:
    argv = run(sandbox, bot, ["echo", "two  spaces", "$HOME"])
    assert (argv.exit_code, argv.stdout) == (0, "two  spaces $HOME\n")
    shell = run(sandbox, bot, "echo out; echo err >&2; exit 3")
    assert (shell.exit_code, shell.stdout, shell.stderr) == (3, "out\n", "err\n")
    assert shell.state == ExecState.COMPLETED and shell.duration_ms >= 0


def test_cwd_defaults_to_workspace_and_can_be_set(sandbox, bot) -> None:
    assert run(sandbox, bot, "pwd").stdout == "/workspace\n"
    run(sandbox, bot, ["mkdir", "-p", "src/pkg"])
    assert run(sandbox, bot, "pwd", cwd="src/pkg").stdout == "/workspace/src/pkg\n"
    assert run(sandbox, bot, "pwd", cwd="/tmp").stdout == "/tmp\n"


def test_missing_cwd_is_a_clear_error(sandbox, bot) -> None:
    with pytest.raises(InvalidInput, match="cwd"):
        run(sandbox, bot, "pwd", cwd="nowhere")


def test_env_reaches_the_command(sandbox, bot) -> None:
    result = run(sandbox, bot, 'echo "$GREETING $HOME"', env={"GREETING": "hello"})
    assert result.stdout == "hello /workspace\n"
    with pytest.raises(InvalidInput, match="env"):
        run(sandbox, bot, "true", env={"BAD-NAME": "x"})


# Where a command runs: in the default session, fresh through the agent, or fresh in a new
# engine exec (compute mode). The last two must not be told apart by what the command sees.
WAYS = {"in the session": {}, "fresh": {"one_shot": True}}


@pytest.mark.parametrize("way", WAYS)
def test_timeout_kills_the_whole_process_tree(sandbox, bot, way) -> None:
    started = time.monotonic()
    result = run(
        sandbox,
        bot,
        "sleep 300 & sleep 301 & (sleep 302; echo never) & (setsid sleep 303 &); wait",
        timeout_seconds=1,
        **WAYS[way],
    )
    assert time.monotonic() - started < 10
    assert result.state == ExecState.TIMED_OUT and result.exit_code == 137
    assert "timed out" in result.error and result.stderr == ""
    leftovers = run(sandbox, bot, "ps -o args | grep 'sleep 30[0-3]' | grep -v grep || true")
    assert leftovers.stdout == ""


@pytest.mark.parametrize("way", ["fresh"])
def test_a_fresh_command_runs_outside_any_session(make_pipeline, bot, docker_engine, way) -> None:
    pipeline = make_pipeline(env={"FROM_PIPELINE": "p", "OVERRIDDEN": "p"})
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "cd /tmp; export IN_SESSION=yes; f() { :; }")
    fresh = WAYS[way]
    seen = run(
        sandbox,
        bot,
        'pwd; echo "[$IN_SESSION] $FROM_PIPELINE $OVERRIDDEN $HOME"; type f >/dev/null 2>&1 || echo no f',
        env={"OVERRIDDEN": "request"},
        **fresh,
    )
    assert seen.stdout == "/workspace\n[] p request /workspace\nno f\n"
    assert run(sandbox, bot, ["pwd"], cwd="/tmp", **fresh).stdout == "/tmp\n"
    assert run(sandbox, bot, "exit 7", **fresh).exit_code == 7
    missing = run(sandbox, bot, ["no-such-program"], **fresh)
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr
    with pytest.raises(InvalidInput, match="cwd"):
        run(sandbox, bot, "pwd", cwd="nowhere", **fresh)
    assert run(sandbox, bot, "pwd").stdout == "/tmp\n"  # the session is as it was


def test_a_fresh_command_is_started_by_the_agent(sandbox, bot) -> None:
    """Not a new engine exec: the agent that serves the sessions (the container's main
    process) starts it, at the cost of a message on its open channel."""
    parent = "tr '\\0' ' ' </proc/$PPID/cmdline"
    assert run(sandbox, bot, parent, one_shot=True).stdout.split(" ")[:2] == [
        "/.boxyard/boxyard-agent",
        "serve",
    ]


def test_output_is_capped_with_a_truncated_flag(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(output_limit_bytes=1024)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    result = run(sandbox, bot, "head -c 100000 /dev/zero | tr '\\0' a; echo tail >&2")
    assert len(result.stdout) == 1024 and result.stdout_truncated
    assert result.stdout_bytes == 100000
    assert result.stderr == "tail\n" and not result.stderr_truncated
    assert result.truncated


def test_every_exec_is_recorded(sandbox, bot) -> None:
    run(sandbox, bot, ["true"])
    run(sandbox, bot, "exit 7")
    records = list(Exec.objects.filter(sandbox=sandbox).order_by("started_at"))
    assert [(r.command, r.exit_code, r.actor) for r in records] == [
        (["true"], 0, "bot:support-bot"),
        ("exit 7", 7, "bot:support-bot"),
    ]
    assert all(r.finished_at and r.holder == "group_123456" and r.epoch == 1 for r in records)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cmd": []}, "cmd"),
        ({"cmd": ""}, "cmd"),
        ({"cmd": [""]}, "cmd"),
        ({"cmd": ["echo", "a\x00b"]}, "cmd"),
        ({"cmd": "true", "timeout_seconds": 0}, "timeout_seconds"),
        ({"cmd": "true", "timeout_seconds": 10**6}, "timeout_seconds"),
        ({"cmd": "true", "session": "../x"}, "session"),
        ({"cmd": "true", "cwd": "a\x00b"}, "cwd"),
        ({"cmd": "true", "env": {"BAD-NAME": "x"}}, "env"),
        ({"cmd": "true", "env": {"A": "a\x00b"}}, "env.A"),
    ],
)
def test_bad_requests_name_the_field_and_run_nothing(sandbox, kwargs, field) -> None:
    with pytest.raises(InvalidInput) as caught:
        services.clean_request(sandbox, **kwargs)
    assert caught.value.field == field
    assert not Exec.objects.exists()


def test_a_fenced_off_holder_never_reaches_the_container(sandbox, bot, alice_actor) -> None:
    services.takeover_lease(sandbox, alice_actor, holder="admin:alice")
    with pytest.raises(TakenOver):
        run(sandbox, bot, "touch /workspace/should-not-exist")
    with pytest.raises(LeaseBusy):
        run(sandbox, bot, "touch /workspace/should-not-exist", holder="other-bot")
    with pytest.raises(StaleEpoch):
        run(sandbox, bot, "true", holder="admin:alice", epoch=1)
    assert run(sandbox, alice_actor, "ls /workspace", holder="admin:alice", epoch=2).stdout == ""
    assert Exec.objects.count() == 1


def test_exec_in_a_stopped_sandbox_is_refused_saying_why(sandbox, bot) -> None:
    services.close_sandbox(sandbox, bot)
    with pytest.raises(InvalidState, match="stopped"):
        run(sandbox, bot, "true")


def test_a_container_removed_from_outside_is_detected_and_recreated(
    sandbox, bot, pipeline, docker_engine
) -> None:
    services.write_file(sandbox, "keep.txt", b"still here", bot)
    docker_engine.remove_container(sandbox.container_id)
    with pytest.raises(InvalidState, match="gone"):
        run(sandbox, bot, "true")
    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert reopened.pk == sandbox.pk
    assert run(reopened, bot, "cat keep.txt").stdout == "still here"


def test_a_sandbox_started_without_the_agent_is_migrated_at_its_first_exec(sandbox, bot) -> None:
    """A sandbox whose row says it runs without the agent (made before the agent was
    required) gets a new container with the current agent at its first command, its
    workspace kept; the restart is an event."""
    run(sandbox, bot, "echo kept > mark.txt")
    old_container = sandbox.container_id
    Sandbox.objects.filter(pk=sandbox.pk).update(agent="")
    sandbox.refresh_from_db()
    assert run(sandbox, bot, "cat mark.txt").stdout == "kept\n"
    sandbox.refresh_from_db()
    assert sandbox.agent and sandbox.container_id != old_container
    assert Event.objects.filter(sandbox=sandbox, action="sandbox.agent_migrated").count() == 1


def test_an_agent_older_than_the_protocol_is_migrated(sandbox, bot) -> None:
    run(sandbox, bot, "true")  # the channel is open
    old_container = sandbox.container_id
    channel(sandbox).version = PROTOCOL - 1  # as an agent of before answers its ping
    assert run(sandbox, bot, "echo new").stdout == "new\n"
    sandbox.refresh_from_db()
    assert sandbox.container_id != old_container
    assert channel(sandbox).version == PROTOCOL
    assert Event.objects.filter(sandbox=sandbox, action="sandbox.agent_migrated").count() == 1


def test_without_the_agent_binary_no_sandbox_starts(
    pipeline, bot, docker_engine, settings, tmp_path
) -> None:
    """The agent is required: a Boxyard without its binary refuses to start a sandbox,
    saying how to get it, rather than starting one that cannot run commands."""
    settings.BOXYARD_AGENT_BINARY = str(tmp_path / "missing")
    with pytest.raises(RuntimeUnavailable, match="bin/setup"):
        services.open_sandbox(pipeline, CHAT, bot)


def test_what_the_agent_answers_is_checked_before_use() -> None:
    """The agent runs inside the sandbox, where the sandbox's own code could replace it:
    junk in its answers reads as empty, never as an error of the server."""
    junk = [
        {"seq": "1", "stream": "evil", "data": "%%%"},
        {"seq": 2, "stream": "stderr", "data": "aGk="},
        "not a chunk",
        {"seq": -5, "data": 7},
    ]
    assert answers.chunks(junk) == [
        {"seq": 0, "stream": "stdout", "text": ""},
        {"seq": 2, "stream": "stderr", "text": "hi"},
        {"seq": 0, "stream": "stdout", "text": ""},
    ]
    assert answers.chunks({"not": "a list"}) == []


def test_an_exec_the_agent_let_go_between_two_reads_still_ends(sandbox, bot, monkeypatch) -> None:
    """The agent keeps finished execs within a cap: one can go between the read that saw its
    end and the one that asks for its status. Its end is recorded from what was read."""
    from boxyard.errors import NotFound
    from sandboxes.services.execs import reading

    record = run(sandbox, bot, "echo done", background=True)
    agent = port_of(sandbox)
    wait_for(
        lambda: agent.call("output", exec=str(record.id), since_seq=0, max_bytes=0)["finished"], 5
    )

    def let_go(agent, record):
        raise NotFound(f"no exec {record.id} in this sandbox")

    monkeypatch.setattr(reading, "_status", let_go)
    chunks, ended, _ = services.exec_output_recording_end(
        Exec.objects.select_related("sandbox__pipeline").get(pk=record.pk)
    )
    assert [chunk["text"] for chunk in chunks] == ["done\n"]
    assert (ended.state, ended.exit_code) == (ExecState.COMPLETED, 0)
