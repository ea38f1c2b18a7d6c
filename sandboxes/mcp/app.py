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
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from boxyard.errors import BoxyardError, problem
from boxyard.threads import in_pool
from sandboxes.mcp import gateway
from sandboxes.mcp.connection import CALLER, Caller, bearer_token, chat_variables
from sandboxes.mcp.server import sandbox_server
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
        self.sandboxes = StreamableHTTPSessionManager(
            sandbox_server(),
            max_request_body_size=limit,
            session_idle_timeout=settings.BOXYARD_MCP_SESSION_IDLE_SECONDS,
        )
        self.gateway = StreamableHTTPSessionManager(
            gateway.gateway_server(),
            max_request_body_size=limit,
            session_idle_timeout=settings.BOXYARD_MCP_SESSION_IDLE_SECONDS,
        )
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
            caller = Caller(principal, chat_variables(scope), scope)
            caller.http_request().get_host()  # ALLOWED_HOSTS, as for every other page
        except DisallowedHost:
            await _answer(send, 400, "invalid_input", "host: not an allowed host name")
            return
        except BoxyardError as error:
            answer = problem(error)
            await _send_json(send, answer.status, answer.body)
            return
        await self._start()
        user = AuthenticatedUser(AccessToken(token="", client_id=str(principal.actor), scopes=[]))
        scope = {**scope, "user": user, CALLER: caller}
        await manager.handle_request(dict(scope), receive, send)  # type: ignore[arg-type]  # starlette's own ASGI types

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
