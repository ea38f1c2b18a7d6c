"""E2B's sandbox API held to every tenant rule, with the SDK's own clients: its calls are the
sandbox's pipeline's (the rate limit, its long calls), while calls without the sandbox's token
cost nothing of the pipeline's; what this door keeps in a web process's memory (ptys,
watchers) is capped per pipeline, and said plainly when it is another process's; an admin's
takeover refuses a pty's typing, resizing and kill; a command's bytes reach the SDK intact."""

import base64
import json
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from e2b import CommandHandle, PtySize, RateLimitException
from e2b import Sandbox as E2BSandbox
from e2b.exceptions import AuthenticationException, SandboxException

from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.e2b.common import envd_token
from sandboxes.e2b.envd.outputs import pid_of
from sandboxes.models import Exec, ExecState, Sandbox
from sandboxes.services import Actor
from tests.conftest import CHAT, wait_for
from tests.e2b.conftest import ADMIN, bot_of
from tests.e2b.envd import envd
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

LONG_CALLS = 3
PTYS = 2
WATCHERS = 2


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    """A Boxyard whose pipelines may hold few long calls, ptys and watchers."""
    with served(
        tmp_path_factory.mktemp("e2b-limits"),
        BOXYARD_SECRET_KEY=settings.SECRET_KEY,
        BOXYARD_LONG_CALLS_PER_PIPELINE=str(LONG_CALLS),
        BOXYARD_E2B_PTYS_PER_PIPELINE=str(PTYS),
        BOXYARD_E2B_WATCHERS_PER_PIPELINE=str(WATCHERS),
    ) as running:
        yield running


def test_the_sandbox_api_is_its_pipelines_calls_under_the_rate_limit(
    tmp_path: Any, django_db_setup: None, docker_engine: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(slug="fast")
    _, token = PipelineToken.issue(pipeline, name="rate")
    sandbox_id = str(services.open_sandbox(pipeline, CHAT, Actor("bot", "fast")).sandbox.pk)
    bearer = {"Authorization": f"Bearer {token}"}
    with served(
        tmp_path, BOXYARD_RATE_LIMIT="4/minute", BOXYARD_SECRET_KEY=settings.SECRET_KEY
    ) as limited:
        # Without the sandbox's token a call is nobody's: refused, and not the pipeline's.
        for wrong in (None, "0" * 64):
            for _ in range(3):
                with pytest.raises(AuthenticationException):
                    envd(limited, sandbox_id, wrong).files.list("/home/user")
        mine = envd(limited, sandbox_id, envd_token(sandbox_id))
        for _ in range(3):
            assert mine.files.list("/home/user") is not None
        # The bot API's call with the pipeline's token is the fourth of the same count.
        assert httpx.get(f"{limited.url}/api/v1/sandboxes", headers=bearer).status_code == 200
        with pytest.raises(RateLimitException):
            mine.files.list("/home/user")
        with pytest.raises(RateLimitException):  # a streamed call: refused at its end
            mine.commands.run("touch /home/user/nope")
        raw = httpx.post(
            f"{limited.url}/e2b/sandbox/filesystem.Filesystem/ListDir",
            headers={
                "E2b-Sandbox-Id": sandbox_id,
                "X-Access-Token": envd_token(sandbox_id),
                "Content-Type": "application/json",
            },
            json={"path": "/home/user"},
        )
        assert raw.status_code == 429 and raw.json()["code"] == "resource_exhausted"
        assert int(raw.headers["Retry-After"]) >= 1
        assert httpx.get(f"{limited.url}/api/v1/sandboxes", headers=bearer).status_code == 429
    assert not Exec.objects.filter(sandbox_id=sandbox_id).exists()


def test_a_call_without_the_sandboxs_token_is_refused_before_its_body_is_read(
    server: Server,
) -> None:
    sandbox_id = str(uuid.uuid4())
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        "POST /e2b/sandbox/process.Process/Start HTTP/1.1\r\n"
        f"Host: {host}\r\nE2b-Sandbox-Id: {sandbox_id}\r\nX-Access-Token: {'0' * 64}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode())  # and not a byte of the 100 MB it announces
        answer = b""
        while b"\r\n\r\n" not in answer and (piece := sock.recv(4096)):
            answer += piece
    assert answer.startswith(b"HTTP/1.1 401"), answer


def test_streams_are_the_pipelines_long_calls(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    sandbox = E2BSandbox.create(metadata=CHAT, **opts)
    sleepers = [sandbox.commands.run("sleep 120", background=True) for _ in range(LONG_CALLS)]
    with pytest.raises(RateLimitException, match="long calls"):
        sandbox.commands.run("touch /home/user/nope")
    assert Exec.objects.filter(sandbox_id=sandbox.sandbox_id).count() == LONG_CALLS
    # Another pipeline is not held by this one's streams.
    others = bot_of(make_pipeline(slug="others")).opts(server)
    assert E2BSandbox.create(metadata=CHAT, **others).commands.run("echo ok").stdout == "ok\n"
    # A stream that ends gives its long call back.
    assert sandbox.commands.kill(sleepers[0].pid) is True
    wait_for(lambda: _runs(sandbox, "echo again") == "again\n", 20)


def _runs(sandbox: E2BSandbox, command: str) -> str | None:
    try:
        return str(sandbox.commands.run(command).stdout)
    except RateLimitException:
        return None


def _pty(sandbox: E2BSandbox) -> tuple[CommandHandle, bytearray]:
    """A pty of the sandbox, its screen read into the bytearray by a thread of its own."""
    screen = bytearray()
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))

    def read() -> None:
        try:
            terminal.wait(on_pty=screen.extend)
        except Exception:
            pass  # killed: its end is what the test looks for, elsewhere

    threading.Thread(target=read, daemon=True).start()
    return terminal, screen


def test_ptys_are_capped_per_pipeline(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    sandbox = E2BSandbox.create(metadata=CHAT, **opts)
    terminals = [_pty(sandbox)[0] for _ in range(PTYS)]
    with pytest.raises(RateLimitException, match="open ptys"):
        sandbox.pty.create(PtySize(rows=24, cols=80))
    assert Exec.objects.filter(sandbox_id=sandbox.sandbox_id, session="terminal").count() == PTYS
    assert sandbox.pty.kill(terminals[0].pid) is True
    wait_for(lambda: _opens_pty(sandbox), 20)


def _opens_pty(sandbox: E2BSandbox) -> bool:
    try:
        _pty(sandbox)
    except RateLimitException:
        return False
    return True


def test_an_admins_takeover_refuses_a_ptys_typing_resizing_and_kill(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    sandbox = E2BSandbox.create(metadata=CHAT, **opts)
    terminal, screen = _pty(sandbox)
    row = Sandbox.objects.get(pk=sandbox.sandbox_id)
    services.takeover_lease(row, ADMIN, reason="looking into it")
    with pytest.raises(SandboxException, match="taken over"):
        sandbox.pty.send_stdin(terminal.pid, b"touch /home/user/typed\n")
    with pytest.raises(SandboxException, match="taken over"):
        sandbox.pty.resize(terminal.pid, PtySize(rows=30, cols=91))
    with pytest.raises(SandboxException, match="taken over"):
        sandbox.pty.kill(terminal.pid)
    record = Exec.objects.get(sandbox_id=sandbox.sandbox_id, session="terminal")
    assert record.state == ExecState.RUNNING
    # Released, the pipeline's calls go through again.
    services.release_lease(row, ADMIN, force=True)
    sandbox.pty.send_stdin(terminal.pid, b"echo marker-$((40+2))\n")
    wait_for(lambda: b"marker-42" in screen, 20, lambda: screen.decode(errors="replace"))
    assert sandbox.files.exists("typed") is False
    assert sandbox.pty.kill(terminal.pid) is True
    wait_for(lambda: Exec.objects.get(pk=record.pk).state != ExecState.RUNNING, 15)


def test_a_pty_of_another_web_process_is_refused_saying_so(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    sandbox = E2BSandbox.create(metadata=CHAT, **opts)
    row = Sandbox.objects.get(pk=sandbox.sandbox_id)
    # A terminal recorded as open, whose socket no process of this server holds: as one
    # opened by another web process looks from here.
    elsewhere = Exec.objects.create(
        sandbox=row,
        session="terminal",
        command="terminal",
        cwd="/workspace",
        env={},
        background=True,
        actor="bot:agents/e2b",
        timeout_seconds=0,
    )
    with pytest.raises(SandboxException, match="another web process"):
        sandbox.pty.send_stdin(pid_of(elsewhere.pk), b"ls\n")
    with pytest.raises(SandboxException, match="another web process"):
        sandbox.pty.kill(pid_of(elsewhere.pk))


def test_watchers_are_capped_per_pipeline_and_another_process_is_named(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    sandbox = E2BSandbox.create(metadata=CHAT, **opts)
    watchers = [sandbox.files.watch_dir("/home/user") for _ in range(WATCHERS)]
    with pytest.raises(RateLimitException, match="directory watchers"):
        sandbox.files.watch_dir("/home/user")
    watchers[0].stop()
    again = sandbox.files.watch_dir("/home/user")
    sandbox.files.write("seen.txt", "x")
    assert any(event.name == "seen.txt" for event in again.get_new_events())
    unknown = httpx.post(
        f"{server.url}/e2b/sandbox/filesystem.Filesystem/GetWatcherEvents",
        headers={
            "E2b-Sandbox-Id": sandbox.sandbox_id,
            "X-Access-Token": envd_token(sandbox.sandbox_id),
        },
        json={"watcherId": uuid.uuid4().hex},
    )
    assert unknown.status_code == 409
    assert "web process that made it" in unknown.json()["message"]


def test_a_commands_bytes_reach_the_sdk_intact(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    opts = bot_of(make_pipeline(slug="agents")).opts(server)
    sandbox = E2BSandbox.create(metadata=CHAT, **opts)
    # Bytes that are no UTF-8 at all: the stream carries them as they were written (bytes
    # are base64 in protobuf's JSON), not re-encoded as replacement characters.
    written = bytes(range(0x80, 0x100))
    command = "printf '" + "".join(f"\\{byte:03o}" for byte in written) + "'"
    assert _streamed(server, sandbox.sandbox_id, command) == written
    # The SDK decodes what it gets as UTF-8 with replacement, its own choice, and its
    # `on_stdout` and result agree with that.
    seen: list[str] = []
    result = sandbox.commands.run(command, on_stdout=seen.append)
    assert result.stdout == "".join(seen) == written.decode("utf-8", errors="replace")


def _streamed(server: Server, sandbox_id: str, command: str) -> bytes:
    """The stdout of a command started by a raw `process.Process/Start` call, as sent."""
    request = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", command]}})
    out = b""
    with httpx.stream(
        "POST",
        f"{server.url}/e2b/sandbox/process.Process/Start",
        headers={
            "E2b-Sandbox-Id": sandbox_id,
            "X-Access-Token": envd_token(sandbox_id),
            "Content-Type": "application/connect+json",
        },
        content=struct.pack(">BI", 0, len(request)) + request.encode(),
        timeout=30,
    ) as answer:
        body = answer.read()
    while body:
        flags, length = struct.unpack_from(">BI", body)
        message = json.loads(body[5 : 5 + length])
        body = body[5 + length :]
        data = message.get("event", {}).get("data", {})
        if not flags and "stdout" in data:
            out += base64.b64decode(data["stdout"])
    return out
