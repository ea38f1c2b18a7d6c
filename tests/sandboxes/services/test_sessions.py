"""Shell sessions against the real engine: state that persists, order, parallelism, recovery.

Commands reach the sandbox through its agent; these tests prove what a bot relies on: what a
command changes in its session (cwd, exported variables, functions) is there for the next
one, in any Boxyard process; commands of one session run one at a time in the order they
came, sessions run side by side; and a command that ends its shell does not end the session.
"""

import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import pytest
from django.conf import settings
from django.db import connection

from boxyard.errors import Conflict, InvalidInput, NotFound
from sandboxes import services
from sandboxes.models import Exec, ExecState, ShellSession
from sandboxes.runtime.agent import forget
from sandboxes.runtime.port import port_of
from tests.conftest import CHAT, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sandbox(pipeline, bot, docker_engine):
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert sandbox.agent, "the agent binary is missing: run bin/setup"
    return sandbox


def run(sandbox, bot, cmd, **kwargs):
    request = services.clean_request(sandbox, cmd=cmd, **kwargs)
    return services.run_exec(sandbox, request, bot)


def in_thread(function):
    """For a pool thread: its own database connection is closed when it is done."""

    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            connection.close()

    return call


def test_cd_and_export_persist_in_a_session(sandbox, bot) -> None:
    run(sandbox, bot, "mkdir -p proj/src && cd proj/src && export STAGE=build COUNT=1")
    result = run(sandbox, bot, 'pwd; echo "$STAGE $COUNT"')
    assert result.stdout == "/workspace/proj/src\nbuild 1\n"
    # Relative paths and argv commands start from the session's cwd too.
    assert run(sandbox, bot, ["pwd"]).stdout == "/workspace/proj/src\n"
    # A per-command cwd or env applies to that command only.
    assert (
        run(sandbox, bot, "pwd; echo $STAGE", cwd="/tmp", env={"STAGE": "x"}).stdout == "/tmp\nx\n"
    )
    assert run(sandbox, bot, "pwd; echo $STAGE").stdout == "/workspace/proj/src\nbuild\n"


def test_functions_persist_and_survive_a_restart_of_the_shell(
    make_pipeline, bot, docker_engine
) -> None:
    # Functions need bash (busybox sh cannot print them back): the default image has it.
    pipeline = make_pipeline(slug="bash", image=settings.BOXYARD_DEFAULT_IMAGE)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, 'greet() { echo "hello $1"; }; cd /tmp; export WHO=world')
    assert run(sandbox, bot, 'greet "$WHO"').stdout == "hello world\n"
    ended = run(sandbox, bot, "exit 4")
    assert ended.session_restarted and ended.exit_code == 4
    assert run(sandbox, bot, 'greet "$WHO"; pwd').stdout == "hello world\n/tmp\n"


@pytest.mark.parametrize(
    ("command", "exit_code"),
    [
        ("exit 3", 3),
        ("exec true", 0),
        ("set -e; false; echo unreachable", 1),
        ("kill -9 $$", 137),
    ],
)
def test_a_command_that_ends_the_shell_does_not_end_the_session(
    sandbox, bot, command, exit_code
) -> None:
    run(sandbox, bot, "cd /tmp && export KEPT=yes")
    ended = run(sandbox, bot, command)
    assert ended.exit_code == exit_code and ended.session_restarted
    assert "session was started again" in ended.error
    assert "unreachable" not in ended.stdout
    after = run(sandbox, bot, "pwd; echo $KEPT")
    assert (after.stdout, after.session_restarted) == ("/tmp\nyes\n", False)


def test_a_syntax_error_is_reported_and_the_session_goes_on(sandbox, bot) -> None:
    run(sandbox, bot, "cd /tmp")
    broken = run(sandbox, bot, "echo 'unterminated")
    assert broken.exit_code != 0 and broken.stderr
    assert run(sandbox, bot, "pwd").stdout == "/tmp\n"


def test_commands_of_one_session_run_one_at_a_time_in_order(sandbox, bot) -> None:
    def slow(index: int):
        return run(
            sandbox, bot, f"echo start{index} >> order.log; sleep 0.3; echo end{index} >> order.log"
        )

    agent = port_of(sandbox)

    def in_the_agents_queue(count: int) -> bool:
        records = Exec.objects.filter(sandbox=sandbox).values_list("id", flat=True)
        try:
            known = [agent.call("status", exec=str(record), limit=0) for record in records]
        except NotFound:  # recorded, not yet sent
            return False
        return len(known) == count

    started = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        futures = []
        for index in range(3):
            futures.append(pool.submit(in_thread(slow), index))
            # Each is sent once the agent has the one before it, in its session's queue.
            wait_for(partial(in_the_agents_queue, index + 1), 10)
        results = [future.result() for future in futures]
    elapsed = time.monotonic() - started
    assert all(result.exit_code == 0 for result in results)
    log = run(sandbox, bot, "cat order.log").stdout.split()
    assert log == ["start0", "end0", "start1", "end1", "start2", "end2"]
    assert elapsed >= 0.9


def test_sessions_run_in_parallel(sandbox, bot) -> None:
    services.create_session(sandbox, "second", bot)
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        sleep = in_thread(lambda name: run(sandbox, bot, "sleep 1", session=name))
        results = list(pool.map(sleep, ["default", "second"]))
    elapsed = time.monotonic() - started
    assert [result.exit_code for result in results] == [0, 0]
    assert elapsed < 1.8, f"two sleeps of 1 s in two sessions took {elapsed:.2f} s"


def test_sessions_are_created_listed_isolated_and_deleted(sandbox, bot) -> None:
    created = services.create_session(sandbox, "build", bot, cwd="/tmp", env={"MODE": "ci"})
    assert (created["name"], created["cwd"], created["env"]["MODE"]) == ("build", "/tmp", "ci")
    run(sandbox, bot, "cd /; export ONLY_HERE=1", session="build")
    assert run(sandbox, bot, 'pwd; echo "[$ONLY_HERE][$MODE]"').stdout == "/workspace\n[][]\n"
    listed = {session["name"]: session for session in services.list_sessions(sandbox)}
    assert set(listed) == {"default", "build"}
    assert listed["build"]["cwd"] == "/" and listed["build"]["env"]["ONLY_HERE"] == "1"

    with pytest.raises(Conflict):
        services.create_session(sandbox, "build", bot)
    with pytest.raises(InvalidInput, match="default"):
        services.delete_session(sandbox, "default", bot)
    with pytest.raises(InvalidInput, match="session"):
        services.create_session(sandbox, "../etc", bot)

    services.delete_session(sandbox, "build", bot)
    assert not ShellSession.objects.filter(sandbox=sandbox).exists()
    with pytest.raises(NotFound, match="build"):
        run(sandbox, bot, "true", session="build")
    with pytest.raises(NotFound):
        services.delete_session(sandbox, "build", bot)


def test_session_state_outlives_the_boxyard_process(sandbox, bot) -> None:
    """Another process (here: a fresh Python, as after a restart) sees what this one left."""
    run(sandbox, bot, "cd /tmp && export LEFT_BY=first-process")
    forget(sandbox.container_id)  # and this process drops its channel, as a restart would
    script = textwrap.dedent(
        f"""
        import base64, django, os
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        django.setup()
        from sandboxes.runtime.agent import At, channel
        answer = channel(At({sandbox.container_id!r})).call(
            "run", exec="from-another-process", session="default", shell="pwd; echo $LEFT_BY",
            limit=4096,
        )
        print(base64.b64decode(answer["stdout"]).decode(), end="")
        """
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=settings.BASE_DIR,
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout == "/tmp\nfirst-process\n"
    assert run(sandbox, bot, "pwd; echo $LEFT_BY").stdout == "/tmp\nfirst-process\n"


def test_background_exec_output_arrives_in_order_to_every_poller(sandbox, bot) -> None:
    script = "for i in $(seq 1 200); do echo line$i; [ $((i % 20)) = 0 ] && sleep 0.05; done"
    record = run(sandbox, bot, f"{script}; echo done >&2", background=True)
    assert record.state == ExecState.RUNNING and record.background

    def poll() -> tuple[list[int], str, str]:
        seqs, out, err, last = [], [], [], 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            chunks, current, _ = services.exec_output_recording_end(
                record, since_seq=last, max_bytes=64
            )
            for chunk in chunks:
                seqs.append(chunk["seq"])
                (out if chunk["stream"] == "stdout" else err).append(chunk["text"])
                last = chunk["seq"]
            if current.state != ExecState.RUNNING and not chunks:
                break
            time.sleep(0.01)
        return seqs, "".join(out), "".join(err)

    with ThreadPoolExecutor(3) as pool:
        seen = list(pool.map(in_thread(lambda _: poll()), range(3)))
    expected = "".join(f"line{i}\n" for i in range(1, 201))
    for seqs, out, err in seen:
        assert seqs == list(range(1, len(seqs) + 1)), "a gap or a duplicate"
        assert (out, err) == (expected, "done\n")
    final = services.wait_exec(record, 5)
    assert (final.state, final.exit_code, final.stdout) == (ExecState.COMPLETED, 0, expected)


def test_background_output_beyond_the_inline_cap_is_all_kept(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(slug="capped", output_limit_bytes=4096)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    record = run(sandbox, bot, "head -c 300000 /dev/zero | tr '\\0' x", background=True)
    record = services.wait_exec(record, 20)
    assert record.stdout_truncated and len(record.stdout) == 4096 and record.stdout_bytes == 300000
    text, last = "", 0
    while True:
        chunks, _, _ = services.exec_output_recording_end(record, since_seq=last)
        if not chunks:
            break
        text += "".join(chunk["text"] for chunk in chunks)
        last = chunks[-1]["seq"]
    assert text == "x" * 300000


def test_kill_ends_a_background_exec_and_everything_it_started(sandbox, bot) -> None:
    record = run(
        sandbox,
        bot,
        "sleep 310 & (setsid sleep 311 &) ; sh -c 'sleep 312' & echo started; wait",
        background=True,
    )
    deadline = time.monotonic() + 10
    while "started" not in "".join(
        c["text"] for c in services.exec_output_recording_end(record)[0]
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    killed = services.kill_exec(record, bot)
    assert killed.state == ExecState.KILLED and killed.exit_code == 137
    leftovers = run(sandbox, bot, "ps -o args | grep 'sleep 31[0-2]' | grep -v grep || true")
    assert leftovers.stdout == ""


def test_a_background_timeout_kills_the_tree(sandbox, bot) -> None:
    record = run(sandbox, bot, "sleep 320 & sleep 321", background=True, timeout_seconds=1)
    record = services.wait_exec(record, 10)
    assert record.state == ExecState.TIMED_OUT and record.exit_code == 137
    assert run(sandbox, bot, "ps -o args | grep 'sleep 32[01]' | grep -v grep || true").stdout == ""


def test_a_background_exec_started_by_another_process_is_readable_here(sandbox, bot) -> None:
    """The process that started it exits; its output is kept and readable from here."""
    script = textwrap.dedent(
        f"""
        import django, os
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        django.setup()
        from sandboxes.runtime.agent import At, channel
        channel(At({sandbox.container_id!r})).call(
            "run", exec="started-elsewhere", shell="sleep 1; echo still here", background=True,
        )
        """
    )
    started = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=settings.BASE_DIR,
    )
    assert started.returncode == 0, started.stderr
    from sandboxes.runtime.agent import channel

    status = channel(sandbox).call("wait", exec="started-elsewhere", timeout=10, limit=100)
    assert status["finished"] and status["exit_code"] == 0
    output = channel(sandbox).call("output", exec="started-elsewhere")
    import base64

    assert base64.b64decode(output["chunks"][0]["data"]) == b"still here\n"


def test_streaming_delivers_chunks_as_they_come_then_the_end(sandbox, bot) -> None:
    record = run(sandbox, bot, "for i in 1 2 3; do echo tick$i; sleep 0.3; done", background=True)
    events, arrived, finished = [], [], threading.Event()

    def on_event(event):
        events.append(event)
        arrived.append(time.monotonic())
        if event["event"] != "chunk":
            finished.set()

    stop = services.subscribe(record, 0, on_event)
    assert stop is not None
    assert finished.wait(10)
    stop()
    chunks = [event for event in events if event["event"] == "chunk"]
    assert "".join(chunk["text"] for chunk in chunks) == "tick1\ntick2\ntick3\n"
    assert [chunk["seq"] for chunk in chunks] == list(range(1, len(chunks) + 1))
    assert events[-1]["event"] == "exit" and events[-1]["exit_code"] == 0
    # Live, not all at the end: the first tick came well before the last.
    assert arrived[-1] - arrived[0] >= 0.5


def test_two_readers_of_one_exec_in_one_process_each_get_all_of_it(sandbox, bot) -> None:
    """Both follow it over this process's one channel to the agent; the second does not take
    the first one's place, and stopping one leaves the other."""
    record = run(sandbox, bot, "for i in 1 2 3; do echo tick$i; sleep 0.3; done", background=True)
    texts: dict[str, list[str]] = {"first": [], "second": []}
    ended = {name: threading.Event() for name in texts}

    def reader(name):
        def on_event(event):
            if event["event"] == "chunk":
                texts[name].append(event["text"])
            else:
                ended[name].set()

        return on_event

    stops = [services.subscribe(record, 0, reader(name)) for name in texts]
    assert all(ended[name].wait(10) for name in texts)
    for stop in stops:
        stop()
    assert "".join(texts["first"]) == "".join(texts["second"]) == "tick1\ntick2\ntick3\n"


def test_a_running_background_exec_makes_the_sandbox_busy(sandbox, bot) -> None:
    from sandboxes.models import Sandbox

    assert not Sandbox.objects.busy().filter(pk=sandbox.pk).exists()
    record = run(sandbox, bot, "sleep 30", background=True)
    assert Sandbox.objects.busy().filter(pk=sandbox.pk).exists()
    services.kill_exec(record, bot)
    assert not Sandbox.objects.busy().filter(pk=sandbox.pk).exists()
