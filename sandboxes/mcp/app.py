"""The ASGI application under `/mcp`: the pipeline's token checked, the chat's variables read,
then the MCP SDK's Streamable HTTP session manager of the server the path names.

`/mcp` is the sandbox tools' server (`server`), `/mcp/servers/{name}` the gateway to the managed
process `name` (`gateway`). Both speak every revision the SDK does: the handshake revisions,
with a session (`Mcp-Session-Id`) kept in this process, and the revision that needs none, each
request on its own. The managers run for the life of the process, started with its first MCP
request (the server serves no lifespan events).
"""

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from boxyard.errors import BoxyardError, problem
from boxyard.threads import in_pool
from sandboxes import services
from sandboxes.mcp import gateway
from sandboxes.mcp.connection import (
    CALLER,
    SESSION_HEADER,
    Caller,
    bearer_token,
    chat_variables,
    origin_of,
    session_key,
)
from sandboxes.mcp.server import sandbox_server
from sandboxes.mcp.sessions import (
    OPENING_PIPELINE,
    TOO_MANY_SESSIONS,
    BodyWatch,
    CountedSessionManager,
    SessionBook,
    TooManySessions,
    ended_message,
    error_body,
    request_id,
    too_many_message,
)
from sandboxes.selectors import principal_for_token

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

PREFIX = "/mcp"


def serves(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


class McpApplication:
    """`/mcp` and `/mcp/servers/{name}`: authentication, the chat's variables, the SDK."""

    def __init__(self) -> None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 32 * 1024 * 1024
        self.book = SessionBook(
            per_pipeline=settings.BOXYARD_MCP_SESSIONS_PER_PIPELINE,
            unused_seconds=settings.BOXYARD_MCP_UNUSED_SESSION_SECONDS,
            idle_seconds=settings.BOXYARD_MCP_SESSION_IDLE_SECONDS,
            on_end=lambda session_id: services.forget_session(session_key(session_id)),
        )
        self.sandboxes = CountedSessionManager(sandbox_server(), self.book, limit)
        self.gateway = CountedSessionManager(gateway.gateway_server(), self.book, limit)
        self._running: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        served = gateway.served_name(path)
        if path in (PREFIX, PREFIX + "/"):
            manager = self.sandboxes
        elif served is not None:
            manager = self.gateway
        else:
            await _answer(send, 404, "not_found", f"no MCP server at {path}")
            return
        token = bearer_token(scope)
        principal = await in_pool(principal_for_token, token) if token else None
        if principal is None or principal.pipeline is None:
            await _answer(
                send,
                401,
                "unauthorized",
                "a valid pipeline token is required (Authorization: Bearer ...)",
                {"WWW-Authenticate": "Bearer"},
            )
            return
        declared = {process.get("name") for process in principal.pipeline.processes or []}
        if served is not None and served not in declared:
            await _answer(
                send,
                404,
                "not_found",
                f"pipeline {principal.pipeline.slug} declares no process {served!r}",
            )
            return
        try:
            caller = Caller(principal, chat_variables(scope), scope, origin_of(scope))
        except DisallowedHost:
            await _answer(send, 400, "invalid_input", "host: not an allowed host name")
            return
        except BoxyardError as error:
            answer = problem(error)
            await _send_json(send, answer.status, answer.body)
            return
        await self._start()
        if self._ended(scope):
            body = await BodyWatch(receive).read() if scope.get("method") == "POST" else b""
            ended = error_body(request_id(body), INVALID_REQUEST, ended_message(self.book))
            await _send_json(send, 404, ended)
            return
        user = AuthenticatedUser(AccessToken(token="", client_id=str(principal.actor), scopes=[]))
        scope = {**scope, "user": user, CALLER: caller}
        watch = BodyWatch(receive)
        opening = OPENING_PIPELINE.set(principal.pipeline.pk)
        try:
            await manager.handle_request(dict(scope), watch, send)  # type: ignore[arg-type]  # starlette's own ASGI types
        except TooManySessions as error:
            data = {"limit": error.limit, "setting": "BOXYARD_MCP_SESSIONS_PER_PIPELINE"}
            refused = error_body(
                request_id(bytes(watch.seen)),
                TOO_MANY_SESSIONS,
                too_many_message(error.limit),
                data,
            )
            retry = {"Retry-After": str(self.book.unused_seconds)}
            await _send_json(send, 429, refused, retry)
        finally:
            OPENING_PIPELINE.reset(opening)

    def _ended(self, scope: Scope) -> bool:
        """Whether the request names a session of the handshake revisions that is not open
        (it ended, or never was)."""
        headers = dict(scope.get("headers", []))
        session = headers.get(SESSION_HEADER)
        version = headers.get(b"mcp-protocol-version")
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            return False  # a revision without sessions: the SDK answers it
        return session is not None and session.decode("latin-1") not in self.book

    async def _start(self) -> None:
        if self._running is None:
            self._running = asyncio.create_task(self._run(), name="mcp-session-managers")
        await self._ready.wait()

    async def _run(self) -> None:
        async with self.sandboxes.run(), self.gateway.run():
            self._ready.set()
            await asyncio.Event().wait()


async def _answer(
    send: Send, status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> None:
    await _send_json(send, status, {"error": {"code": code, "message": message}}, headers)


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
