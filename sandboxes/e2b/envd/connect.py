"""The Connect protocol as the E2B SDKs speak it to a sandbox: JSON over HTTP/1.1.

A unary call is `POST /<package>.<Service>/<Method>` with an `application/json` body and
answers JSON; an error is a non-200 status with `{"code", "message"}`. A streaming call
(`application/connect+json`) frames each message in an envelope, a flags byte and a
big-endian length, both ways; the answer is always 200 and ends with an end-of-stream envelope
(flag 0x02) that carries the error, if any. A client stream (several request messages) is read
envelope by envelope as it arrives.
"""

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from django.conf import settings

from boxyard.errors import BoxyardError

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
Message = dict[str, Any]
Headers = Sequence[tuple[bytes, bytes]]

END_STREAM = 0x02
_COMPRESSED = 0x01
_HEADER = struct.Struct(">BI")

# The Connect codes and the statuses a unary error is sent with.
STATUSES = {
    "canceled": 499,
    "invalid_argument": 400,
    "deadline_exceeded": 408,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 409,
    "aborted": 409,
    "unimplemented": 404,
    "unavailable": 503,
    "unauthenticated": 401,
    "internal": 500,
}
# Boxyard's statuses as Connect codes: the SDK raises its own exception for each.
_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    408: "deadline_exceeded",
    409: "failed_precondition",
    411: "invalid_argument",
    413: "resource_exhausted",
    416: "invalid_argument",
    423: "permission_denied",
    429: "resource_exhausted",
    503: "unavailable",
    504: "deadline_exceeded",
    507: "resource_exhausted",
}


class ConnectError(Exception):
    """An answer in Connect's terms: a code of `STATUSES` and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def from_boxyard(error: BoxyardError) -> ConnectError:
    code = _CODES.get(error.status, "unavailable" if error.status >= 500 else "invalid_argument")
    return ConnectError(code, error.message)


def invalid(field: str, message: str) -> ConnectError:
    return ConnectError("invalid_argument", f"{field}: {message}")


def streaming(scope: Scope) -> bool:
    """Whether the call is framed in envelopes (a streaming method)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bool(value.split(b";")[0].strip().startswith(b"application/connect+"))
    return False


class Body:
    """A request's body as it arrives, within BOXYARD_MAX_REQUEST_BYTES a message; a client
    that sends nothing for BOXYARD_BODY_IDLE_SECONDS has gone."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._held = bytearray()
        self._ended = False

    async def _more(self) -> bool:
        if self._ended:
            return False
        try:
            async with asyncio.timeout(settings.BOXYARD_BODY_IDLE_SECONDS):
                message = await self._receive()
        except TimeoutError:
            raise ConnectError("deadline_exceeded", "the client stopped sending") from None
        if message["type"] == "http.disconnect":
            raise ConnectError("canceled", "the client went away")
        self._held += message.get("body", b"")
        self._ended = not message.get("more_body", False)
        return True

    async def whole(self) -> bytes:
        bound = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        while await self._more():
            if len(self._held) > bound:
                raise ConnectError("resource_exhausted", f"a message is at most {bound} bytes")
        return bytes(self._held)

    async def messages(self) -> AsyncIterator[Message]:
        """The enveloped messages of a stream, each as it is complete."""
        bound = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        while True:
            while len(self._held) < _HEADER.size:
                if not await self._more():
                    if self._held:
                        raise invalid("body", "the stream ended inside an envelope")
                    return
            flags, length = _HEADER.unpack_from(self._held)
            if length > bound:
                raise ConnectError("resource_exhausted", f"a message is at most {bound} bytes")
            if flags & _COMPRESSED:
                raise ConnectError("unimplemented", "compressed messages are not taken")
            while len(self._held) < _HEADER.size + length:
                if not await self._more():
                    raise invalid("body", "the stream ended inside a message")
            data = bytes(self._held[_HEADER.size : _HEADER.size + length])
            del self._held[: _HEADER.size + length]
            if flags & END_STREAM:
                return
            yield decode(data)


def decode(data: bytes) -> Message:
    try:
        message = json.loads(data or b"{}")
    except ValueError:
        raise invalid("body", "is not JSON") from None
    if not isinstance(message, dict):
        raise invalid("body", "must be a JSON object")
    return message


async def read_request(scope: Scope, receive: Receive) -> Message:
    """The one request message of a unary or a server-streaming call."""
    body = Body(receive)
    if not streaming(scope):
        return decode(await body.whole())
    async for message in body.messages():
        return message
    return {}


def envelope(message: Message, flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return _HEADER.pack(flags, len(data)) + data


async def send_unary(
    send: Send, message: Message, status: int = 200, headers: Headers = ()
) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def send_error(
    send: Send, error: ConnectError, *, enveloped: bool, headers: Headers = ()
) -> None:
    """An error before anything else was sent: an end of stream for a streaming call."""
    if enveloped:
        stream = Stream(send, headers)
        await stream.end(error)
        return
    status = STATUSES.get(error.code, 400)
    await send_unary(send, {"code": error.code, "message": error.message}, status, headers)


class Stream:
    """A streaming answer: its messages, then its end (with the error, if any)."""

    def __init__(self, send: Send, headers: Headers = ()) -> None:
        self._send = send
        self._headers = headers
        self._started = False

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            await self._send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/connect+json"), *self._headers],
                }
            )

    async def message(self, message: Message) -> None:
        await self._start()
        await self._send(
            {"type": "http.response.body", "body": envelope(message), "more_body": True}
        )

    async def run(self, work: Awaitable[None], deadline: float | None = None) -> None:
        """Run `work` (which sends the stream's messages) within `deadline` seconds, then end
        the stream: cleanly, or with the error that stopped it."""
        try:
            async with asyncio.timeout(deadline):
                await work
        except TimeoutError:
            await self.end(ConnectError("deadline_exceeded", "the call's timeout passed"))
        except BoxyardError as error:
            await self.end(from_boxyard(error))
        except ConnectError as error:
            await self.end(error)
        else:
            await self.end()

    async def end(self, error: ConnectError | None = None) -> None:
        await self._start()
        trailer: Message = {}
        if error is not None:
            trailer["error"] = {"code": error.code, "message": error.message}
        await self._send({"type": "http.response.body", "body": envelope(trailer, END_STREAM)})
