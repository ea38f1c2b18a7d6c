"""However much its commands print, a sandbox's agent lives: it keeps their output within one
budget (BOXYARD_AGENT_OUTPUT_BYTES, never more than a sixteenth of the sandbox's memory), drops
the oldest past it and says so in the output's answer; and when memory runs out, the kernel
kills a command, never the agent that keeps the sessions."""

from typing import Any

import pytest

from sandboxes.mcp.tools import listed_tools
from sandboxes.models import Sandbox
from sandboxes.runtime import ROOT
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

MIB = 1024 * 1024
EACH = 16 * MIB  # what the agent once kept of every command
FLOOD = 12  # commands printing EACH at once: 192 MiB, three times the sandbox's memory


def _agent(engine: Any, container: str) -> tuple[int, int]:
    """The agent's pid and its peak resident size (bytes), seen as root from outside it."""
    found = engine.exec(
        container,
        [
            "sh",
            "-c",
            "for d in /proc/[0-9]*; do grep -q '^PPid:[[:space:]]*1$' $d/status 2>/dev/null"
            " && grep -q '^Name:[[:space:]]*boxyard-agent' $d/status"
            " && echo ${d#/proc/} $(grep VmHWM $d/status); done",
        ],
        user=ROOT,
    )
    pid, _, peak, unit = found.stdout.decode().split()
    assert unit == "kB"
    return int(pid), int(peak) * 1024


def test_a_flood_of_output_leaves_the_agent_and_its_sessions_alive(
    support: Any, docker_engine: Any
) -> None:
    support.pipeline.memory_mb = 64
    support.pipeline.save()
    opened = support.call("post", "/sandboxes/open", {"pipeline": "support", "variables": CHAT})
    assert opened.status_code == 200, opened.content
    sandbox_id = opened.json()["sandbox_id"]
    base = f"/sandboxes/{sandbox_id}"
    container = Sandbox.objects.get(pk=sandbox_id).container_id
    agent_pid, _ = _agent(docker_engine, container)
    assert support.call("post", f"{base}/sessions", {"name": "keeper"}).status_code == 200
    kept = support.call("post", f"{base}/exec", {"cmd": "export KEPT=yes", "session": "keeper"})
    assert kept.json()["exit_code"] == 0

    started = []
    for n in range(FLOOD):
        flood = {"cmd": f"yes 'line {n} of a flood' | head -c {EACH}", "background": True}
        answer = support.call("post", f"{base}/exec", flood)
        assert answer.status_code == 200, f"command {n}: {answer.content!r}"
        started.append(answer.json()["exec_id"])
    for exec_id in started:
        waited = support.call("post", f"{base}/execs/{exec_id}/wait", {"timeout_seconds": 60})
        assert waited.json() == {"done": True, "status": "completed", "exit_code": 0}

    # The agent lived through it, and so did the sandbox and its session.
    assert support.call("get", base).json()["status"] == "running"
    assert Sandbox.objects.get(pk=sandbox_id).container_id == container
    again = support.call("post", f"{base}/exec", {"cmd": "echo $KEPT", "session": "keeper"})
    assert again.json()["stdout"] == "yes\n"
    pid, peak = _agent(docker_engine, container)
    assert pid == agent_pid and peak < 32 * MIB, f"the agent peaked at {peak / MIB:.1f} MiB"

    # It kept at most its budget of all that (a sixteenth of 64 MiB), the newest; each answer
    # says what it no longer has, and a reader from the start sees where it begins again.
    budget = 64 * MIB // 16
    dropped = []
    for exec_id in started:
        answer = support.call("get", f"{base}/execs/{exec_id}/output", since_seq=0).json()
        assert (answer["done"], answer["status"]) == (True, "completed")
        dropped.append(answer["dropped_bytes"])
        if answer["dropped_bytes"] == EACH:
            assert answer["chunks"] == []
        elif answer["dropped_bytes"]:
            assert answer["chunks"][0]["seq"] > 1
    kept_bytes = FLOOD * EACH - sum(dropped)
    assert 0 < kept_bytes <= budget, dropped

    # A command in the foreground that prints past the budget is told its start went.
    loud = support.call("post", f"{base}/exec", {"cmd": f"yes | head -c {2 * budget}"}).json()
    assert loud["exit_code"] == 0 and loud["stdout_truncated"], loud["error"]
    assert "bytes of output were dropped" in loud["error"], loud["error"]

    # A command that wants more memory than the sandbox has is what the kernel kills.
    hog = support.call(
        "post",
        f"{base}/exec",
        {"cmd": "dd if=/dev/zero of=/dev/null bs=96M count=1", "session": "keeper"},
    ).json()
    assert (hog["exit_code"], hog["oom_killed"]) == (137, True), hog
    after = support.call("post", f"{base}/exec", {"cmd": "echo $KEPT", "session": "keeper"})
    assert after.json()["stdout"] == "yes\n"
    assert _agent(docker_engine, container)[0] == agent_pid

    # The agent was told its budget when the sandbox started.
    command = docker_engine.api.inspect_container(container)["Config"]["Cmd"]
    assert command[-2:] == ["--output-bytes", str(budget)]


def test_the_mcp_tool_that_reads_output_shows_what_was_dropped() -> None:
    (read,) = [tool for tool in listed_tools(False) if tool.name == "sandbox_exec_read"]
    assert read.output_schema is not None
    assert read.output_schema["properties"]["dropped_bytes"]["type"] == "integer"
    assert "dropped_bytes" in read.output_schema["required"]
