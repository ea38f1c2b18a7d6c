"""The E2B SDK's commands and pty, unchanged, on a Boxyard sandbox through `/e2b/sandbox`:
each call is Boxyard's exec or terminal service, seen in the sandbox's history and on its
page as a bot API command is."""

import threading
import uuid
from typing import Any

import httpx
import pytest
from django.test import Client
from e2b import CommandExitException, PtySize
from e2b import Sandbox as E2BSandbox
from e2b.envd.api import check_sandbox_health
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException

from sandboxes import services
from sandboxes.e2b.common import envd_token
from sandboxes.models import Exec, ExecState, Sandbox
from sandboxes.services import Actor
from tests.conftest import CHAT, wait_for
from tests.e2b.conftest import bot_of
from tests.e2b.envd import envd
from tests.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def test_a_command_runs_in_the_foreground_in_home_and_is_a_boxyard_exec(
    sandbox: E2BSandbox, admin_client: Client
) -> None:
    out: list[str] = []
    err: list[str] = []
    result = sandbox.commands.run(
        "echo hi; pwd; echo $GREETING >&2",
        envs={"GREETING": "oops"},
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hi\n/home/user\n", "oops\n")
    assert "".join(out) == result.stdout and "".join(err) == result.stderr
    # The command is the sandbox's exec, by the pipeline's bot through this door, with its
    # output, and the sandbox's page shows it as it shows a bot API command.
    record = Exec.objects.get(sandbox_id=sandbox.sandbox_id)
    assert record.actor == "bot:agents/e2b" and record.command.startswith("echo hi")
    wait_for(lambda: Exec.objects.get(pk=record.pk).state == ExecState.COMPLETED, 10)
    record.refresh_from_db()
    assert (record.exit_code, record.stdout) == (0, "hi\n/home/user\n")
    page = admin_client.get(f"/sandboxes/{sandbox.sandbox_id}/")
    assert page.status_code == 200 and "echo hi; pwd" in page.content.decode()


def test_a_failing_command_raises_the_sdks_exit_exception(sandbox: E2BSandbox) -> None:
    with pytest.raises(CommandExitException) as raised:
        sandbox.commands.run("echo no >&2; exit 3", cwd="/home/user")
    assert (raised.value.exit_code, raised.value.stderr) == (3, "no\n")
    assert sandbox.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"


def test_background_stdin_list_connect_and_kill(sandbox: E2BSandbox) -> None:
    lines: list[str] = []
    got = threading.Event()

    def seen(text: str) -> None:
        lines.append(text)
        if "echo:hello" in "".join(lines):
            got.set()

    handle = sandbox.commands.run(
        "while read line; do echo echo:$line; done; echo bye",
        background=True,
        stdin=True,
    )
    results: list[Any] = []
    waiting = threading.Thread(
        target=lambda: results.append(handle.wait(on_stdout=seen)), daemon=True
    )
    waiting.start()
    sandbox.commands.send_stdin(handle.pid, "hello\n")
    assert got.wait(20), lines
    listed = {process.pid: process for process in sandbox.commands.list()}
    assert handle.pid in listed and listed[handle.pid].cwd == "/home/user"
    sandbox.commands.stream_input(handle.pid, ["a\n", b"b\n"])  # a client stream, in order
    sandbox.commands.close_stdin(handle.pid)
    waiting.join(20)
    assert [(r.exit_code, r.stdout) for r in results] == [(0, "echo:hello\necho:a\necho:b\nbye\n")]
    assert handle.pid not in {process.pid for process in sandbox.commands.list()}

    sleeper = sandbox.commands.run("echo up; touch /home/user/up; sleep 600", background=True)
    again = sandbox.commands.connect(sleeper.pid)
    wait_for(lambda: sandbox.files.exists("/home/user/up"), 15)  # its "up" is written by then
    assert sandbox.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException) as killed:
        again.wait()
    assert "up\n" in killed.value.stdout
    wait_for(lambda: sleeper.pid not in {p.pid for p in sandbox.commands.list()}, 15)
    assert sandbox.commands.kill(sleeper.pid) is False  # gone: the SDK's False, not an error


def test_a_process_the_client_leaves_runs_on_and_its_end_is_recorded(
    sandbox: E2BSandbox,
) -> None:
    handle = sandbox.commands.run("read line; echo got:$line", background=True, stdin=True)
    record = Exec.objects.get(sandbox_id=sandbox.sandbox_id)
    handle.disconnect()  # the SDK stops following; the command goes on
    assert handle.pid in {process.pid for process in sandbox.commands.list()}
    sandbox.commands.send_stdin(handle.pid, "later\n")
    wait_for(lambda: Exec.objects.get(pk=record.pk).state == ExecState.COMPLETED, 15)
    record.refresh_from_db()
    assert (record.exit_code, record.stdout) == (0, "got:later\n")
    assert handle.pid not in {process.pid for process in sandbox.commands.list()}


def test_a_pty_is_a_terminal_typed_into_resized_and_killed(sandbox: E2BSandbox) -> None:
    screen = bytearray()
    shown = threading.Event()

    def on_data(data: bytes) -> None:
        screen.extend(data)
        if b"marker-42" in screen and b"cols=91" in screen:
            shown.set()

    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    reading = threading.Thread(target=lambda: _ignore(terminal.wait, on_data), daemon=True)
    reading.start()
    sandbox.pty.resize(terminal.pid, PtySize(rows=30, cols=91))
    sandbox.pty.send_stdin(terminal.pid, b"echo marker-$((40+2)); echo cols=$(stty size)\n")
    wait_for(lambda: b"marker-42" in screen, 20, lambda: bytes(screen).decode(errors="replace"))
    sandbox.pty.send_stdin(terminal.pid, b"echo cols=$(stty size | cut -d' ' -f2)1\n")
    assert shown.wait(20), bytes(screen)
    assert sandbox.pty.kill(terminal.pid) is True
    reading.join(20)
    assert not reading.is_alive()
    record = Exec.objects.get(sandbox_id=sandbox.sandbox_id, session="terminal")
    wait_for(lambda: Exec.objects.get(pk=record.pk).state != ExecState.RUNNING, 15)


def _ignore(wait: Any, on_pty: Any) -> None:
    try:
        wait(on_pty=on_pty)
    except Exception:
        pass


def test_a_sandbox_opens_only_with_its_own_token(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    mine = E2BSandbox.create(metadata=CHAT, **opts).sandbox_id
    theirs = E2BSandbox.create(metadata={"launcher_type": "group", "launcher_id": "7"}, **opts)
    theirs_id = theirs.sandbox_id
    for token in (None, "0" * 64, envd_token(theirs_id)):
        with pytest.raises(AuthenticationException):
            envd(server, mine, token).commands.run("true")
        with pytest.raises(AuthenticationException):
            envd(server, mine, token).files.read("/home/user/x")
    assert not Exec.objects.filter(sandbox_id=mine).exists()
    # Another port of the sandbox is none that this URL reaches, in the SDK's words for it.
    other = httpx.get(
        f"{server.url}/e2b/sandbox/health",
        headers={
            "E2b-Sandbox-Id": mine,
            "E2b-Sandbox-Port": "8080",
            "X-Access-Token": envd_token(mine),
        },
    )
    assert other.status_code == 502 and "port is not open" in other.json()["message"]
    # The SDK's own health probe: running, and a sandbox it cannot find is not.
    assert check_sandbox_health(envd(server, mine, envd_token(mine)).api) is True
    unknown = str(uuid.uuid4())
    assert check_sandbox_health(envd(server, unknown, envd_token(unknown)).api) is False
    with pytest.raises(NotFoundException):
        envd(server, unknown, envd_token(unknown)).commands.run("true")
    with pytest.raises(NotFoundException):
        envd(server, unknown, envd_token(unknown)).commands.list()


def test_an_admins_takeover_refuses_the_sdks_changes(sandbox: E2BSandbox) -> None:
    row = Sandbox.objects.get(pk=sandbox.sandbox_id)
    services.takeover_lease(row, Actor.admin("alice"), reason="looking into it")
    with pytest.raises(SandboxException, match="taken over"):
        sandbox.commands.run("touch /home/user/nope")
    with pytest.raises(SandboxException, match="taken over"):
        sandbox.files.write("nope.txt", "x")
    assert not Exec.objects.filter(sandbox_id=sandbox.sandbox_id).exists()
    assert sandbox.files.exists("nope.txt") is False  # a read is no change: it still answers
