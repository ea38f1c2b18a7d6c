"""The byte streams of the engine's execs: raw sockets, read and written without docker-py.

An exec started without a terminal speaks Docker's multiplexed stream: frames of an 8-byte
header (stream, size) and a payload. One with a terminal carries raw bytes both ways. The
engine calls that start execs and ask for their exit codes stay in `runtime.docker`; what
is here only moves bytes, and takes those calls as functions.
"""

import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from boxyard.errors import N_, ExecDeadlineExceeded
from boxyard.threads import waiting

STDOUT, STDERR = 1, 2
_CHUNK = 64 * 1024
_STDERR_KEPT = 64 * 1024


class FrameReader:
    """Docker's multiplexed stream parsed as it arrives: 8-byte headers (stream, size), each
    followed by its payload.

    A header may announce up to 4 GiB; the payload is passed on in the pieces it arrives in
    rather than gathered into a frame, so between reads nothing is held but a header's
    eight bytes, however long the frames or the stream."""

    def __init__(self) -> None:
        self._header = bytearray()
        self._stream = 0
        self._left = 0  # payload bytes of the current frame still to come

    @property
    def buffered(self) -> int:
        return len(self._header)

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """(stream, payload piece) for what `data`, the next bytes read, carries."""
        position, end = 0, len(data)
        while position < end:
            if self._left == 0:
                take = min(8 - len(self._header), end - position)
                self._header += data[position : position + take]
                position += take
                if len(self._header) == 8:
                    self._stream, self._left = struct.unpack(">BxxxL", self._header)
                    self._header.clear()
                continue
            take = min(self._left, end - position)
            self._left -= take
            whole = position == 0 and take == end
            yield self._stream, data if whole else data[position : position + take]
            position += take


def frames(sock: socket.socket, deadline: float | None) -> Iterator[tuple[int, bytes]]:
    """Demultiplex Docker's attach stream into (stream, bytes) pieces of at most one read."""
    reader = FrameReader()
    while True:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ExecDeadlineExceeded(N_("the command's output stream did not end in time"))
            with waiting():
                ready, _, _ = select.select([sock], [], [], remaining)
            if not ready:
                continue
        try:
            with waiting():
                data = sock.recv(_CHUNK)
        except TimeoutError:
            raise ExecDeadlineExceeded(
                N_("the command's output stream went silent for too long")
            ) from None
        if not data:
            return
        yield from reader.feed(data)


class LineTooLong(ValueError):
    """A line passed the length a `LineBuffer` holds."""


class LineBuffer:
    """A byte stream split into lines, holding at most one unfinished line of `limit` bytes.

    Each read is searched once, from where the unfinished line left off, so a line as long
    as the limit costs one pass over its bytes, not one per read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._partial = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._partial)

    def rest(self, at_most: int) -> bytes:
        """The start of the unfinished line (to say what a stream ended with)."""
        return bytes(self._partial[:at_most])

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The lines `data` completes, without their line breaks. Raises LineTooLong when the
        unfinished line would pass the limit (the stream cannot be followed any further)."""
        start = 0
        newline = data.find(b"\n")
        if newline >= 0 and self._partial:
            self._hold(len(self._partial) + newline)
            self._partial += memoryview(data)[:newline]
            line = bytes(self._partial)
            self._partial = bytearray()  # a long line's buffer is given back, not kept
            yield line
            start = newline + 1
            newline = data.find(b"\n", start)
        while newline >= 0:
            yield data[start:newline]
            start = newline + 1
            newline = data.find(b"\n", start)
        if start < len(data):
            self._hold(len(self._partial) + len(data) - start)
            self._partial += memoryview(data)[start:]

    def _hold(self, size: int) -> None:
        if size > self.limit:
            raise LineTooLong(f"a line passed {self.limit} bytes")


# stdin is written in batches of about this size, one system call for many pieces.
_STDIN_BATCH = 1024 * 1024


def feed_stdin(sock: socket.socket, chunks: Iterable[bytes]) -> threading.Thread:
    """Write stdin from a thread, so a command that talks back while reading never deadlocks."""

    def feed() -> None:
        try:
            send_all(sock, chunks)
        except OSError:
            pass  # the command stopped reading (it failed or exited); its output says why
        except Exception:  # the source failed (a client that went away):
            pass  # the command sees its input end early, and says so
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    thread = threading.Thread(target=feed, name="exec-stdin", daemon=True)
    thread.start()
    return thread


def send_all(sock: socket.socket, chunks: Iterable[bytes]) -> None:
    """Send every piece, gathered into batches written with one `sendmsg` each, never
    joined."""
    batch: list[bytes] = []
    size = 0
    for chunk in chunks:
        if chunk:
            batch.append(chunk)
            size += len(chunk)
        if size >= _STDIN_BATCH or len(batch) >= _MAX_PIECES:
            with waiting():
                send_pieces(sock, batch)
            batch, size = [], 0
    with waiting():
        send_pieces(sock, batch)


_MAX_PIECES = 256  # well under the kernel's IOV_MAX (1024)


def send_pieces(sock: socket.socket, pieces: list[bytes]) -> None:
    sendmsg = getattr(sock, "sendmsg", None)
    if sendmsg is None:  # an engine over SSH: a channel, which has no sendmsg
        sock.sendall(b"".join(pieces))
        return
    views = [memoryview(piece) for piece in pieces if piece]
    while views:
        sent = sendmsg(views)
        while sent and views:
            if sent >= len(views[0]):
                sent -= len(views.pop(0))
            else:
                views[0] = views[0][sent:]
                sent = 0


def close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    close_quietly(sock)


class SocketExecStream:
    """stdout of a running exec as an iterator of chunks; stderr is kept up to 64 KiB."""

    def __init__(self, sock: socket.socket, exit_code: Callable[[], int | None]) -> None:
        self._sock = sock
        self._exit_code = exit_code
        self._stderr = bytearray()
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for stream, data in frames(self._sock, None):
                if stream == STDOUT:
                    yield data
                elif stream == STDERR and len(self._stderr) < _STDERR_KEPT:
                    self._stderr += data[: _STDERR_KEPT - len(self._stderr)]
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            close_quietly(self._sock)

    @property
    def stderr(self) -> bytes:
        return bytes(self._stderr)

    def exit_code(self) -> int | None:
        return self._exit_code()


class SocketTerminal:
    """An exec on a pseudo-terminal: no stream headers, just the terminal's bytes."""

    def __init__(
        self,
        sock: socket.socket,
        resize: Callable[[int, int], None],
        exit_code: Callable[[], int | None],
    ) -> None:
        self.socket = sock
        self._resize = resize
        self._exit_code = exit_code

    def resize(self, cols: int, rows: int) -> None:
        self._resize(cols, rows)

    def close(self) -> None:
        _shutdown(self.socket)

    def exit_code(self) -> int | None:
        return self._exit_code()


class SocketDuplex:
    """stdin and the demultiplexed output of a long-lived exec."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(data)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        try:
            yield from frames(self._sock, None)
        except OSError:
            return

    def close(self) -> None:
        _shutdown(self._sock)
