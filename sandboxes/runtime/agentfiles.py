"""Files through a connection to the sandbox agent's own socket (`Runtime.agent_socket`).

The connection is the file's alone: one line asks for `put` or `get`, the agent starts that
program as the sandbox user on the connection itself, and the bytes go between Boxyard and
the file with nothing in between (the agent's `files.go` has the protocol). Its answers are
the file scripts' verdicts, as an `ExecResult` whose exit code is the verdict, so that the
services read them as they read the scripts'.

What comes back is the sandbox's to say and is read as such: answer lines are bounded, a
stream is never longer than its header promised, and a silence past the idle limit ends the
transfer.
"""

import json
import socket
from collections.abc import Iterable, Iterator
from typing import Any

from boxyard.errors import N_, RuntimeFailure
from boxyard.threads import waiting
from sandboxes.runtime import ExecResult
from sandboxes.runtime.streams import send_all

# A transfer whose other end says nothing for this long has stalled.
IDLE_SECONDS = 300
_ANSWER_BYTES = 64 * 1024
_PIECE = 256 * 1024  # below the allocator's mapping threshold (`boxyard.heap`)
_SEND_ROOM = 4 * 1024 * 1024
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)  # Linux's; Python names it from 3.12


def refusal(answer: dict[str, Any]) -> ExecResult:
    """A refusal as the result of a file script that exited with its verdict."""
    verdict = answer.get("verdict")
    message = str(answer.get("error") or "the sandbox agent refused").encode()
    code = verdict if isinstance(verdict, int) and not isinstance(verdict, bool) else 1
    return ExecResult(code, b"", message, 0, len(message), 0)


def put(
    sock: socket.socket, path: str, mode: str, overwrite: bool, size: int, data: Iterable[bytes]
) -> ExecResult:
    """Write `size` bytes of `data` to `path`; the result's exit code is the verdict (0: the
    file is in place). `data` that ends early or fails leaves nothing behind."""
    with sock:
        sock.settimeout(IDLE_SECONDS)
        reader = _Lines(sock)
        _ask(sock, ["put", path, mode, "1" if overwrite else "0", str(size)])
        ready = reader.answer()
        if not ready.get("ready"):
            return refusal(ready)
        _roomy(sock)
        try:
            send_all(sock, data)
        except OSError:
            pass  # the program stopped reading (a full disk): its answer says why
        except Exception:  # the source failed (a client that went away): the program sees
            pass  # its input end early, and says so
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        answer = reader.answer()
        return ExecResult(0, b"", b"", 0, 0, 0) if answer.get("ok") else refusal(answer)


def _roomy(sock: socket.socket) -> None:
    """Room for a few MiB on their way to the file: the program writing it stalls now and then
    (the disk, its memory limit's reclaim), and with the kernel's default of about 200 KiB
    in between, each stall stops the upload all the way back to the client (a fifth of the
    throughput of a GiB). Beyond the system's ceiling only with the right to raise it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, _SEND_ROOM)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_ROOM)


def get(
    sock: socket.socket, path: str, start: int, length: int, identity: str | None
) -> tuple[dict[str, Any], "Body"]:
    """The file's header (`ok`, then `size`, `mtime`, `inode`, `length`; or a refusal) and its
    `length` bytes from `start`, as they are read."""
    sock.settimeout(IDLE_SECONDS)
    reader = _Lines(sock)
    try:
        _ask(sock, ["get", path, str(start), str(length), *([identity] if identity else [])])
        header = reader.answer()
        promised = header.get("length", 0) if header.get("ok") else 0
        if not isinstance(promised, int) or isinstance(promised, bool) or promised < 0:
            raise RuntimeFailure(
                N_(
                    "the sandbox agent promised %(count)r bytes of %(path)s",
                    count=promised,
                    path=path,
                )
            )
    except BaseException:
        sock.close()
        raise
    body = Body(sock, reader.rest, promised, path)
    if not header.get("ok"):
        body.close()
    return header, body


class Body:
    """A file's bytes as they come from the connection, never more than promised; one that
    ends short raises RuntimeFailure. The connection closes at the end, or on `close()`."""

    def __init__(self, sock: socket.socket, first: bytes, length: int, path: str) -> None:
        self._sock = sock
        self._first = first[:length]
        self._length = length
        self._path = path

    def __iter__(self) -> Iterator[bytes]:
        try:
            left = self._length
            if self._first:
                left -= len(self._first)
                yield self._first
            while left > 0:
                try:
                    with waiting():
                        piece = self._sock.recv(min(left, _PIECE))
                except TimeoutError:
                    raise RuntimeFailure(N_("reading %(path)s stalled", path=self._path)) from None
                if not piece:
                    raise RuntimeFailure(
                        N_(
                            "%(path)s ended %(count)s bytes short (changed meanwhile)",
                            path=self._path,
                            count=left,
                        )
                    )
                left -= len(piece)
                yield piece
        finally:
            self.close()

    def close(self) -> None:
        self._sock.close()


def _ask(sock: socket.socket, argv: list[str]) -> None:
    sock.sendall(json.dumps({"op": "file", "argv": argv}).encode() + b"\n")


class _Lines:
    """Answer lines read from the connection; what came after the last one is `rest`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.rest = b""

    def answer(self) -> dict[str, Any]:
        data = self.rest
        while b"\n" not in data:
            if len(data) > _ANSWER_BYTES:
                raise RuntimeFailure(N_("the sandbox agent's answer is too long"))
            try:
                with waiting():
                    piece = self._sock.recv(_ANSWER_BYTES)
            except TimeoutError:
                raise RuntimeFailure(N_("the sandbox agent did not answer in time")) from None
            if not piece:
                raise RuntimeFailure(N_("the sandbox agent ended the transfer without an answer"))
            data += piece
        line, _, self.rest = data.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            raise RuntimeFailure(
                N_("the sandbox agent answered %(said)r", said=line[:80])
            ) from None
        if not isinstance(answer, dict):
            raise RuntimeFailure(N_("the sandbox agent answered %(said)r", said=line[:80]))
        if "verdict" not in answer and not answer.get("ok") and not answer.get("ready"):
            raise RuntimeFailure(N_("the sandbox agent failed: %(text)s", text=answer.get("error")))
        return answer
