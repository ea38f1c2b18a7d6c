"""Managed processes against the real engine: started with the sandbox, talked to through
stdin and stdout, brought back when they die."""

import time

import pytest
from django.core.exceptions import ValidationError

from boxyard.errors import NotFound
from sandboxes import services
from sandboxes.models import Event, Lease
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

# A stdio server in the spirit of MCP: one JSON line in, one JSON line out.
ECHO_SERVER = 'while read -r line; do printf \'{"jsonrpc":"2.0","result":%s}\\n\' "$line"; done'


@pytest.fixture
def sandbox(make_pipeline, bot, docker_engine):
    pipeline = make_pipeline(
        slug="tools",
        processes=[
            {"name": "mcp", "cmd": ECHO_SERVER},
            {"name": "flaky", "cmd": "echo up; sleep 0.3; exit 3"},
            {"name": "once", "cmd": ["echo", "ran once"], "restart": False},
        ],
    )
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert sandbox.agent, "the agent binary is missing: run bin/setup"
    return sandbox


def by_name(sandbox):
    return {process["name"]: process for process in services.start_and_list_processes(sandbox)}


def test_processes_start_with_the_sandbox(sandbox) -> None:
    processes = by_name(sandbox)
    assert set(processes) == {"mcp", "flaky", "once"}
    assert processes["mcp"]["state"] == "running" and processes["mcp"]["pid"]


def test_a_bot_speaks_to_a_process_over_stdin_and_stdout(sandbox, bot) -> None:
    sent = services.write_stdin(sandbox, "mcp", b'{"id":1}\n', bot)
    assert sent["ok"]
    reply = services.read_output(sandbox, "mcp", wait_seconds=5)
    assert (
        "".join(chunk["text"] for chunk in reply["chunks"])
        == '{"jsonrpc":"2.0","result":{"id":1}}\n'
    )
    last = reply["chunks"][-1]["seq"]
    services.write_stdin(sandbox, "mcp", b'{"id":2}\n', bot)
    second = services.read_output(sandbox, "mcp", since_seq=last, wait_seconds=5)
    assert [chunk["seq"] for chunk in second["chunks"]] == [last + 1]
    assert '"id":2' in second["chunks"][0]["text"]
    # With nothing new, a read waits as long as asked and then answers empty.
    started = time.monotonic()
    empty = services.read_output(sandbox, "mcp", since_seq=last + 1, wait_seconds=0.5)
    assert empty["chunks"] == [] and time.monotonic() - started >= 0.45


def test_a_process_that_dies_comes_back_with_backoff_and_its_logs_kept(sandbox) -> None:
    deadline = time.monotonic() + 15
    while by_name(sandbox)["flaky"]["generation"] < 3:
        assert time.monotonic() < deadline, by_name(sandbox)["flaky"]
        time.sleep(0.2)
    flaky = by_name(sandbox)["flaky"]
    assert flaky["restarts"] >= 2 and flaky["last_exit_code"] == 3
    first = services.read_output(sandbox, "flaky", generation=1)
    assert (first["running"], first["exit_code"]) == (False, 3)
    assert first["chunks"][0]["text"] == "up\n"
    # A process that asks for no restart stays exited.
    once = by_name(sandbox)["once"]
    assert (once["state"], once["generation"]) == ("exited", 1)


def test_a_killed_process_is_restarted(sandbox, bot) -> None:
    before = by_name(sandbox)["mcp"]
    request = services.clean_request(sandbox, cmd=f"kill -9 {before['pid']}")
    assert services.run_exec(sandbox, request, bot).exit_code == 0
    deadline = time.monotonic() + 10
    while (now := by_name(sandbox)["mcp"])["generation"] == before["generation"] or now[
        "state"
    ] != "running":
        assert time.monotonic() < deadline, now
        time.sleep(0.1)
    services.write_stdin(sandbox, "mcp", b'"again"\n', bot)
    assert "again" in services.read_output(sandbox, "mcp", wait_seconds=5)["chunks"][0]["text"]


def test_restart_on_request(sandbox, bot) -> None:
    before = by_name(sandbox)["mcp"]
    restarted = services.restart_process(sandbox, "mcp", bot)
    assert restarted["state"] == "running" and restarted["generation"] == before["generation"] + 1
    assert restarted["pid"] != before["pid"]


def test_an_undeclared_process_is_not_found(sandbox, bot) -> None:
    with pytest.raises(NotFound, match="nope"):
        services.write_stdin(sandbox, "nope", b"x", bot)


def test_restarting_an_undeclared_process_changes_nothing(sandbox, bot) -> None:
    events = Event.objects.filter(sandbox=sandbox)
    before = (events.count(), Lease.objects.values().get(sandbox=sandbox))
    with pytest.raises(NotFound, match="nope"):
        services.restart_process(sandbox, "nope", bot)
    assert (events.count(), Lease.objects.values().get(sandbox=sandbox)) == before
    assert not events.filter(action="process.restarted").exists()


@pytest.mark.parametrize(
    ("processes", "message"),
    [
        ("cat", "list"),
        ([{"name": "a"}], "cmd"),
        ([{"name": "../x", "cmd": "cat"}], "name"),
        ([{"name": "a", "cmd": "cat"}, {"name": "a", "cmd": "cat"}], "twice"),
        ([{"name": "a", "cmd": "cat", "cwd": "rel"}], "cwd"),
        ([{"name": "a", "cmd": "cat", "restart": "yes"}], "restart"),
        ([{"name": "a", "cmd": "cat", "user": "root"}], "unknown"),
    ],
)
def test_bad_process_definitions_are_refused(make_pipeline, processes, message) -> None:
    with pytest.raises(ValidationError, match=message):
        make_pipeline(processes=processes)
