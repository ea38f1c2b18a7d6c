"""Backpressure for response bodies sent through daphne.

daphne hands each `http.response.body` message to Twisted at once, and Twisted's transport
buffers whatever it is given. A body sent in parts (a file download, an exec's server-sent
events, a large JSON answer) to a client that reads slowly would pile up in the server's
memory, as much as the whole file. Twisted knows when its buffer is full: it tells the
request's registered streaming producer to pause, and to resume once the buffer has drained.
`paced` makes the ASGI `send` such a producer, so a body part waits until the client has
taken the ones before, and the server holds about one buffer per response.
"""

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

# An ASGI `send` as Django's handler types it: a message is a mapping with its "type".
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class _PacedSend:
    """An ASGI `send` that is also the Twisted request's push producer (`pauseProducing`,
    `resumeProducing` and `stopProducing` are called by Twisted, on the event loop)."""

    def __init__(self, request: Any, send: Send) -> None:
        self._request = request
        self._send = send
        self._writable = asyncio.Event()
        self._writable.set()
        self._registered = False

    def pauseProducing(self) -> None:
        self._writable.clear()

    def resumeProducing(self) -> None:
        self._writable.set()

    def stopProducing(self) -> None:  # the connection is going away: stop waiting
        self._writable.set()

    async def __call__(self, message: Mapping[str, Any]) -> None:
        if message["type"] != "http.response.body":
            await self._send(message)
            return
        if message.get("more_body", False):
            if not self._registered:
                self._registered = self._register()
            try:
                await self._writable.wait()
            except BaseException:
                self._unregister()  # cancelled (the client left): free the channel
                raise
        else:
            self._unregister()  # before the last part: sending it finishes the request
        await self._send(message)

    def _register(self) -> bool:
        try:
            self._request.registerProducer(self, True)
        except (RuntimeError, ValueError):
            return False  # another producer holds the request: send unpaced
        return True

    def _unregister(self) -> None:
        if self._registered:
            self._registered = False
            self._writable.set()
            try:
                self._request.unregisterProducer()
            except (AttributeError, RuntimeError, ValueError):
                pass  # the connection is gone already


def paced(send: Send) -> Send:
    """`send` with backpressure when it is daphne's (its server's reply handler bound to the
    request, a Twisted `Request`); any other server's `send` is returned as it is."""
    if isinstance(send, functools.partial) and send.args:
        request = send.args[0]
        if callable(getattr(request, "registerProducer", None)) and callable(
            getattr(request, "unregisterProducer", None)
        ):
            return _PacedSend(request, send)
    return send
