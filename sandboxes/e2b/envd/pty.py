"""Commands on a pseudo-terminal (`sandbox.pty`): Boxyard's terminal service, as the
dashboard's terminal uses it, under the lease of the sandbox's pipeline.

A terminal is a socket this web process holds (the engine's attach stream), so an open pty
lives here, in `_OPEN`, from its `Start` to its end: its screen is read on the event loop and
handed to every stream that follows it (the one that started it, and any `Connect`); its end
is recorded by the terminal service. Input, resizing and a kill reach it through this process
only: with several web processes, a call about a pty that another one holds is refused
(FAILED_PRECONDITION, saying so), and the operator routes a sandbox's calls to one process
(by `E2b-Sandbox-Id`) to use ptys there. What one pipeline may hold open here is capped
(BOXYARD_E2B_PTYS_PER_PIPELINE, 429 past it), and each stream that follows a pty is one of
the pipeline's long calls.

Typing, resizing and a kill are changes of the sandbox: each asks the lease again
(`terminal.act_in_terminal`), so an admin's takeover refuses them until it is released.
"""

import asyncio
import base64
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings

from boxyard.errors import N_, BoxyardError
from boxyard.slots import Held, Slots
from boxyard.threads import in_pool
from sandboxes.e2b.envd import paths
from sandboxes.e2b.envd.calls import Call, until_gone
from sandboxes.e2b.envd.connect import ConnectError, Message, Stream, from_boxyard
from sandboxes.e2b.envd.outputs import ended, event, pid_of
from sandboxes.models import Exec
from sandboxes.runtime import Terminal
from sandboxes.services import terminal as terminal_service
from sandboxes.services.shares import long_call

TRANSCRIPT_BYTES = 1024 * 1024
# What a follower may fall behind by (pieces of the screen) before it is left out.
_BACKLOG = 1024
# The ptys one pipeline may have open in this web process.
PTYS = Slots("open ptys", lambda: settings.BOXYARD_E2B_PTYS_PER_PIPELINE, retry_after=5)


@dataclass
class _Pty:
    record: Exec
    terminal: Terminal
    loop: asyncio.AbstractEventLoop
    followers: set["asyncio.Queue[bytes | None]"] = field(default_factory=set)
    transcript: bytearray = field(default_factory=bytearray)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None
    pump: "asyncio.Task[None] | None" = None
    held: Held | None = None


_OPEN: dict[UUID, _Pty] = {}


def is_pty(record: Exec) -> bool:
    """Whether the exec is a terminal (a pty, wherever it is open)."""
    return record.session == "terminal"


def _entry(record: Exec) -> _Pty:
    entry = _OPEN.get(record.pk)
    if entry is None:
        raise ConnectError(
            "failed_precondition",
            f"pty {pid_of(record.pk)} is open in another web process of this Boxyard: a pty "
            "is reachable only through the web process that started it (route a sandbox's "
            "calls to one web process, by its E2b-Sandbox-Id, to use ptys)",
        )
    return entry


async def start(call: Call, request: Message) -> None:
    config = request.get("process") or {}
    size = (request.get("pty") or {}).get("size") or {}
    given = config.get("envs")
    envs: dict[str, str] = given if isinstance(given, dict) else {}
    cwd = paths.cwd_of(config.get("cwd") if isinstance(config.get("cwd"), str) else None)
    env = {"HOME": paths.HOME, "USER": paths.USER, "PWD": cwd, **envs}
    pipeline = f"pipeline:{call.sandbox.pipeline_id}"
    with long_call(call.sandbox.pipeline_id):
        held = PTYS.take(pipeline)  # given back by the pump, once the pty has ended
        try:
            terminal, record = await in_pool(
                terminal_service.open_terminal,
                call.sandbox,
                call.actor,
                cols=size.get("cols"),
                rows=size.get("rows"),
                holder="",
                env=env,
            )
        except BaseException:
            held.release()
            raise
        loop = asyncio.get_running_loop()
        entry = _Pty(record=record, terminal=terminal, loop=loop, held=held)
        _OPEN[record.pk] = entry
        queue = _follow(entry)
        entry.pump = asyncio.create_task(_pump(entry, call.actor), name=f"e2b-pty-{record.pk}")
        stream = Stream(call.send)
        await stream.message(event("start", {"pid": pid_of(record.pk)}))
        await _relay(call, entry, queue, stream)


async def connect(call: Call, record: Exec) -> None:
    entry = _entry(record)
    with long_call(call.sandbox.pipeline_id):
        queue = _follow(entry)
        stream = Stream(call.send)
        await stream.message(event("start", {"pid": pid_of(record.pk)}))
        await _relay(call, entry, queue, stream)


def _follow(entry: _Pty) -> "asyncio.Queue[bytes | None]":
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(_BACKLOG)
    entry.followers.add(queue)
    return queue


async def _relay(
    call: Call, entry: _Pty, queue: "asyncio.Queue[bytes | None]", stream: Stream
) -> None:
    async def relay() -> None:
        while (data := await queue.get()) is not None:
            await stream.message(event("data", {"pty": base64.b64encode(data).decode()}))
        await stream.message(event("end", ended(entry.exit_code, {"reason": "closed"})))

    try:
        await stream.run(until_gone(call, relay()))
    finally:
        entry.followers.discard(queue)


async def _pump(entry: _Pty, actor: Any) -> None:
    """The terminal's screen to its followers, then its end recorded and told."""
    loop = asyncio.get_running_loop()
    sock = entry.terminal.socket
    sock.setblocking(False)
    try:
        while data := await loop.sock_recv(sock, 65536):
            entry.transcript += data
            del entry.transcript[: max(0, len(entry.transcript) - TRANSCRIPT_BYTES)]
            for queue in list(entry.followers):
                if queue.full():  # too far behind: left out, told the stream is over
                    entry.followers.discard(queue)
                    queue.get_nowait()
                    queue.put_nowait(None)
                else:
                    queue.put_nowait(data)
    except OSError:
        pass
    finally:
        try:
            await in_pool(
                terminal_service.close_terminal,
                entry.record,
                entry.terminal,
                bytes(entry.transcript),
                actor,
            )
        except BoxyardError:
            pass  # its sandbox went away meanwhile
        entry.exit_code = entry.terminal.exit_code()
        _OPEN.pop(entry.record.pk, None)
        if entry.held is not None:
            entry.held.release()
        for queue in list(entry.followers):
            while queue.full():
                queue.get_nowait()
            queue.put_nowait(None)
        entry.ended.set()


def write(call: Call, record: Exec, data: bytes) -> None:
    """Type `data` into the pty (from a request thread), the lease asked first."""
    entry = _entry(record)
    terminal_service.act_in_terminal(call.sandbox, call.actor, N_("write to a process"), holder="")
    sent = asyncio.run_coroutine_threadsafe(
        entry.loop.sock_sendall(entry.terminal.socket, data), entry.loop
    )
    try:
        sent.result(timeout=30)
    except OSError as error:
        raise ConnectError("not_found", f"the pty is closed: {error}") from None


def resize(call: Call, record: Exec, cols: object, rows: object) -> None:
    entry = _entry(record)
    if not isinstance(cols, int) or not isinstance(rows, int) or cols < 1 or rows < 1:
        raise ConnectError("invalid_argument", "pty.size: give cols and rows, both at least 1")
    terminal_service.act_in_terminal(call.sandbox, call.actor, N_("write to a process"), holder="")
    try:
        entry.terminal.resize(
            min(cols, terminal_service.MAX_SIZE), min(rows, terminal_service.MAX_SIZE)
        )
    except BoxyardError as error:
        raise from_boxyard(error) from error


def kill(call: Call, record: Exec) -> None:
    """End the pty and everything it started: its socket is shut, the pump reads its end and
    the terminal service records it, ending what it left running."""
    entry = _entry(record)
    terminal_service.act_in_terminal(call.sandbox, call.actor, N_("kill an exec"), holder="")
    entry.terminal.close()
