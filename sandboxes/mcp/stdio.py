"""A managed process that speaks MCP over stdio, as a peer of this web process.

Requests are JSON-RPC lines written to the process's stdin (`services.write_stdin`, under the
lease like any write), with ids of this peer's own, so several web processes and the bot API
can share one process: each takes from its output only the answers to its own ids. The
output is followed as the agent reads it (`services.follow_output`), never polled. The peer
greets the process once (`initialize`, then `notifications/initialized`); a process that was
greeted before (by another web process) may refuse a second greeting, which is of no
consequence.

A peer lives as long as the process's run: when the run ends (a crash, a restart, the sandbox
stopping), every request still waiting fails at once with `ProcessExited`, and the next request
makes a new peer, waiting a few seconds for the process to be started again.
"""

import asyncio
import contextlib
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from boxyard.actors import Actor
from boxyard.errors import BoxyardError, InvalidInput
from boxyard.threads import in_pool
from sandboxes import services
from sandboxes.models import Sandbox

# The revision the peer greets with (the newest of the handshake); servers answer with theirs.
GREETING_VERSION = "2025-11-25"
# How long a request waits for its answer, and a new peer for the process to run again.
ANSWER_SECONDS = 600.0
RESTART_WAIT_SECONDS = 15.0
MAX_LINE_CHARS = 16 * 1024 * 1024

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


class ProcessExited(BoxyardError):
    """The process ended (or its sandbox stopped) before it answered."""

    code = "mcp_server_exited"
    status = 502


@dataclass
class PeerError(Exception):
    """The process answered with a JSON-RPC error."""

    code: int
    message: str
    data: Any = None


class ProcessPeer:
    """One run of one managed process, spoken to over its stdin and output."""

    def __init__(self, sandbox: Sandbox, name: str, actor: Actor) -> None:
        self.sandbox = sandbox
        self.name = name
        self.actor = actor
        self.loop = asyncio.get_running_loop()
        self.generation = 0
        self.ended: str | None = None  # why the run is over, once it is
        self._prefix = f"boxyard-{uuid.uuid4().hex[:12]}-"
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._progress: dict[str, Progress] = {}
        self._partial = ""
        self._stop: Callable[[], None] | None = None
        # Per request, the last of its progress reports: each waits for the one before, and
        # the answer waits for the last, so the client gets them in order and before it.
        self._reported: dict[str, asyncio.Future[None]] = {}

    async def start(self) -> None:
        """Follow the process's output, waiting for it to run again if it is restarting, then
        greet it."""
        with anyio.move_on_after(RESTART_WAIT_SECONDS):
            while True:
                try:
                    self.generation, self._stop = await in_pool(
                        services.follow_output, self.sandbox, self.name, self._from_thread
                    )
                    break
                except InvalidInput as error:
                    if error.field != "process":
                        raise
                    await asyncio.sleep(0.25)  # in its backoff: it is started again soon
        if self._stop is None:
            raise ProcessExited(
                f"the MCP server {self.name} is not running and was not started again within "
                f"{RESTART_WAIT_SECONDS:.0f} s; see its output (processes/{self.name}/output)"
            )
        with contextlib.suppress(PeerError):
            await self.request(
                "initialize",
                {
                    "protocolVersion": GREETING_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "boxyard-gateway", "version": "1"},
                },
                timeout=30,
            )
        await self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def close(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            await in_pool(stop)

    async def request(
        self,
        method: str,
        params: dict[str, Any],
        *,
        timeout: float = ANSWER_SECONDS,
        on_progress: Progress | None = None,
        actor: Actor | None = None,
    ) -> Any:
        """Send a request and wait for its result; a JSON-RPC error raises `PeerError`, the
        run's end `ProcessExited`; a cancelled wait is passed on as `notifications/cancelled`."""
        if self.ended is not None:
            raise ProcessExited(self.ended)
        request_id = f"{self._prefix}{next(self._ids)}"
        answer = self.loop.create_future()
        self._waiting[request_id] = answer
        if on_progress is not None:
            self._progress[request_id] = on_progress
            params = {**params, "_meta": {**params.get("_meta", {}), "progressToken": request_id}}
        try:
            await self._write(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, actor
            )
            with anyio.fail_after(timeout):
                result = await answer
            reported = self._reported.get(request_id)
            if reported is not None:
                with anyio.move_on_after(5):
                    await asyncio.shield(reported)
            return result
        except TimeoutError:
            raise ProcessExited(
                f"the MCP server {self.name} did not answer {method} within {timeout:.0f} s"
            ) from None
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), contextlib.suppress(BoxyardError):
                await self._write(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": "cancelled by the client"},
                    },
                    actor,
                )
            raise
        finally:
            self._waiting.pop(request_id, None)
            self._progress.pop(request_id, None)
            self._reported.pop(request_id, None)

    async def _write(self, message: dict[str, Any], actor: Actor | None = None) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        await in_pool(services.write_stdin, self.sandbox, self.name, line, actor or self.actor)

    def _from_thread(self, event: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self._take, event)

    def _take(self, event: dict[str, Any]) -> None:
        if event["event"] == "chunk":
            if event["stream"] == "stdout":
                self._feed(event["text"])
            return
        if event["event"] == "exit":
            self._end(
                f"the MCP server {self.name} exited (exit code {event.get('exit_code')}) before "
                "it answered; Boxyard starts it again after a short backoff: try again"
            )
        else:
            self._end(f"the MCP server {self.name} is gone: {event.get('reason') or 'stopped'}")

    def _feed(self, text: str) -> None:
        *lines, self._partial = (self._partial + text).split("\n")
        if len(self._partial) > MAX_LINE_CHARS:
            self._partial = ""  # not a line of JSON-RPC: a process writing something else
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # the process's own chatter on stdout
            if isinstance(message, dict):
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        answer = self._waiting.get(str(message.get("id")))
        if answer is not None and not answer.done() and "method" not in message:
            error = message.get("error")
            if isinstance(error, dict):
                answer.set_exception(
                    PeerError(
                        int(error.get("code", -32603)),
                        str(error.get("message", "")),
                        error.get("data"),
                    )
                )
            else:
                answer.set_result(message.get("result"))
            return
        if message.get("method") == "notifications/progress":
            params = message.get("params") or {}
            token = str(params.get("progressToken"))
            report = self._progress.get(token)
            if report is not None and isinstance(params.get("progress"), int | float):
                total, text = params.get("total"), params.get("message")
                self._reported[token] = asyncio.ensure_future(
                    _after(
                        self._reported.get(token),
                        report(
                            params["progress"],
                            total if isinstance(total, int | float) else None,
                            text if isinstance(text, str) else None,
                        ),
                    )
                )

    def _end(self, reason: str) -> None:
        self.ended = reason
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ProcessExited(reason))
        self._stop = None  # the agent ends the subscription with the run


async def _after(previous: "asyncio.Future[None] | None", report: Awaitable[None]) -> None:
    if previous is not None:
        with contextlib.suppress(Exception):
            await previous
    await report


_peers: dict[tuple[str, str], ProcessPeer] = {}
_opening: dict[tuple[str, str], asyncio.Lock] = {}


async def peer(sandbox: Sandbox, name: str, actor: Actor) -> ProcessPeer:
    """This process's peer of the process `name` of `sandbox`, started if there is none for
    its current run."""
    key = (str(sandbox.pk), name)
    lock = _opening.setdefault(key, asyncio.Lock())
    async with lock:
        current = _peers.get(key)
        if current is not None and current.ended is None:
            return current
        for ended in [k for k, known in _peers.items() if known.ended is not None]:
            del _peers[ended]
        fresh = ProcessPeer(sandbox, name, actor)
        await fresh.start()
        _peers[key] = fresh
        return fresh
