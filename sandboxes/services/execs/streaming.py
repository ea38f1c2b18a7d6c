"""An exec's output pushed as it is produced, to its end: what an event stream (the API's
server-sent events) relays.

The stream gives `chunk` events ({seq, stream, text}) as the agent reads them (with `raw`,
{seq, stream, data}: the bytes as the command wrote them, where the agent pushes them; text
encoded as UTF-8 where only text is left: an exec read from its record, or a stream that fell
behind and reads the agent's copy), then exactly one end: `exit` ({exit_code, timed_out,
killed}, and done, status) or `gone` (the agent went away: {reason}). A silence of
KEEPALIVE_SECONDS gives a `keepalive`, for the relay to keep its connection open. A reader
that falls behind by more than BACKLOG_CHARS gets the rest read from the agent's copy of the
output, at its own pace; an exec only its record still knows is read from the record.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from boxyard.actors import Actor
from boxyard.relay import BoundedRelay
from boxyard.threads import in_pool
from sandboxes.models import Exec, ExecState, Sandbox
from sandboxes.services.execs.ending import finish_from_status
from sandboxes.services.execs.reading import exec_output_recording_end, subscribe, wait_exec
from sandboxes.services.execs.requests import ExecRequest
from sandboxes.services.execs.running import start_followed_exec

KEEPALIVE_SECONDS = 15
# Output queued for one stream at most (characters of text); and how often a stream that fell
# behind looks for new output once it has caught up.
BACKLOG_CHARS = 1024 * 1024
CATCH_UP_PAUSE_SECONDS = 0.25

Event = dict[str, Any]  # {"event": "chunk" | "exit" | "gone" | "keepalive", ...}


async def exec_events(
    record: Exec, since_seq: int, *, raw: bool = False
) -> AsyncGenerator[Event, None]:
    """The exec's events after chunk `since_seq`, to its end (see the module's docstring).
    With `raw`, a chunk carries its bytes as the command wrote them (`data`) instead of
    `text`."""
    async for event in _shaped(_subscribed(record, since_seq), raw):
        yield event


async def start_exec_events(
    sandbox: Sandbox, request: ExecRequest, actor: Actor, *, raw: bool = False
) -> tuple[Exec, AsyncGenerator[Event, None]]:
    """A background command started (`start_exec`) and its events from its first byte, as
    `exec_events(record, 0, raw=raw)` gives them, in one request to the agent: what a client
    that starts a command and follows it gets. Leaving the events early leaves it running."""
    relay = _relay()
    followed = await in_pool(start_followed_exec, sandbox, request, actor, relay.push)
    events = _followed(followed.record, 0, relay, followed.leave)
    return followed.record, _shaped(events, raw)


async def _shaped(events: AsyncGenerator[Event, None], raw: bool) -> AsyncGenerator[Event, None]:
    try:
        async for event in events:
            if event["event"] == "chunk":
                event = _as_bytes(event) if raw else _as_text(event)
            yield event
    finally:
        await events.aclose()  # its subscription stopped now, not when it is collected


def _as_text(chunk: Event) -> Event:
    return {name: value for name, value in chunk.items() if name != "data"}


def _as_bytes(chunk: Event) -> Event:
    data = chunk.get("data")
    if not isinstance(data, bytes):
        data = str(chunk.get("text", "")).encode()
    return {"event": "chunk", "seq": chunk["seq"], "stream": chunk["stream"], "data": data}


async def _subscribed(record: Exec, since_seq: int) -> AsyncGenerator[Event, None]:
    relay = _relay()
    stop = await in_pool(subscribe, record, since_seq, relay.push)
    if stop is None:
        chunks, record, _ = await in_pool(exec_output_recording_end, record, since_seq)
        for chunk in chunks:
            yield {"event": "chunk", **chunk}
        yield {"event": "exit", **_progress(record)}
        return
    async for event in _followed(record, since_seq, relay, stop):
        yield event


def _relay() -> BoundedRelay[Event]:
    return BoundedRelay(
        asyncio.get_running_loop(), BACKLOG_CHARS, lambda event: len(event.get("text", "")) + 64
    )


async def _followed(
    record: Exec, since_seq: int, relay: BoundedRelay[Event], stop: Callable[[], None]
) -> AsyncGenerator[Event, None]:
    """The events the agent pushes into `relay`, to the end. The end is recorded from the
    exit's report before the exit is told, so whoever hears of it finds it recorded; `stop`
    is called when the events end otherwise (the reader left, fell behind, or the agent went
    away)."""
    behind = recorded = False
    try:
        while True:
            try:
                event = await relay.get(timeout=KEEPALIVE_SECONDS)
            except TimeoutError:
                yield {"event": "keepalive"}
                continue
            if event is None:
                behind = True
                break
            if event["event"] == "chunk":
                since_seq = event["seq"]
            elif event["event"] == "exit":
                record = await _recorded(record, event)
                recorded = record.state != ExecState.RUNNING
            yield event
            if event["event"] in ("exit", "gone"):
                break
    finally:
        if not recorded:
            await in_pool(stop)
    if recorded:
        return
    if not behind:
        await in_pool(wait_exec, record, 5)  # its end recorded, as the agent reported it
        return
    async for event in _catch_up(record, since_seq):
        yield event


async def _recorded(record: Exec, event: Event) -> Exec:
    """The exec with its end recorded from the exit's report: by the recorder of a command
    followed from its start (`recorded`, a future), or here (`status`, the agent's report)."""
    recording = event.pop("recorded", None)
    status = event.pop("status", None)
    if recording is not None:
        ended: Exec = await asyncio.wrap_future(recording)
        return ended
    if status is None:
        return record
    return await in_pool(finish_from_status, record, status)


async def _catch_up(record: Exec, since_seq: int) -> AsyncIterator[Event]:
    """The rest of the output, from the agent's copy, then the end."""
    while True:
        chunks, record, _ = await in_pool(
            exec_output_recording_end, record, since_seq, BACKLOG_CHARS
        )
        for chunk in chunks:
            since_seq = chunk["seq"]
            yield {"event": "chunk", **chunk}
        if not chunks and record.state != ExecState.RUNNING:
            yield {
                "event": "exit",
                **_progress(record),
                "timed_out": record.state == ExecState.TIMED_OUT,
                "killed": record.state == ExecState.KILLED,
            }
            return
        if not chunks:
            await asyncio.sleep(CATCH_UP_PAUSE_SECONDS)


def _progress(record: Exec) -> Event:
    return {
        "done": record.state != ExecState.RUNNING,
        "status": record.state,
        "exit_code": record.exit_code,
    }
