"""One request to a sandbox's envd, as every handler of the door gets it: the sandbox, who
acts, the request's ASGI parts; and what handlers share: running until the client goes, and
refusing a plain HTTP route's request."""

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from sandboxes.e2b.envd.connect import Receive, Scope, Send, send_unary
from sandboxes.models import Sandbox


@dataclass(frozen=True)
class Call:
    """One request to a sandbox's envd: the sandbox, who acts (the sandbox's pipeline through
    this door) and the request's ASGI parts."""

    sandbox: Sandbox
    actor: Actor
    scope: Scope
    receive: Receive
    send: Send

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.scope.get("query_string", b"").decode("latin-1")))

    def header(self, name: bytes) -> str | None:
        for key, value in self.scope.get("headers", ()):
            if key == name:
                return str(value.decode("latin-1"))
        return None

    def deadline(self) -> float | None:
        """The seconds the client gives the call (`Connect-Timeout-Ms`), if it says."""
        said = self.header(b"connect-timeout-ms")
        return int(said) / 1000 if said and said.isdigit() and int(said) > 0 else None


Handler = Callable[[Call], Awaitable[None]]


def actor_for(sandbox: Sandbox) -> Actor:
    """Who acts through this door: the sandbox's pipeline's bot, named as the E2B API's."""
    return Actor("bot", f"{sandbox.pipeline.slug}/e2b")


async def until_gone(call: Call, work: Coroutine[Any, Any, None]) -> None:
    """Run `work` until it ends or the client goes away (then it is cancelled)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(call))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.done() and not task.cancelled():
        task.result()


async def _disconnected(call: Call) -> None:
    while (await call.receive())["type"] != "http.disconnect":
        pass


async def refuse_plain(send: Send, error: BoxyardError) -> None:
    """An error of `/files` once its handler runs, with Boxyard's own status (the SDK knows
    507, the workspace full, as its own)."""
    await send_unary(send, {"code": error.status, "message": error.message}, error.status)
