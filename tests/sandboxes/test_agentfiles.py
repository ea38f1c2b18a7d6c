"""Files over the agent's own socket: the client's side of the protocol against a peer that
says what a sandbox could say (a socket pair, no engine), and the way to the socket (the
real engine)."""

import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings

from boxyard.errors import RuntimeFailure
from hosts.engines import get_runtime
from sandboxes import services
from sandboxes.runtime import agentfiles, labels_for
from sandboxes.runtime.docker import direct
from sandboxes.runtime.docker.engine import DockerRuntime
from sandboxes.runtime.port import PROTOCOL
from tests.conftest import CHAT, wait_for


def peer(script: Callable[[socket.socket], None]) -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair()
    thread = threading.Thread(target=lambda: (script(theirs), theirs.close()), daemon=True)
    thread.start()
    yield ours
    thread.join(timeout=5)


def lines(sock: socket.socket, *answers: dict[str, Any]) -> bytes:
    """Read the request line, send the answers; what was sent after the request is returned."""
    got = b""
    while b"\n" not in got:
        got += sock.recv(4096)
    request, _, rest = got.partition(b"\n")
    assert json.loads(request)["op"] == "file"
    for answer in answers:
        sock.sendall(json.dumps(answer).encode() + b"\n")
        if answer.get("ready"):
            while piece := sock.recv(65536):
                rest += piece
    return rest


def test_a_failure_is_told_from_a_refusal() -> None:
    failed = {"id": 0, "ok": False, "code": "bad_request", "error": "unknown op file"}
    for sock in peer(lambda s: lines(s, failed)):
        with pytest.raises(RuntimeFailure, match="unknown op file"):
            agentfiles.put(sock, "/workspace/a", "644", True, 1, [b"x"])
    refused = {"ok": False, "verdict": 206, "error": "/workspace/a exists"}
    for sock in peer(lambda s: lines(s, refused)):
        result = agentfiles.put(sock, "/workspace/a", "644", False, 1, [b"x"])
        assert (result.exit_code, result.stderr) == (206, b"/workspace/a exists")


def test_a_put_sends_exactly_the_body_after_ready() -> None:
    received: list[bytes] = []

    def agent(sock: socket.socket) -> None:
        received.append(lines(sock, {"ready": True}))
        sock.sendall(b'{"ok": true}\n')

    for sock in peer(agent):
        result = agentfiles.put(sock, "/workspace/a", "644", True, 6, [b"abc", b"", b"def"])
    assert result.exit_code == 0 and received == [b"abcdef"]


def test_a_get_never_gives_more_than_promised_and_says_when_it_gives_less() -> None:
    header = {"ok": True, "size": 10, "mtime": 1, "inode": 2, "length": 4}
    for sock in peer(lambda s: (lines(s), s.sendall(json.dumps(header).encode() + b"\nabcdefgh"))):
        answer, body = agentfiles.get(sock, "/workspace/a", 0, -1, None)
        assert answer["size"] == 10 and b"".join(body) == b"abcd"
    header["length"] = 6
    for sock in peer(lambda s: (lines(s), s.sendall(json.dumps(header).encode() + b"\nabc"))):
        _, body = agentfiles.get(sock, "/workspace/a", 0, -1, None)
        with pytest.raises(RuntimeFailure, match="3 bytes short"):
            b"".join(body)


@pytest.mark.parametrize(
    ("said", "match"),
    [
        (b"x" * 70_000, "too long"),
        (b"not json\n", "answered"),
        (b"[1, 2]\n", "answered"),
        (b'{"ok": true, "length": -5}\n', "promised"),
        (b'{"ok": true, "length": true}\n', "promised"),
        (b'{"ok": false, "code": "internal", "error": "cannot start get"}\n', "cannot start"),
        (b"", "without an answer"),
    ],
)
def test_what_the_sandbox_says_is_read_with_suspicion(said: bytes, match: str) -> None:
    for sock in peer(lambda s: (lines(s), s.sendall(said))):
        with pytest.raises(RuntimeFailure, match=match):
            agentfiles.get(sock, "/workspace/a", 0, -1, None)


# --- the way to the socket, on the real engine --------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_the_socket_is_reached_only_through_the_container_s_own_process(
    pipeline: Any, bot: Any, docker_engine: Any
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    runtime = get_runtime()
    # The agent listens a moment after its container starts (until then the engine's execs serve).
    reached: list[socket.socket] = []
    wait_for(
        lambda: bool(reached.append(runtime.agent_socket(sandbox.container_id)) or reached[-1]),
        10,
        lambda: "the agent never listened on its socket",
    )
    with reached[-1] as sock:
        sock.sendall(b'{"id": 1, "op": "ping"}\n')
        assert json.loads(sock.recv(4096))["version"] == str(PROTOCOL)
    # A process that is not the container's (as after its id was reused) is never entered.
    with pytest.raises(direct._NotThatContainer):
        direct._connect(1, sandbox.container_id)
    assert runtime.agent_socket("no-such-container") is None


@pytest.mark.docker
@pytest.mark.django_db
def test_a_server_not_allowed_into_containers_stops_asking_and_uses_the_engine(
    pipeline: Any, bot: Any, docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    runtime = DockerRuntime()
    tries = []

    def refused(pid: int, container: str) -> socket.socket:
        tries.append(pid)
        raise PermissionError(13, "Permission denied")  # as for a server that is not root

    monkeypatch.setattr(direct, "_connect", refused)
    assert runtime.agent_socket(sandbox.container_id) is None
    assert runtime.agent_socket(sandbox.container_id) is None
    assert len(tries) == 1


@pytest.mark.docker
def test_a_symlink_where_the_agent_s_directory_should_be_never_leads_to_this_machine(
    tmp_path: Any, docker_engine: Any
) -> None:
    """An image whose /.boxyard-run is an absolute symlink: followed from outside, it would lead
    to this machine's own path of that name, where a socket listens."""
    import docker  # the engine directly: a container Boxyard would never make

    host_dir = tmp_path / "evil"
    host_dir.mkdir()
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(host_dir / direct.AGENT_SOCKET_NAME))
    listening.listen()
    engine = docker.from_env()
    (tmp_path / "Dockerfile").write_text(
        f"FROM {settings.BOXYARD_TEST_IMAGE}\nUSER 0\nRUN ln -s {host_dir} /.boxyard-run\n"
    )
    image, _ = engine.images.build(path=str(tmp_path), tag="boxyard-test/symlinked:1", rm=True)
    container = engine.containers.run(image.id, ["sleep", "60"], detach=True, labels=labels_for())
    try:
        container.reload()
        with pytest.raises(OSError):
            direct._connect(container.attrs["State"]["Pid"], container.id)
    finally:
        container.remove(force=True)
        engine.images.remove(image.id, force=True)
        listening.close()


@pytest.mark.docker
@pytest.mark.django_db
def test_a_header_that_disagrees_with_itself_is_refused(
    pipeline: Any, bot: Any, docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A get's promised length must be what its size and the range asked for give: a program
    in the sandbox that says more is not believed (the response's length is its size)."""
    from sandboxes.services.files import reading

    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    header = {"ok": True, "size": 4, "mtime": 1, "inode": 2, "length": 99}
    for sock in peer(lambda s: (lines(s), s.sendall(json.dumps(header).encode() + b"\nabcd"))):
        monkeypatch.setattr(
            reading, "direct", lambda _sandbox, _actor, _sock=sock: (_sandbox, _sock)
        )
        with pytest.raises(RuntimeFailure, match="not its identity"):
            services.open_file_stream(sandbox, "a.txt")


@pytest.mark.docker
@pytest.mark.django_db
@pytest.mark.parametrize("swap", ["symlink", "another-users-socket"])
def test_what_replaces_the_agent_s_socket_is_never_connected_to(
    pipeline: Any, bot: Any, docker_engine: Any, tmp_path: Any, swap: str
) -> None:
    """Root in the container puts, where the agent's socket was, a symlink to a socket of this
    machine, or a socket of another user: the server connects to neither, and a file's bytes
    go through the engine's execs instead."""
    import os

    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.write_file(sandbox, "a.txt", b"through the engine", bot)
    runtime = get_runtime()
    assert isinstance(runtime, DockerRuntime)
    pid = runtime.api.inspect_container(sandbox.container_id)["State"]["Pid"]
    at = f"/proc/{pid}/root/.boxyard-run/{direct.AGENT_SOCKET_NAME}"
    os.unlink(at)
    listening = socket.socket(socket.AF_UNIX)
    if swap == "symlink":
        listening.bind(str(tmp_path / "host.sock"))  # a socket only this machine has
        os.symlink(tmp_path / "host.sock", at)
    else:
        listening.bind(at)
        os.chown(at, 1000, 1000)
    listening.listen()
    listening.setblocking(False)
    try:
        assert runtime.agent_socket(sandbox.container_id) is None
        with pytest.raises(BlockingIOError):
            listening.accept()  # nothing ever connected
        assert services.read_file(sandbox, "a.txt").data == b"through the engine"
        with pytest.raises(BlockingIOError):
            listening.accept()
    finally:
        listening.close()
