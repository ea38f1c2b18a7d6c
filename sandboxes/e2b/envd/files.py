"""envd's HTTP routes: `GET /files` (a file's bytes), `POST /files` (files written, from a
multipart body or a raw one) and `GET /health`.

An upload goes to the sandbox as it arrives (`config.bodies.StreamedBody`) through
`services.write_file`, which must know each file's size before its first byte: a raw body
says it (Content-Length); in a multipart body, a part that ends within the request's bound is
held and written whole, and a part longer than that is the body's last, whose size is what is
left of the body but the closing boundary. A 64 MiB file takes a few MiB of the server's
memory, and the workspace's quota refuses it before its first byte.
"""

import asyncio
import json
import posixpath
import re
from collections.abc import Iterator

from django.conf import settings

from boxyard.errors import N_, BoxyardError, InvalidInput
from boxyard.threads import in_pool, pulled
from config.bodies import StreamedBody, declared_length
from sandboxes import services
from sandboxes.downloads import PIECES_PER_HOP
from sandboxes.e2b.envd import paths
from sandboxes.e2b.envd.calls import Call, refuse_plain
from sandboxes.e2b.envd.connect import Message, send_unary

_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_FILENAME = re.compile(rb'filename="((?:[^"\\]|\\.)*)"', re.IGNORECASE)


async def health(call: Call) -> None:
    """204 while the sandbox runs; else 502 saying it "was not found", the words by which the
    SDK's `is_running` tells a sandbox that is not running."""
    if call.sandbox.state == "running":
        await call.send(
            {"type": "http.response.start", "status": 204, "headers": [(b"content-length", b"0")]}
        )
        await call.send({"type": "http.response.body", "body": b""})
        return
    said = f"sandbox {call.sandbox.pk} was not found running (it is {call.sandbox.state})"
    await send_unary(call.send, {"code": 502, "message": said}, 502)


async def download(call: Call) -> None:
    target = paths.to_workspace(call.query.get("path", ""))
    try:
        info, stream = await in_pool(services.open_file_stream, call.sandbox, target)
    except BoxyardError as error:
        await refuse_plain(call.send, error)
        return
    await call.send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(info.size_bytes).encode()),
            ],
        }
    )
    async for piece in pulled(stream, stream.close, batch=PIECES_PER_HOP):
        await call.send({"type": "http.response.body", "body": piece, "more_body": True})
    await call.send({"type": "http.response.body", "body": b""})


async def upload(call: Call) -> None:
    body = StreamedBody(call.receive, asyncio.get_running_loop())
    try:
        written = await in_pool(_upload, call, body)
    except BoxyardError as error:
        body.close()
        await refuse_plain(call.send, error)
        return
    data = json.dumps(written).encode()
    await call.send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await call.send({"type": "http.response.body", "body": data})


def _upload(call: Call, body: StreamedBody) -> list[Message]:
    """Every file of the body written, in order: what envd answers (name, type, path)."""
    length = declared_length(call.header(b"content-length"))
    kind = call.header(b"content-type") or "application/octet-stream"
    named = call.query.get("path")
    if not kind.lower().startswith("multipart/"):
        if not named:
            raise InvalidInput("path", N_("must be a non-empty path"))
        return [_write(call, named, body.pieces(), length)]
    match = _BOUNDARY.search(kind)
    if match is None:
        raise InvalidInput("Content-Type", "a multipart body must name its boundary")
    return _multipart(call, body, match.group(1).encode(), length, named)


def _write(call: Call, path: str, data: Iterator[bytes] | bytes, size: int) -> Message:
    target = paths.to_workspace(path)
    written = services.write_file(call.sandbox, target, data, call.actor, size=size)
    return {
        "name": posixpath.basename(written.path),
        "type": "file",
        "path": paths.to_home(written.path),
    }


def _multipart(
    call: Call, body: StreamedBody, boundary: bytes, length: int, named: str | None
) -> list[Message]:
    reader = _Reader(body.pieces())
    delimiter = b"\r\n--" + boundary
    closing = delimiter + b"--\r\n"
    reader.until(b"--" + boundary)  # the preamble
    written: list[Message] = []
    bound = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    while True:
        after = reader.take(2)
        if after == b"--":
            return written  # the closing boundary
        if after != b"\r\n":
            raise _not_multipart()
        headers = reader.until(b"\r\n\r\n", limit=16 * 1024)
        found = _FILENAME.search(headers) if headers is not None else None
        if found is None:
            raise InvalidInput("body", "each part must name its file (filename)")
        path = named if named and not written else found.group(1).decode("utf-8", "replace")
        data = reader.until(delimiter, limit=bound)
        if data is not None:
            written.append(_write(call, path, data, len(data)))
            continue
        # Longer than a part is held: the body's last, all that is left but its closing.
        size = length - reader.consumed - len(closing)
        written.append(_write(call, path, reader.rest(size, closing), size))
        return written


class _Reader:
    """A body's pieces read as a stream: up to a delimiter, a count of bytes, or the rest."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self.held = b""
        self.consumed = 0  # bytes of the body taken out of `held` so far

    def _fill(self) -> bool:
        piece = next(self._pieces, None)
        if piece is None:
            return False
        self.held += piece
        return True

    def _cut(self, count: int) -> bytes:
        taken, self.held = self.held[:count], self.held[count:]
        self.consumed += len(taken)
        return taken

    def take(self, count: int) -> bytes:
        while len(self.held) < count and self._fill():
            pass
        return self._cut(count)

    def until(self, delimiter: bytes, limit: int = 64 * 1024) -> bytes | None:
        """What comes before `delimiter` (which is taken too); None, with nothing taken,
        when `limit` bytes come first."""
        start = 0
        while (at := self.held.find(delimiter, start)) < 0:
            if len(self.held) > limit:
                return None
            start = max(0, len(self.held) - len(delimiter))
            if not self._fill():
                raise _not_multipart()
        taken = self._cut(at)
        self._cut(len(delimiter))
        return taken

    def rest(self, size: int, closing: bytes) -> Iterator[bytes]:
        """The next `size` bytes, as they come; the last of them only once `closing`, and
        nothing else, is seen to follow (a body that ends short gives fewer)."""
        left = size
        while left > 0 and (self.held or self._fill()):
            if len(self.held) > left:
                break
            piece = self._cut(len(self.held))
            left -= len(piece)
            yield piece
        while len(self.held) < left + len(closing) and self._fill():
            pass
        if self.held[left:] != closing:
            raise _not_multipart()
        yield self._cut(left)


def _not_multipart() -> InvalidInput:
    return InvalidInput("body", "is not a multipart/form-data body of files")
