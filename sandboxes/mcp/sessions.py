"""The MCP sessions of the handshake revisions, counted by pipeline, so that no pipeline can take
the sessions the others need.

One web process keeps every session in memory. A pipeline (all of its tokens together) may have
`BOXYARD_MCP_SESSIONS_PER_PIPELINE` open at a time: one more is refused with 429 and
`Retry-After`, while every other pipeline still connects (the SDK's own process-wide limit is
off, in favour of this one). A session that got nothing but its `initialize` ends after
`BOXYARD_MCP_UNUSED_SESSION_SECONDS` without a request; once it has been used (any request
but `initialize`), after `BOXYARD_MCP_SESSION_IDLE_SECONDS`. A request for a session that
has ended gets a JSON-RPC error saying so and how to go on.

The SDK's session manager is extended at two points (a session admitted, a session discarded);
everything else is the SDK's.
"""

import contextlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from boxyard.errors import BoxyardError
from boxyard.threads import in_pool
from sandboxes.mcp.connection import caller_of

# The pipeline whose request may open a session (set by the application around the SDK's call).
OPENING_PIPELINE: ContextVar[int | None] = ContextVar("boxyard_mcp_pipeline", default=None)
# The most of a request's body read to find its JSON-RPC id for an error's answer.
ID_READ_BYTES = 64 * 1024
# A JSON-RPC error of the implementation (the range -32000 to -32099 is the server's own).
TOO_MANY_SESSIONS = -32000


class TooManySessions(Exception):
    """A pipeline asked for one session more than it may have open."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


@dataclass
class _Open:
    pipeline: int
    transport: StreamableHTTPServerTransport
    used: bool = False


class SessionBook:
    """The open sessions of this process (of every MCP server), each with its pipeline."""

    def __init__(
        self,
        per_pipeline: int,
        unused_seconds: int,
        idle_seconds: int,
        on_end: Callable[[str], None] = lambda session_id: None,
    ) -> None:
        self.per_pipeline = per_pipeline
        self.unused_seconds = min(unused_seconds, idle_seconds)
        self.idle_seconds = idle_seconds
        self._on_end = on_end
        self._open: dict[str, _Open] = {}
        self._counts: Counter[int] = Counter()

    def count(self, pipeline: int) -> int:
        return self._counts[pipeline]

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._open

    def check(self, pipeline: int) -> None:
        if self._counts[pipeline] >= self.per_pipeline:
            raise TooManySessions(self.per_pipeline)

    def add(self, pipeline: int, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._open[session_id] = _Open(pipeline, transport)
        self._counts[pipeline] += 1

    def discard(self, session_id: str) -> bool:
        """The session ended: whether it was open (then `on_end` is to be called, in a
        thread: it may use the database)."""
        opened = self._open.pop(session_id, None)
        if opened is None:
            return False
        self._counts[opened.pipeline] -= 1
        if not self._counts[opened.pipeline]:
            del self._counts[opened.pipeline]
        return True

    def on_end(self, session_id: str) -> None:
        self._on_end(session_id)

    def used(self, session_id: str | None) -> None:
        """The session got a request besides `initialize`: it lives the full idle time from
        now on (the transport reads its idle time when each request ends)."""
        opened = self._open.get(session_id or "")
        if opened is not None and not opened.used:
            opened.used = True
            opened.transport._idle_timeout = self.idle_seconds  # the SDK's own

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        """A server middleware: a session's requests other than `initialize` mark it used."""
        if ctx.request_id is not None and ctx.method != "initialize":
            self.used(caller_of(ctx.request).session_id)
        result: HandlerResult = await call_next(ctx)
        return result


class CountedSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with each session admitted against its pipeline's limit and
    given the short life of an unused session until it is used."""

    def __init__(self, app: Any, book: SessionBook, max_request_body_size: int) -> None:
        super().__init__(
            app,
            max_request_body_size=max_request_body_size,
            session_idle_timeout=book.unused_seconds,
            max_sessions=None,  # the limit is the pipeline's (`SessionBook`), not the process's
        )
        self.book = book
        middleware: Any = book.middleware
        app.middleware = [middleware]

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        pipeline = OPENING_PIPELINE.get()
        assert pipeline is not None, "a session opened without a pipeline"
        self.book.check(pipeline)  # under the SDK's lock: no two requests pass it at once
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self.book.add(pipeline, transport.mcp_session_id, transport)
        return transport

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        if self.book.discard(session_id):
            with contextlib.suppress(BoxyardError):  # too busy: the row expires on its own
                await in_pool(self.book.on_end, session_id)
        await super()._discard_session(session_id, transport)


Receive = Callable[[], Awaitable[Mapping[str, Any]]]


class BodyWatch:
    """A request's `receive` that keeps the start of the body (to find the JSON-RPC id)."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.seen = bytearray()

    async def __call__(self) -> Mapping[str, Any]:
        message = await self._receive()
        if message.get("type") == "http.request" and len(self.seen) < ID_READ_BYTES:
            self.seen += message.get("body", b"")[: ID_READ_BYTES - len(self.seen)]
        return message

    async def read(self) -> bytes:
        """Read the body on (as far as `ID_READ_BYTES`), if nothing has read it yet."""
        more = True
        while more and len(self.seen) < ID_READ_BYTES:
            message = await self()
            more = message.get("type") == "http.request" and bool(message.get("more_body"))
        return bytes(self.seen)


def request_id(body: bytes) -> str | int | None:
    """The id of the JSON-RPC request in `body`, if it is one whole (else None)."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict):
        value = message.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
    return None


def error_body(
    identifier: str | int | None, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    error = types.ErrorData(code=code, message=message, data=data)
    return {
        "jsonrpc": "2.0",
        "id": identifier,
        "error": error.model_dump(mode="json", exclude_none=True),
    }


def ended_message(book: SessionBook) -> str:
    return (
        "MCP session not found: it has ended (a session ends after "
        f"{book.idle_seconds} s without a request, {book.unused_seconds} s if it got "
        "nothing but initialize; the client may have deleted it or the server restarted). "
        "Start a new session: send initialize without an Mcp-Session-Id."
    )


def too_many_message(limit: int) -> str:
    return (
        f"too many MCP sessions: this pipeline has {limit} open, its limit "
        "(BOXYARD_MCP_SESSIONS_PER_PIPELINE); end one (DELETE with its Mcp-Session-Id) or wait "
        "for an unused one to expire"
    )
