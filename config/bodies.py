"""Request bodies read as they arrive, for uploads of any size.

Django's ASGI handler reads a whole body before the view runs (into memory, then a temporary
file). The routes named in `STREAMED` get a `StreamedBody` instead: the view, in a thread of
the request pool, reads it with `pieces(request)` (or `request.read(n)`) while the client is
still sending. A task on the event loop takes the server's messages and hands them to the
view's thread in parts of about 1 MiB (lists of the server's pieces, never joined: a large
block is a fresh mapping of memory, page by page), at most a few parts ahead; while the view has not taken them it stops asking,
and the server stops reading the socket. An upload holds a few MiB of the server's memory and
none of its disk, however large it is. Such an upload says its size first: `content_length`.
"""

import asyncio
import queue
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.http import HttpRequest

from boxyard.errors import N_, InvalidInput, LengthRequired, RequestTimeout
from boxyard.threads import waiting

Receive = Callable[[], Awaitable[Mapping[str, Any]]]

# (method, path) of the routes whose view reads its body as a stream: the bot API's uploads,
# an upload link's, and the dashboard's file browser's; and every call of the E2B sandbox API
# (its uploads, its client streams), which reads its bodies itself once the sandbox's token
# is checked (`sandboxes.e2b.envd`).
STREAMED = (
    ("PUT", re.compile(r"/api/v1/sandboxes/[^/]+/files/(?:raw|archive)")),
    ("PUT", re.compile(r"/links/[^/]+")),
    ("PUT", re.compile(r"/sandboxes/[^/]+/files/upload")),
    ("POST", re.compile(r"/e2b/sandbox/.+")),
)

PART_BYTES = 1024 * 1024
PARTS_AHEAD = 4

_END: list[bytes] = []
# Where the handler leaves the body in the request's scope, for `pieces`.
SCOPE_KEY = "boxyard.streamed_body"


def streams(scope: Mapping[str, Any]) -> bool:
    method, path = scope.get("method", ""), scope.get("path", "")
    return any(method == want and pattern.fullmatch(path) for want, pattern in STREAMED)


def pieces(request: Any, size: int = PART_BYTES) -> Iterator[bytes]:
    """A request's body as it arrives: the server's own pieces, passed on without being joined
    or copied, when the body streams; otherwise read `size` bytes at a time."""
    body = getattr(request, "scope", {}).get(SCOPE_KEY)
    if isinstance(body, StreamedBody):
        yield from body.pieces()
        return
    while part := request.read(size):
        yield part


def content_length(request: HttpRequest) -> int:
    """The upload's size, which it must say first: a write is refused before its first byte
    when it cannot fit, and an upload that ends short is told from a complete one."""
    return declared_length(request.headers.get("Content-Length"))


def declared_length(text: str | None) -> int:
    """`content_length` of a Content-Length header's value, however it was read."""
    if text is None:
        raise LengthRequired(
            N_("send the file's size as Content-Length (a chunked body is refused)")
        )
    if not text.isdigit():
        raise InvalidInput("Content-Length", N_("%(text)r is not a size in bytes", text=text[:40]))
    return int(text)


class StreamedBody:
    """The body of one request as a file whose `read` (from any thread but the event loop's)
    returns what the client has sent so far, waiting for more when there is none yet.

    `after()` is the `receive` left for the rest of the request: it waits until the body has
    been taken to its end, so that listening for the client's disconnect never takes a part
    of the body. `close()` (the handler's, on the loop) stops taking the body."""

    def __init__(self, receive: Receive, loop: asyncio.AbstractEventLoop) -> None:
        self._receive = receive
        self._loop = loop
        self._parts: queue.SimpleQueue[list[bytes] | BaseException] = queue.SimpleQueue()
        self._room = asyncio.Semaphore(PARTS_AHEAD)
        self._ended = asyncio.Event()
        self._taker: asyncio.Task[None] | None = None
        self._held: deque[bytes] = deque()
        self._done = False

    def pieces(self) -> Iterator[bytes]:
        """The body in the pieces the server received it in (no copy is made)."""
        while self._held:
            yield self._held.popleft()
        while (part := self._next_part()) is not None:
            yield from part

    def read(self, size: int = -1) -> bytes:
        held = sum(len(piece) for piece in self._held)
        while size < 0 or held < size:
            part = self._next_part()
            if part is None:
                break
            self._held.extend(part)
            held += sum(len(piece) for piece in part)
        data = b"".join(self._held)
        self._held.clear()
        if 0 <= size < len(data):
            data, rest = data[:size], data[size:]
            self._held.append(rest)
        return data

    def _next_part(self) -> list[bytes] | None:
        if self._done:
            return None
        with waiting():  # for the client
            if self._taker is None:
                asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
            part = self._parts.get()
        self._loop.call_soon_threadsafe(self._room.release)
        if isinstance(part, BaseException):
            self._done = True
            raise part
        if part is _END:
            self._done = True
            return None
        return part

    def close(self) -> None:
        self._held.clear()
        if self._taker is not None:
            self._taker.cancel()

    async def after(self) -> Mapping[str, Any]:
        await self._ended.wait()
        return await self._receive()

    async def _start(self) -> None:
        self._taker = asyncio.create_task(self._take())

    async def _take(self) -> None:
        part: list[bytes] = []
        size = 0
        try:
            while True:
                # A client that sends nothing for this long has gone: the upload ends (408).
                idle = settings.BOXYARD_BODY_IDLE_SECONDS
                try:
                    async with asyncio.timeout(idle):
                        message = await self._receive()
                except TimeoutError:
                    await self._put(
                        RequestTimeout(
                            N_(
                                "the client sent nothing of the upload for %(seconds)d s",
                                seconds=idle,
                            )
                        )
                    )
                    return
                if message["type"] == "http.disconnect":
                    await self._put(RequestAborted("the client went away before the body's end"))
                    return
                piece = message.get("body", b"")
                if piece:
                    part.append(piece)
                    size += len(piece)
                more = message.get("more_body", False)
                if size >= PART_BYTES or (part and not more):
                    await self._put(part)
                    part, size = [], 0
                if not more:
                    await self._put(_END)
                    return
        finally:
            self._ended.set()

    async def _put(self, part: list[bytes] | BaseException) -> None:
        await self._room.acquire()
        self._parts.put(part)
