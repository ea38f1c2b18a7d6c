"""Hostile processes: nothing a command starts outlives its timeout or a kill, however it hides,
a fork bomb jams nothing for good, and a neighbour sandbox never notices."""

import threading
import time

import pytest

from sandboxes import services
from sandboxes.models import Event, ExecState
from sandboxes.runtime.agent import forget
from tests.conftest import CHAT
from tests.security.conftest import cpu_share, leftovers, processes, run, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

# Five ways out of a process tree, started together; each leaves a process whose command line
# names the way it took (x=...). Only one spins, so the engine's CPU counter shows it.
ESCAPES = """
setsid sh -c 'x=setsid; while :; do :; done' &
(env -u BOXYARD_EXEC setsid sh -c 'x=envless; while :; do sleep 1; done' &)
(sh -c 'sh -c "x=doublefork; sleep 1000; :" &' &)
sh -c 'printf kworker > /proc/self/comm; x=renamed; while :; do sleep 1; done' &
sh -c 'trap "" TERM INT HUP; x=deaf; while :; do sleep 1; done' &
"""
WAYS = ("setsid", "envless", "doublefork", "renamed", "deaf")


def started_all(engine, sandbox) -> bool:
    text = " ".join(p.args for p in processes(engine, sandbox))
    return all(f"x={way}" in text for way in WAYS)


def nothing_left(engine, sandbox) -> None:
    left = leftovers(engine, sandbox)
    assert left == [], f"still running: {left}"
    assert cpu_share(engine, sandbox, 1.0) < 0.05


@pytest.mark.parametrize("mode", ["session", "fresh", "background"])
def test_no_escape_outlives_the_timeout(mode, attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked()
    kwargs = {"fresh": {"one_shot": True}, "background": {"background": True}}.get(mode, {})
    started = time.monotonic()
    record = run(sandbox, bot, ESCAPES + "sleep 30", timeout_seconds=3, **kwargs)
    if mode == "background":
        wait_until(lambda: started_all(docker_engine, sandbox), 5, "the escapes started")
        record = services.wait_exec(record, 20)
    assert record.state == ExecState.TIMED_OUT, (record.state, record.error)
    assert time.monotonic() - started < 10
    nothing_left(docker_engine, sandbox)
    neighbour.answers()
    assert run(sandbox, bot, "echo alive").stdout == "alive\n"


def test_kill_ends_every_escape(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked()
    record = run(sandbox, bot, ESCAPES + "sleep 1000", background=True)
    wait_until(lambda: started_all(docker_engine, sandbox), 5, "the escapes started")
    killed = services.kill_exec(record, bot)
    assert killed.state == ExecState.KILLED
    nothing_left(docker_engine, sandbox)
    neighbour.answers()


def test_what_a_finished_command_left_behind_ends_at_its_timeout(
    attacked, bot, docker_engine
) -> None:
    sandbox = attacked()
    run(sandbox, bot, "export KEPT=yes; cd /tmp")
    record = run(sandbox, bot, ESCAPES + "echo left", timeout_seconds=4)
    assert (record.state, record.stdout) == (ExecState.COMPLETED, "left\n")
    assert "left 5 processes running" in record.error or "processes running" in record.error
    assert started_all(docker_engine, sandbox)
    # The session goes on meanwhile, in a new shell with its state.
    assert run(sandbox, bot, "echo $KEPT; pwd").stdout == "yes\n/tmp\n"
    wait_until(lambda: not leftovers(docker_engine, sandbox), 8, "the leftovers ended")
    nothing_left(docker_engine, sandbox)


def test_kill_of_a_finished_command_ends_what_it_left(attacked, bot, docker_engine) -> None:
    sandbox = attacked()
    record = run(sandbox, bot, ESCAPES + "echo left", timeout_seconds=600)
    assert record.state == ExecState.COMPLETED and started_all(docker_engine, sandbox)
    services.kill_exec(record, bot)
    nothing_left(docker_engine, sandbox)


def test_cpu_spin_stops_at_its_timeout(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked(cpus=1.0)
    for fresh in (False, True):
        record = run(sandbox, bot, "while :; do :; done", timeout_seconds=2, one_shot=fresh)
        assert record.state == ExecState.TIMED_OUT and record.exit_code == 137
        nothing_left(docker_engine, sandbox)
    neighbour.answers()


@pytest.mark.django_db(transaction=True)  # the bomb runs in a thread of its own
def test_foreground_fork_bomb(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked(pids_limit=64)
    outcome = {}

    def bomb() -> None:
        outcome["record"] = run(sandbox, bot, "bomb(){ bomb | bomb; }; bomb", timeout_seconds=6)

    thread = threading.Thread(target=bomb)
    thread.start()
    # The bomb climbs to the limit within a moment and falls back as its forks fail: the
    # neighbour answers all through its life.
    while thread.is_alive():
        neighbour.answers()
    thread.join()
    record = outcome["record"]
    assert record.state in (ExecState.TIMED_OUT, ExecState.COMPLETED), record.error
    wait_until(lambda: not leftovers(docker_engine, sandbox), 10, "the bomb ended")
    assert run(sandbox, bot, "echo alive").stdout == "alive\n"


def test_background_fork_bomb_is_ended_by_kill(attacked, bot, docker_engine, neighbour) -> None:
    sandbox = attacked(pids_limit=64)
    record = run(sandbox, bot, "bomb(){ bomb | bomb & }; bomb", timeout_seconds=600)
    assert record.state == ExecState.COMPLETED  # it returns at once, leaving the bomb behind
    time.sleep(1)
    neighbour.answers()
    services.kill_exec(record, bot)
    wait_until(lambda: not leftovers(docker_engine, sandbox), 5, "the bomb ended")
    assert run(sandbox, bot, "echo alive").stdout == "alive\n"


def pids_current(engine, sandbox) -> int:
    """The container's processes and threads, as the engine counts them (no exec needed: at
    the limit there is no room for one)."""
    stats = engine.api.stats(sandbox.container_id, stream=False, one_shot=True)
    return int((stats.get("pids_stats") or {}).get("current", 0))


def test_reset_unjams_a_sandbox_at_its_pids_limit(
    make_pipeline, bot, alice_actor, docker_engine, neighbour
) -> None:
    pipeline = make_pipeline(
        pids_limit=48, processes=[{"name": "server", "cmd": "sleep 100000", "restart": True}]
    )
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "export KEPT=yes; cd /tmp")
    before = {p["name"]: p for p in services.start_and_list_processes(sandbox)}["server"]
    run(sandbox, bot, "(while :; do sleep 1000 & done) >/dev/null 2>&1 &", timeout_seconds=600)
    # Jammed: every process slot is taken the moment it is free.
    wait_until(lambda: pids_current(docker_engine, sandbox) >= 46, 10, "the limit was reached")
    neighbour.answers()
    forget(sandbox.container_id)  # as another Boxyard process would: no channel open yet
    started = time.monotonic()
    result = services.reset_sandbox(sandbox, bot, reason="fork storm")
    took = time.monotonic() - started
    assert took < 5 and result.killed >= 15, (took, result)  # the rest are the agent's threads
    assert leftovers(docker_engine, sandbox, but=("sleep 100000",)) == []
    assert run(sandbox, bot, "echo alive $KEPT; pwd").stdout == "alive yes\n/tmp\n"
    wait_until(
        lambda: (
            {p["name"]: p for p in services.start_and_list_processes(sandbox)}["server"][
                "generation"
            ]
            > before["generation"]
        ),
        5,
        "the managed process started again",
    )
    assert (
        pids_current(docker_engine, sandbox) < 40
    )  # room again: the agent, the sessions, the server
    event = Event.objects.get(sandbox=sandbox, action="sandbox.reset")
    assert event.actor == str(bot) and event.reason == "fork storm"
    assert event.detail["killed"] == result.killed
    # The pids limit is the pipeline's again.
    limit = docker_engine.api.inspect_container(sandbox.container_id)["HostConfig"]["PidsLimit"]
    assert limit == 48


def test_a_reset_that_cannot_open_the_channel_makes_room_for_it(
    make_pipeline, bot, docker_engine, monkeypatch
) -> None:
    """Opening the agent's channel is an engine exec, which a sandbox at its pids limit may
    refuse: the reset then raises the limit for a moment, opens the channel, and puts the
    limit back. Here the first opening is refused on purpose, every time."""
    from boxyard.errors import AgentGone
    from sandboxes.services import resetting

    pipeline = make_pipeline(pids_limit=48)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "sleep 1000 &", timeout_seconds=600)
    forget(sandbox.container_id)
    opened: list[int] = []
    real_port_of = resetting.port_of

    def port_at_the_limit(placed):  # type: ignore[no-untyped-def]
        limit = docker_engine.api.inspect_container(placed.container_id)["HostConfig"]["PidsLimit"]
        opened.append(limit)
        if limit == 48:
            raise AgentGone("no room for the bridge's exec")
        return real_port_of(placed)

    monkeypatch.setattr(resetting, "port_of", port_at_the_limit)
    result = services.reset_sandbox(sandbox, bot, reason="jammed")
    assert opened == [48, 48 + resetting._HEADROOM_PIDS], opened
    assert result.killed >= 1
    limit = docker_engine.api.inspect_container(sandbox.container_id)["HostConfig"]["PidsLimit"]
    assert limit == 48  # the pipeline's again


def test_what_a_terminal_started_ends_with_it(attacked, alice_actor, docker_engine) -> None:
    from sandboxes.services import terminal

    sandbox = attacked()
    services.takeover_lease(sandbox, alice_actor, holder=str(alice_actor))
    term, record = terminal.open_terminal(sandbox, alice_actor)
    term.socket.sendall(b"id -u; sleep 1000 & (setsid sleep 1001 &); echo started\n")
    wait_until(
        lambda: any("sleep 1001" in p.args for p in processes(docker_engine, sandbox)),
        5,
        "the terminal's commands ran",
    )
    assert any(p.args.endswith("-i") for p in processes(docker_engine, sandbox))  # its shell
    terminal.close_terminal(record, term, b"", alice_actor)
    wait_until(lambda: not leftovers(docker_engine, sandbox), 5, "the terminal's processes ended")
