"""Long calls that hold no thread while they wait.

A call that waits for a sandbox (an exec's end, a command run in the foreground) is made in
three steps: a thread of the request pool checks it and sends the request to the sandbox's
agent; the answer is waited for on the event loop, holding no thread (`Awaited.outcome`);
then a thread again records and renders it. A view answers such a call with `Later`, a
response whose content the server fills in once the answer has come (`config.handlers`); a
client that goes away meanwhile abandons the wait. Code that runs in a thread anyway (a task,
a command, a test client) waits in place: `Awaited.block`, and `SettleLater` for responses.
"""

import asyncio
import concurrent.futures
import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from boxyard.errors import N_, AgentTimeout, BoxyardError, Problem, problem
from boxyard.slots import Held
from boxyard.threads import waiting

T = TypeVar("T")
U = TypeVar("U")
log = logging.getLogger(__name__)

# Set in the request threads of the ASGI handler, which settles `Later` answers on its loop.
DEFERRING: ContextVar[bool] = ContextVar("boxyard_deferring", default=False)

Get = Callable[[], Any]  # the answer that came, or raises what came instead


def _nothing() -> None:
    pass


class Awaited(Generic[T]):
    """What a call will give once `answer` has come: `finish(get)` makes it (in a thread).
    `deadline`: seconds to wait at most; `abandon()` when nobody waits any more; `held` is
    given back at the end, however it ends."""

    def __init__(
        self,
        answer: "concurrent.futures.Future[Any] | None",
        finish: Callable[[Get], T],
        *,
        deadline: float | None = None,
        abandon: Callable[[], None] = _nothing,
        forget: Callable[[], None] | None = None,
        held: Held | None = None,
        what: str = "call",
        goes_on: bool = False,
    ) -> None:
        self.answer = answer
        self.finish = finish
        self.deadline = deadline
        self.abandon = abandon
        # Once the deadline has passed, the answer is given up for lost (default: `abandon`).
        self.forget = forget or abandon
        self.held = held
        self.what = what
        # Whether what was asked goes on when nobody waits (a command runs to its end): then
        # `abandon` sees to its end, and gives `held` back itself.
        self.goes_on = goes_on

    @classmethod
    def now(cls, value: T) -> "Awaited[T]":
        """A result known already."""
        return cls(None, lambda _get: value)

    def then(self, after: Callable[[T], U]) -> "Awaited[U]":
        """The same call, its result passed through `after` (in the same thread)."""
        finish = self.finish
        return Awaited(
            self.answer,
            lambda get: after(finish(get)),
            deadline=self.deadline,
            abandon=self.abandon,
            forget=self.forget,
            held=self.held,
            what=self.what,
            goes_on=self.goes_on,
        )

    def block(self) -> T:
        """Wait in this thread."""
        try:
            if self.answer is None:
                return self.finish(_none)
            try:
                with waiting():
                    self.answer.result(timeout=self.deadline)
            except concurrent.futures.TimeoutError:
                self.forget()
                return self.finish(self._timed_out)
            except BaseException:
                pass  # finish gets it from the answer
            return self.finish(self._answer)
        finally:
            self._release()

    async def outcome(self) -> T:
        """Wait on the event loop, holding no thread, then finish in a thread of the pool."""
        from boxyard.threads import in_pool

        gone = False
        try:
            if self.answer is None:
                return await in_pool(self.finish, _none)
            try:
                async with asyncio.timeout(self.deadline):
                    await asyncio.shield(asyncio.wrap_future(self.answer))
            except TimeoutError:
                self.forget()
                return await in_pool(self.finish, self._timed_out)
            except asyncio.CancelledError:
                gone = True  # the client went away
                self.abandon()
                raise
            except BaseException:
                pass  # finish gets it from the answer
            return await in_pool(self.finish, self._answer)
        finally:
            if not (gone and self.goes_on):
                self._release()

    def _answer(self) -> Any:
        assert self.answer is not None
        return self.answer.result(timeout=0)

    def _timed_out(self) -> Any:
        raise AgentTimeout(
            N_(
                "the sandbox agent did not answer %(op)r within %(seconds).0f s",
                op=self.what,
                seconds=self.deadline or 0,
            )
        )

    def _release(self) -> None:
        if self.held is not None:
            self.held.release()


def _none() -> None:
    return None


class Later(HttpResponse):
    """A JSON answer to come: `awaited` rendered to the body's dict, or its error as the API
    renders errors (or as `shape` renders them: a door with errors of its own shape)."""

    def __init__(
        self,
        awaited: Awaited[dict[str, Any]],
        shape: Callable[[BoxyardError], Problem] = problem,
    ) -> None:
        super().__init__(content_type="application/json")
        self.awaited = awaited
        self.shape = shape

    async def settle(self) -> None:
        """Wait for the answer on the event loop and fill this response in."""
        try:
            self._fill(200, await self.awaited.outcome(), {})
        except BoxyardError as error:
            self._fail(error)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a long call failed")
            self._fill(500, {"error": {"code": "internal", "message": "internal error"}}, {})

    def settle_here(self) -> None:
        """Wait in this thread and fill this response in."""
        try:
            self._fill(200, self.awaited.block(), {})
        except BoxyardError as error:
            self._fail(error)

    def _fail(self, error: BoxyardError) -> None:
        answer = self.shape(error)
        self._fill(answer.status, answer.body, answer.headers)

    def _fill(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.status_code = status
        self.content = json.dumps(body, cls=DjangoJSONEncoder).encode()
        self["Content-Length"] = str(len(self.content))
        for name, value in headers.items():
            self[name] = value


class SettleLater:
    """Middleware (the outermost): a `Later` answer is waited for in place where no event loop
    settles it (the test client, a WSGI server)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if isinstance(response, Later) and not DEFERRING.get():
            response.settle_here()
        return response
