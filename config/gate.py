"""The server's first look at every HTTP request: who calls, and whether the body may come in,
decided from the headers alone, before a byte of the body is read.

- The caller: a pipeline (its bearer token, or the `X-API-KEY` of E2B's SDKs), an admin
  (their session), or, without either, the client's address. The request and everything it runs carry it (`boxyard.slots.CALLER`),
  so each caller holds at most its share of the request pool's threads (`boxyard.threads`).
- A door with a credential of its own (`Door`: E2B's sandbox API, whose calls carry a
  sandbox's access token) names the pipeline of that credential, so its calls count as the
  pipeline's; a credential that does not match costs no lookup and leaves the caller anonymous.
- A pipeline past the operator's rate limit (BOXYARD_RATE_LIMIT) gets 429 with Retry-After,
  in the shape of the door it called.
- A body for the bot API or `/mcp` without a credential gets 401; a body larger than its
  route takes (BOXYARD_MAX_REQUEST_BYTES, BOXYARD_ANONYMOUS_REQUEST_BYTES without a
  credential) gets 413, by its Content-Length or, chunked, as soon as it passes the bound.
  Each is answered at once and the connection closed: the body is never read.
- A body the route reads whole is taken into memory here (never a temporary file), at most
  BOXYARD_BODY_BYTES_PER_CALLER of one caller's bodies at once (429 past it); a client that
  sends nothing for BOXYARD_BODY_IDLE_SECONDS gets 408. Upload routes stream their body to
  the sandbox instead (`config.bodies`), under the same idle limit.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.conf import settings

from boxyard.errors import (
    N_,
    BoxyardError,
    RequestTimeout,
    Throttled,
    TooLarge,
    problem,
)
from boxyard.slots import CALLER, Held, Slots
from config.bodies import streams
from config.ratelimit import refusal

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# Routes whose body only a credential may send: the bot API, the MCP server, the Bay API.
_CREDENTIAL_PREFIXES = ("/api/", "/mcp", "/bay/")
_SESSION_COOKIE = b"sessionid"

BODY_BYTES = Slots(
    "request body bytes", lambda: settings.BOXYARD_BODY_BYTES_PER_CALLER, retry_after=1
)
# Who a credential is: a few threads of their own, so that naming callers never waits for
# the request pool it shares out.
_identifying = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gate")


class Door(Protocol):
    """A part of the server whose callers prove who they are in a way of its own (not a
    pipeline's token nor an admin's session), and which answers refusals in its own shape."""

    def serves(self, path: str) -> bool: ...

    def credential(self, scope: Scope) -> str | None:
        """What the request proves, checked from its headers alone with no lookup (None:
        nothing; the caller is then its address)."""
        ...

    def known(self, credential: str) -> int | None:
        """The pipeline of a credential seen a moment ago, without a lookup (None: unknown)."""
        ...

    def pipeline_of(self, credential: str) -> int | None:
        """The pipeline whose call this is (a lookup, in one of the gate's own threads)."""
        ...

    async def refuse(self, scope: Scope, send: Send, error: BoxyardError) -> None: ...


class Gate:
    """ASGI middleware in front of the HTTP application (Django, the MCP server and the
    doors with credentials of their own)."""

    def __init__(self, app: App, doors: tuple[Door, ...] = ()) -> None:
        self.app = app
        self.doors = doors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        door = next((door for door in self.doors if door.serves(path)), None)
        caller, pipeline = await (_identify_at(door, scope) if door else _identify(scope))
        token = CALLER.set(caller)
        held: Held | None = None
        try:
            if pipeline is not None and (wait := refusal(pipeline)) is not None:
                error = _rate_limited(wait)
                await (door.refuse(scope, send, error) if door else send_error(send, error))
                return
            length, chunked = _length(scope)
            if not length and not chunked:
                await self.app(scope, receive, send)
                return
            anonymous = caller.startswith("address:")
            if anonymous and path.startswith(_CREDENTIAL_PREFIXES):
                await send_json(
                    send,
                    401,
                    {
                        "error": {
                            "code": "unauthorized",
                            "message": "a valid pipeline token is required "
                            "(Authorization: Bearer ...)",
                        }
                    },
                    [(b"www-authenticate", b"Bearer")],
                )
                return
            if streams(scope):  # an upload: streamed to the sandbox, never held here
                await self.app(scope, receive, send)
                return
            bound = (
                settings.BOXYARD_ANONYMOUS_REQUEST_BYTES
                if anonymous
                else settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            )
            if length is not None and length > bound:
                await send_error(send, _too_large(bound))
                return
            held = BODY_BYTES.take(caller, length if length is not None else bound)
            body = await _read(receive, bound)
            if body is None:
                return  # the client went away: nobody to answer
            await self.app(scope, _replay(body, receive), send)
        except (Throttled, TooLarge, RequestTimeout) as error:
            await send_error(send, error)
        finally:
            if held is not None:
                held.release()
            CALLER.reset(token)


async def _identify(scope: Scope) -> tuple[str, int | None]:
    """(caller, pipeline id) from the request's headers: `pipeline:<id>`, `admin:<user id>`
    or `address:<client address>` (no pipeline)."""
    authorization = cookie = None
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            authorization = value
        elif name == b"x-api-key":  # E2B's SDKs send a pipeline's token so
            authorization = authorization or b"Bearer " + value
        elif name == b"cookie":
            cookie = value
    if authorization is not None:
        scheme, _, token = authorization.decode("latin1").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            pipeline = _kept_pipeline(token.strip())  # a burst of one token's calls: no hop
            if pipeline is None:
                pipeline = await sync_to_async(
                    _pipeline_of, thread_sensitive=False, executor=_identifying
                )(token.strip())
            if pipeline is not None:
                return f"pipeline:{pipeline}", pipeline
    if cookie is not None:
        session = _cookie(cookie.decode("latin1"), _SESSION_COOKIE.decode())
        if session:
            user = await sync_to_async(_user_of, thread_sensitive=False, executor=_identifying)(
                session
            )
            if user is not None:
                return f"admin:{user}", None
    return _address(scope), None


async def _identify_at(door: Door, scope: Scope) -> tuple[str, int | None]:
    """(caller, pipeline id) of a door's request: the pipeline of its credential, or the
    client's address when it proves nothing (or what it proves is gone)."""
    credential = door.credential(scope)
    if credential is not None:
        pipeline = door.known(credential)  # a burst of one sandbox's calls: no hop
        if pipeline is None:
            pipeline = await sync_to_async(
                door.pipeline_of, thread_sensitive=False, executor=_identifying
            )(credential)
        if pipeline is not None:
            return f"pipeline:{pipeline}", pipeline
    return _address(scope), None


def _address(scope: Scope) -> str:
    client = scope.get("client") or ("unknown", 0)
    return f"address:{client[0]}"


def _kept_pipeline(token: str) -> int | None:
    from pipelines.selectors import kept_principal

    principal = kept_principal(token)
    return principal.pipeline.pk if principal is not None and principal.pipeline else None


def _pipeline_of(token: str) -> int | None:
    from pipelines.selectors import principal_for_token

    principal = principal_for_token(token)
    return principal.pipeline.pk if principal is not None and principal.pipeline else None


def _user_of(session_key: str) -> str | None:
    from django.contrib.sessions.backends.base import SessionBase
    from django.utils.module_loading import import_string

    store: type[SessionBase] = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
    user = store(session_key).load().get("_auth_user_id")
    return str(user) if user is not None else None


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip()
    return ""


def _length(scope: Scope) -> tuple[int | None, bool]:
    """(Content-Length or None, whether the body is chunked)."""
    length: int | None = None
    chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.strip().isdigit():
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    return length, chunked


async def _read(receive: Receive, bound: int) -> bytes | None:
    """The whole body, in memory (None: the client went away); 413 past `bound`, 408 when
    the client stops sending."""
    pieces: list[bytes] = []
    size = 0
    idle = settings.BOXYARD_BODY_IDLE_SECONDS
    while True:
        try:
            async with asyncio.timeout(idle):
                message = await receive()
        except TimeoutError:
            raise RequestTimeout(
                N_("the client sent nothing of the request body for %(seconds)d s", seconds=idle)
            ) from None
        if message["type"] == "http.disconnect":
            return None
        piece = message.get("body", b"")
        size += len(piece)
        if size > bound:
            raise _too_large(bound)
        if piece:
            pieces.append(piece)
        if not message.get("more_body", False):
            return b"".join(pieces)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body, read already, handed to the application as one message, then the client's
    own messages (its disconnect)."""
    sent = False

    async def replay() -> Mapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _too_large(bound: int) -> TooLarge:
    return TooLarge(
        N_(
            "the request body is larger than this route takes (%(bound)d bytes); send files "
            "through PUT /files/raw, which streams",
            bound=bound,
        ),
        limit=bound,
    )


def _rate_limited(wait: int) -> Throttled:
    from boxyard.errors import RateLimited

    return RateLimited(
        N_(
            "this pipeline has made more requests than the rate limit allows (%(limit)s); "
            "try again in %(wait)d s",
            limit=settings.BOXYARD_RATE_LIMIT,
            wait=wait,
        ),
        retry_after=wait,
    )


async def send_error(send: Send, error: BoxyardError) -> None:
    answer = problem(error)
    headers = [(name.lower().encode(), value.encode()) for name, value in answer.headers.items()]
    await send_json(send, answer.status, answer.body, headers)


async def send_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    """An answer sent before the request's body was read: the connection is closed after it,
    so what the client still sends is never read."""
    content = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode()),
                (b"connection", b"close"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})
