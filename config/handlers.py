"""Serving HTTP under ASGI: each request runs start to end in one thread of a shared pool.

Django's own ASGI handler runs the middleware chain on the event loop. Every middleware built
on Django's `MiddlewareMixin` (security, sessions, locale, CSRF, auth, messages...) then
hops to a thread and back for each of its hooks, so a request makes some fifteen thread hops
around its view; a plain view cost about 3 ms of CPU that way, against about 1 ms with the
chain run in one thread. Boxyard's views block by nature (the database, the container engine,
a command that runs for minutes), so this handler runs the whole synchronous chain,
middleware and view, as one call in a thread of the request pool, as a WSGI server would,
and leaves the event loop free for what must stay asynchronous: websockets, server-sent
events, slow clients.

A thread of the pool keeps its database connection between requests (within
`CONN_MAX_AGE`); an exec that waits gives its connection back while it waits, so the pool can
be larger than the database's connection limit.
"""

import asyncio
import io
from collections.abc import Awaitable, Callable, Mapping
from typing import IO, Any

from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from boxyard.errors import BoxyardError, problem
from boxyard.later import DEFERRING, Later
from boxyard.threads import in_pool, start_request_threads
from config.bodies import SCOPE_KEY, StreamedBody, streams


class PooledASGIHandler(ASGIHandler):
    """Django's ASGI handler with a synchronous middleware chain run in the request pool."""

    # Django cuts each piece of a response into slices of this size, each a copy: a file's
    # pieces (up to 256 KiB) are sent as they come. (Also the block a FileResponse reads:
    # below the size from which a block is a mapping of its own, `boxyard.heap`.)
    chunk_size = 512 * 1024

    def __init__(self) -> None:
        super().__init__()
        start_request_threads()

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Mapping[str, Any]]],
        send: Callable[[Mapping[str, Any]], Awaitable[None]],
    ) -> None:
        # Django's handler enters a ThreadSensitiveContext here, which starts a thread for each
        # request to run its thread-sensitive calls; here the request runs in a pool thread,
        # and what is left thread-sensitive (the request signals' receivers, closing the
        # response) takes a moment in asgiref's one shared thread.
        if scope["type"] != "http":
            raise ValueError(f"this handler serves HTTP, not {scope['type']}")
        if streams(scope):  # an upload: its view reads the body as it arrives
            body = StreamedBody(receive, asyncio.get_running_loop())
            scope = {**scope, SCOPE_KEY: body}
            receive = body.after
        await self.handle(scope, receive, send)

    async def read_body(self, receive: Callable[[], Awaitable[Mapping[str, Any]]]) -> IO[bytes]:
        body = getattr(receive, "__self__", None)
        if isinstance(body, StreamedBody):
            return body  # type: ignore[return-value]  # read and closed, as a file is
        # The gate (config.gate) has read the body already, within the route's bound: it
        # stays in memory, never in a temporary file.
        data = io.BytesIO()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestAborted()
            data.write(message.get("body", b""))
            if not message.get("more_body", False):
                break
        data.seek(0)
        return data

    async def listen_for_disconnect(
        self, receive: Callable[[], Awaitable[Mapping[str, Any]]]
    ) -> None:
        """Return when the client goes away, where Django's raises `RequestAborted`.

        `handle` ends the view when this returns, however it returns, and ignores a
        `RequestAborted`. But that exception, kept by its task, carries a traceback through
        `handle`'s frame, which holds the task: a reference cycle keeping the request, its
        body and its response (megabytes for a file) until a full garbage collection, which
        an idle server may not run for hours. Returning leaves no cycle."""
        message = await receive()
        if message["type"] != "http.disconnect":
            raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        try:
            response = await in_pool(self._respond, request)
        except BoxyardError as error:  # refused a turn of the request pool
            answer = problem(error)
            response = JsonResponse(answer.body, status=answer.status)
            for name, value in answer.headers.items():
                response[name] = value
            return response
        if isinstance(response, Later):
            # A long call: its answer is waited for here, on the event loop, with no thread.
            await response.settle()
        # A request lives in reference cycles (its user, messages and htmx details point back
        # at it) until a full garbage collection; the body it read (up to the upload limit)
        # is of no use once the view has answered, so it does not wait that long.
        request.__dict__.pop("_body", None)
        return response

    def _respond(self, request: HttpRequest) -> HttpResponseBase:
        DEFERRING.set(True)  # this thread's copy of the context: `Later` is settled above
        return self.get_response(request)
