"""The server's memory stays bounded whatever a sandbox prints or a client sends or reads.

Every buffer on the paths of an exec's output and of a file's bytes holds at most a size
fixed in the code, however large the output or the file: the engine's stream framing, the
agent channel's lines, an event stream's backlog, a response body on its way to a slow
client. What a burst leaves behind goes back to the system (glibc's `malloc_trim`), and a
request leaves no reference cycle that would keep its body or its response until a full
collection. The server's resident size across floods is measured by
`bench/_server_rss.py`, not here.
"""

import asyncio
import base64
import gc
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

from boxyard import heap
from boxyard.errors import InvalidInput
from boxyard.relay import BoundedRelay
from hosts.engines import get_runtime
from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.runtime import agent as agent_module
from sandboxes.runtime.agent import AgentChannel
from sandboxes.runtime.streams import _CHUNK, FrameReader, LineBuffer, LineTooLong, frames
from tests.conftest import CHAT
from tests.fakes import FakeRuntime
from tests.security import _streaming_app

REPO = Path(__file__).resolve().parents[2]
FIFTY_MB = 50 * 1000 * 1000


def _header(stream: int, size: int) -> bytes:
    return struct.pack(">BxxxL", stream, size)


def _reads(data: bytes, size: int = _CHUNK) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


# --- the engine's stream framing ------------------------------------------------------------


def test_a_50_mb_frame_passes_in_pieces_of_one_read_with_only_a_header_held() -> None:
    payload = b"a" * FIFTY_MB
    stream = _header(1, len(payload)) + payload + _header(2, 5) + b"oops!"
    reader = FrameReader()
    received = {1: 0, 2: 0}
    largest = 0
    for data in _reads(stream):
        for kind, piece in reader.feed(data):
            received[kind] += len(piece)
            largest = max(largest, len(piece))
        assert reader.buffered <= 8
    assert received == {1: FIFTY_MB, 2: 5}
    assert largest <= _CHUNK


def test_headers_split_across_reads_are_put_together() -> None:
    stream = b"".join(_header(1 + i % 2, 3) + b"%03d" % i for i in range(100))
    reader = FrameReader()
    pieces = [piece for data in _reads(stream, 5) for piece in reader.feed(data)]
    out = b"".join(piece for kind, piece in pieces if kind == 1)
    err = b"".join(piece for kind, piece in pieces if kind == 2)
    assert out == b"".join(b"%03d" % i for i in range(0, 100, 2))
    assert err == b"".join(b"%03d" % i for i in range(1, 100, 2))


def test_frames_from_a_socket_never_gather_a_frame() -> None:
    """A writer sends one 50 MB frame at once; the reader gets it in pieces of one read."""
    ours, theirs = socket.socketpair()

    def write() -> None:
        theirs.sendall(_header(1, FIFTY_MB))
        for _ in range(FIFTY_MB // 1_000_000):
            theirs.sendall(b"b" * 1_000_000)
        theirs.close()

    writer = threading.Thread(target=write)
    writer.start()
    total, largest = 0, 0
    for kind, piece in frames(ours, time.monotonic() + 60):
        assert kind == 1
        total += len(piece)
        largest = max(largest, len(piece))
    writer.join()
    ours.close()
    assert total == FIFTY_MB
    assert largest <= _CHUNK


# --- the agent channel's lines ----------------------------------------------------------------


def test_many_lines_hold_at_most_one_unfinished_line() -> None:
    line = b"x" * 99 + b"\n"
    lines = LineBuffer(limit=1024)
    count = 0
    for data in _reads(line * (FIFTY_MB // len(line))):
        count += sum(1 for _ in lines.feed(data))
        assert lines.buffered < len(line)
    assert count == FIFTY_MB // len(line)


def test_a_line_past_the_limit_is_refused_before_it_is_held() -> None:
    lines = LineBuffer(limit=1024 * 1024)
    fed = 0
    with pytest.raises(LineTooLong):
        for data in _reads(b"y" * FIFTY_MB):
            list(lines.feed(data))
            fed += len(data)
            assert lines.buffered <= lines.limit
    assert fed <= lines.limit


class _Duplex:
    """The agent's side of a bridge, as the engine would deliver it: what the test queues
    comes out as stdout pieces; what the channel sends is kept."""

    def __init__(self) -> None:
        self.outgoing: list[bytes] = []
        self.sent = threading.Event()
        self.incoming: list[bytes | None] = []
        self.ready = threading.Condition()
        self.pulled = 0

    def send(self, data: bytes) -> None:
        self.outgoing.append(data)
        self.sent.set()

    def feed(self, *pieces: bytes | None) -> None:
        with self.ready:
            self.incoming.extend(pieces)
            self.ready.notify_all()

    def frames(self) -> Iterator[tuple[int, bytes]]:
        while True:
            with self.ready:
                self.ready.wait_for(lambda: bool(self.incoming))
                piece = self.incoming.pop(0)
            if piece is None:
                return
            self.pulled += len(piece)
            yield 1, piece

    def close(self) -> None:
        self.feed(None)


class _BridgeRuntime(FakeRuntime):
    def __init__(self, duplex: _Duplex) -> None:
        super().__init__()
        self.duplex = duplex

    def attach(self, container: str, argv: list[str], user: str | None = None) -> object:
        return self.duplex


@pytest.fixture
def bridge() -> Iterator[_Duplex]:
    from sandboxes.runtime import set_runtime

    duplex = _Duplex()
    set_runtime(_BridgeRuntime(duplex))
    yield duplex
    set_runtime(None)


def test_the_channel_delivers_a_20_mb_answer_and_keeps_none_of_it(bridge: _Duplex) -> None:
    channel = AgentChannel("c" * 64, get_runtime())
    answer: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: answer.update(channel.call("output", deadline=30)))
    caller.start()
    assert bridge.sent.wait(5)
    request_id = json.loads(bridge.outgoing[0])["id"]
    line = json.dumps({"id": request_id, "ok": True, "data": "z" * 20_000_000}).encode() + b"\n"
    tracemalloc.start()
    try:
        bridge.feed(*_reads(line))
        del line
        caller.join(30)
        assert len(answer["data"]) == 20_000_000
        answer.clear()
        # The reader goes back to waiting for the next line, not holding on to the last one.
        deadline = time.monotonic() + 2
        while (held := tracemalloc.get_traced_memory()[0]) >= 1_000_000:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    finally:
        tracemalloc.stop()
    assert held < 1_000_000
    channel.close()


def test_the_channel_stops_reading_a_line_past_its_limit(bridge: _Duplex, monkeypatch: Any) -> None:
    monkeypatch.setattr(agent_module, "_MAX_LINE", 1024 * 1024)
    channel = AgentChannel("d" * 64, get_runtime())
    bridge.feed(*_reads(b"w" * FIFTY_MB))
    deadline = time.monotonic() + 10
    while not channel.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert channel.closed
    assert bridge.pulled <= 1024 * 1024 + _CHUNK  # it stopped there: nothing more was read
    bridge.close()


# --- a file written from contents_b64 ------------------------------------------------------------


def test_contents_b64_is_decoded_a_slice_at_a_time_and_refused_before_the_write() -> None:
    from sandboxes.services.files import contents as files

    blob = os.urandom(16 * 1024 * 1024)
    size, chunks = files.decoded_contents(None, base64.b64encode(blob).decode())
    pieces = list(chunks)
    assert size == len(blob) and b"".join(pieces) == blob
    assert max(len(piece) for piece in pieces) <= files._B64_SLICE * 3 // 4
    late_padding = "A" * (files._B64_SLICE - 4) + "QQ==" + "QUJD"
    for bad in ("QQ=", "not base64!!", late_padding):
        with pytest.raises(InvalidInput):
            files.decoded_contents(None, bad)


# --- an event stream's backlog ------------------------------------------------------------------


def test_a_relay_holds_no_more_than_its_limit_for_a_consumer_that_does_not_read() -> None:
    async def scenario() -> tuple[list[int], list[bool], int]:
        relay: BoundedRelay[dict] = BoundedRelay(
            asyncio.get_running_loop(), 1024 * 1024, lambda item: len(item["text"])
        )
        accepted = [relay.push({"seq": seq, "text": "t" * 32768}) for seq in range(1, 1601)]
        held = relay.held
        got = []
        while (item := await relay.get(timeout=5)) is not None:
            got.append(item["seq"])
        return got, accepted, held

    got, accepted, held = asyncio.run(scenario())
    assert held <= 1024 * 1024
    assert accepted.count(True) == 32 and not any(accepted[32:])  # 50 MB pushed, 1 MiB kept
    assert got == list(range(1, 33))


# --- a response body on its way to a slow client -------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def streaming_server() -> Iterator[int]:
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "config.serving",
            "--port",
            str(port),
            "--app",
            "tests.security._streaming_app:application",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise AssertionError(
                    f"the server did not start: {server.stderr.read().decode()}"  # type: ignore[union-attr]
                ) from None
            time.sleep(0.1)
    yield port
    server.terminate()
    server.wait(10)


def _parts_made_before_reading(port: int) -> int:
    """Connect, ask for the body, read nothing for two seconds, then read it all: how many of
    its parts the server had made by the time the client started reading."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    client.connect(("127.0.0.1", port))
    client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    time.sleep(2)
    reading = time.monotonic()
    received = bytearray()
    total = _streaming_app.PART * _streaming_app.PARTS
    while (head_end := received.find(b"\r\n\r\n")) < 0 or len(received) < head_end + 4 + total:
        data = client.recv(1024 * 1024)
        if not data:
            break
        received += data
    client.close()
    body = bytes(received[head_end + 4 :])
    assert len(body) == total
    stamps = [struct.unpack(">d", body[i : i + 8])[0] for i in range(0, total, _streaming_app.PART)]
    return sum(1 for stamp in stamps if stamp < reading)


def test_a_slow_client_makes_the_server_wait_instead_of_buffering(streaming_server: int) -> None:
    # The application is held to what the sockets' buffers take, a few MiB of the 64 (a
    # server that buffers takes all 1024 parts at once).
    made = _parts_made_before_reading(streaming_server)
    assert made * _streaming_app.PART < 12 * 1024 * 1024, made


# --- what a request leaves behind ---------------------------------------------------------------


async def _served(scope: dict[str, Any], body: bytes) -> int:
    """One request through the server's application, the client leaving once answered (as
    the server tells the application when a response is complete)."""
    from config.asgi import application

    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbox.put_nowait({"type": "http.request", "body": body, "more_body": False})
    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif not message.get("more_body"):
            inbox.put_nowait({"type": "http.disconnect"})

    await application(scope, inbox.get, send)
    return status


@pytest.mark.django_db(transaction=True)
def test_a_request_leaves_neither_its_body_nor_its_response_to_the_garbage_collector(
    settings: Any, pipeline: Any
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    token = PipelineToken.issue(pipeline, name="memory")[1]
    body = json.dumps({"pipeline": "nobody", "variables": {"pad": "p" * 2_000_000}}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/sandboxes/open",
        "raw_path": b"/api/v1/sandboxes/open",
        "root_path": "",
        "query_string": b"",
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {token}".encode()),
        ],
    }
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        statuses = [asyncio.run(_served(scope, body)) for _ in range(3)]
        gc.collect()
        # Types only: looking into the objects would evaluate the lazy ones among them.
        responses = [o for o in gc.garbage if issubclass(type(o), HttpResponseBase)]
        bodies = [
            o for o in gc.garbage if issubclass(type(o), HttpRequest) and "_body" in o.__dict__
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert statuses == [404, 404, 404]  # the body was read: its pipeline is unknown
    assert responses == []
    assert bodies == []


# --- freed memory goes back ------------------------------------------------------------------------


def test_the_malloc_policy_is_set_unless_the_operator_chose(monkeypatch: Any) -> None:
    for variable in (
        "MALLOC_ARENA_MAX",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "GLIBC_TUNABLES",
    ):
        monkeypatch.delenv(variable, raising=False)
    assert heap.limit_malloc() == {
        "MALLOC_ARENA_MAX": heap.ARENA_MAX,
        "MALLOC_MMAP_THRESHOLD_": heap.MMAP_THRESHOLD,
        "MALLOC_TRIM_THRESHOLD_": heap.TRIM_THRESHOLD,
    }
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=65536")
    assert heap.limit_malloc() == {"MALLOC_MMAP_THRESHOLD_": heap.MMAP_THRESHOLD}


# What 200 MB written must at least add to the resident size for the tests below to mean
# anything (85%).
RESIDENT_AT_LEAST = 170_000_000


def _fragment(megabytes: int) -> tuple[list[bytes], int]:
    """Allocate `megabytes` in blocks small enough to come from an arena, then free all but
    one in fifty: the survivors pin the freed pages between them. Returns the survivors and
    the resident size at the height."""
    blocks = [b"\x01" * (64 * 1024) for _ in range(megabytes * 16)]  # written: resident
    return blocks[::50], heap.resident_bytes()


def _in_a_thread(function: Any) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join()
    return result[0]


def test_freed_memory_goes_back_to_the_system() -> None:
    heap.limit_malloc()
    before = heap.resident_bytes()
    survivors, height = _in_a_thread(lambda: _fragment(200))
    kept = heap.resident_bytes()
    assert heap.give_back()
    after = heap.resident_bytes()
    # Most of the 200 MB written became resident (not all: the process may hold pages freed by
    # earlier tests, which the allocation fills first).
    assert height - before > RESIDENT_AT_LEAST
    assert kept - before > 150_000_000, (
        "the freed blocks were given back before the test could look"
    )
    assert kept - after > 150_000_000
    del survivors


def test_the_watcher_gives_memory_back_after_a_burst_without_being_asked() -> None:
    heap.limit_malloc()
    stop = threading.Event()
    watcher = threading.Thread(target=heap.watch, args=(0.1, 32 * 1024 * 1024, stop), daemon=True)
    watcher.start()
    try:
        time.sleep(0.3)
        before = heap.resident_bytes()
        survivors, height = _in_a_thread(lambda: _fragment(200))
        assert height - before > RESIDENT_AT_LEAST
        deadline = time.monotonic() + 5
        while heap.resident_bytes() > height - 150_000_000 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert heap.resident_bytes() < height - 150_000_000
        del survivors
    finally:
        stop.set()
        watcher.join()


# --- an exec's flood, end to end, read slowly ------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_slow_event_stream_reader_gets_every_chunk_in_order(
    pipeline: Any, bot: Any, docker_engine: Any
) -> None:
    """A background exec prints 20 MB; its event stream's reader takes a pause of two
    seconds, long enough for the server's backlog to pass its bound. It still gets every
    chunk the agent kept, in order, then the end."""
    from sandboxes.api.sse import event_stream
    from sandboxes.services.execs.streaming import BACKLOG_CHARS as _BACKLOG_CHARS

    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    request = services.clean_request(
        sandbox, cmd="head -c 20000000 /dev/zero | tr '\\0' a", background=True
    )
    record = services.run_exec(sandbox, request, bot)

    async def read() -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        stream = event_stream(services.exec_events(record, 0)).streaming_content
        async for raw in stream:  # type: ignore[union-attr]
            if raw.startswith(b":"):
                continue
            head, data = raw.decode().split("\n", 1)
            events.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
            if len(events) == 1:
                await asyncio.sleep(2)
        return events

    events = asyncio.run(read())
    chunks = [data for kind, data in events if kind == "chunk"]
    kept = min(20_000_000, settings.BOXYARD_EXEC_KEEP_BYTES)
    assert [chunk["seq"] for chunk in chunks] == list(range(1, len(chunks) + 1))
    assert sum(len(chunk["text"]) for chunk in chunks) == kept
    assert kept > 2 * _BACKLOG_CHARS  # the pause did put the reader behind
    assert events[-1][0] == "exit" and events[-1][1]["exit_code"] == 0
