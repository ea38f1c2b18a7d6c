"""The agent out of the sandbox code's reach, and listings that no file name can forge."""

import pytest
from django.conf import settings

from sandboxes import services
from sandboxes.runtime.agent import channel, forget
from tests.conftest import CHAT
from tests.security.conftest import run

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

FIND_AGENT = (
    "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" in "
    "*'boxyard-agent serve'*) echo ${p#/proc/};; esac; done | head -n 1"
)

# What sandbox code might try against the agent, in Python (the default image has it):
# signal it, trace it, read its environment and descriptors, reach its socket and state.
ATTACKS = r"""
import ctypes, errno, os, signal, socket
pid = int(open("/tmp/agent.pid").read())
def attempt(name, action):
    try:
        action()
        print(name, "DONE")
    except OSError as error:
        print(name, errno.errorcode.get(error.errno, error.errno))
attempt("kill", lambda: os.kill(pid, signal.SIGKILL))
attempt("stop", lambda: os.kill(pid, signal.SIGSTOP))
attempt("kill-init", lambda: os.kill(1, signal.SIGKILL))
libc = ctypes.CDLL(None, use_errno=True)
def ptrace():
    if libc.ptrace(16, pid, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
attempt("ptrace", ptrace)
attempt("environ", lambda: open(f"/proc/{pid}/environ").read())
attempt("fds", lambda: os.listdir(f"/proc/{pid}/fd"))
attempt("mem", lambda: open(f"/proc/{pid}/mem", "rb").read(1))
def connect():
    sock = socket.socket(socket.AF_UNIX)
    sock.connect("/.boxyard-run/agent.sock")
attempt("socket", connect)
attempt("state", lambda: os.listdir("/.boxyard-run"))
attempt("session-state", lambda: open("/.boxyard-run/s/default/planted", "w"))
attempt("replace", lambda: open("/.boxyard/boxyard-agent", "wb"))
attempt("rename", lambda: os.rename("/.boxyard/boxyard-agent", "/.boxyard/old"))
attempt("squat", lambda: os.mkdir("/.boxyard-run/x/mine"))
"""


def test_sandbox_code_can_neither_kill_nor_trace_nor_replace_the_agent(
    make_pipeline, bot, docker_engine, neighbour
) -> None:
    pipeline = make_pipeline(image=settings.BOXYARD_DEFAULT_IMAGE)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, FIND_AGENT + " > /tmp/agent.pid")
    services.write_file(sandbox, "attacks.py", ATTACKS.encode(), bot)
    outcome = run(sandbox, bot, ["python3", "attacks.py"], timeout_seconds=30)
    results = dict(line.split(" ", 1) for line in outcome.stdout.splitlines())
    assert results == {
        "kill": "EPERM",
        "stop": "EPERM",
        "kill-init": "EPERM",
        "ptrace": "EPERM",
        "environ": "EACCES",
        "fds": "EACCES",
        "mem": "EACCES",
        "socket": "EACCES",
        "state": "EACCES",
        "session-state": "EACCES",
        "replace": "EROFS",
        "rename": "EROFS",
        "squat": "EACCES",
    }, outcome.stdout + outcome.stderr
    # The agent is the one it was, and it still serves, also on a channel opened afresh.
    assert run(sandbox, bot, FIND_AGENT).stdout == run(sandbox, bot, "cat /tmp/agent.pid").stdout
    forget(sandbox.container_id)
    assert channel(sandbox).call("ping")["version"] >= "3"
    assert run(sandbox, bot, "echo alive").stdout == "alive\n"
    neighbour.answers()


def test_commands_run_as_the_sandbox_user_without_capabilities(attacked, bot) -> None:
    sandbox = attacked()
    check = "id -u; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status"
    for kwargs in ({}, {"one_shot": True}, {"cmd_as_argv": True}):
        cmd = ["sh", "-c", check] if kwargs.pop("cmd_as_argv", False) else check
        seen = run(sandbox, bot, cmd, **kwargs)
        lines = seen.stdout.split("\n")
        assert lines[0] == "10001"
        assert "CapEff:\t0000000000000000" in lines and "CapPrm:\t0000000000000000" in lines
        assert "NoNewPrivs:\t1" in lines


FORGED = "x\nregular file|999999|4777|0|/workspace/FAKE"


def test_a_file_name_cannot_forge_a_listing(make_pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(make_pipeline(), CHAT, bot).sandbox
    run(sandbox, bot, ["mkdir", "-p", "dir"])
    # The name of the report (a line break, then the old format's fields and a path of its
    # choosing: "/" in it makes directories), one with invalid UTF-8, one with separators.
    run(
        sandbox,
        bot,
        [
            "sh",
            "-c",
            'mkdir -p "dir/${1%/*}" && touch "dir/$1" "dir/$(printf "bad\\377name")" "dir/a|b\tc"',
            "x",
            FORGED,
        ],
    )
    entries, truncated = services.list_files(sandbox, "dir", recursive=True)
    head = "/workspace/dir/x\nregular file|999999|4777|0|"
    assert not truncated
    assert sorted((entry.path, entry.type) for entry in entries) == sorted(
        [
            (head, "dir"),
            (head + "/workspace", "dir"),
            (head + "/workspace/FAKE", "file"),
            ("/workspace/dir/bad\udcffname", "file"),
            ("/workspace/dir/a|b\tc", "file"),
        ]
    )
    assert not any(entry.path == "/workspace/FAKE" or entry.size == 999999 for entry in entries)
    flat, _ = services.list_files(sandbox, "dir")
    assert sorted(entry.name for entry in flat) == sorted(
        ["x\nregular file|999999|4777|0|", "bad\udcffname", "a|b\tc"]
    )
