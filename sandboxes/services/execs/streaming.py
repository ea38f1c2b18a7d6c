"""An exec's output pushed as it is produced, to its end: what an event stream (the API's
server-sent events) relays.

The stream gives `chunk` events ({seq, stream, text}) as the agent reads them (with `raw`,
{seq, stream, data}: the bytes as the command wrote them, where the agent pushes them; text
encoded as UTF-8 where only text is left: an exec read from its record, or a stream that fell
behind and reads the agent's copy), then exactly one end: `exit` ({exit_code, timed_out, killed}, and done, status) or `gone` (the agent went
away: {reason}). A silence of KEEPALIVE_SECONDS gives a `keepalive`, for the relay to keep
its connection open. A reader that falls behind by more than BACKLOG_CHARS gets the rest read
from the agent's copy of the output, at its own pace; an exec only its record still knows is
read from the record.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from boxyard.relay import BoundedRelay
from boxyard.threads import in_pool
from sandboxes.models import Exec, ExecState
from sandboxes.services.execs.reading import exec_output_recording_end, subscribe, wait_exec

KEEPALIVE_SECONDS = 15
# Output queued for one stream at most (characters of text); and how often a stream that fell
# behind looks for new output once it has caught up.
BACKLOG_CHARS = 1024 * 1024
CATCH_UP_PAUSE_SECONDS = 0.25

Event = dict[str, Any]  # {"event": "chunk" | "exit" | "gone" | "keepalive", ...}


async def exec_events(
    record: Exec, since_seq: int, *, raw: bool = False
) -> AsyncGenerator[Event, None]:
    """The exec's events after chunk `since_seq`, to its end (see the module's docstring)."""
    events = _events(record, since_seq)
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


async def _events(record: Exec, since_seq: int) -> AsyncGenerator[Event, None]:
    relay: BoundedRelay[Event] = BoundedRelay(
        asyncio.get_running_loop(), BACKLOG_CHARS, lambda event: len(event.get("text", "")) + 64
    )
    stop = await in_pool(subscribe, record, since_seq, relay.push)
    if stop is None:
        chunks, record, _ = await in_pool(exec_output_recording_end, record, since_seq)
        for chunk in chunks:
            yield {"event": "chunk", **chunk}
        yield {"event": "exit", **_progress(record)}
        return
    behind = False
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
            yield event
            if event["event"] in ("exit", "gone"):
                break
    finally:
        await in_pool(stop)
    if not behind:
        await in_pool(wait_exec, record, 5)  # its end recorded, as the agent reported it
        return
    async for event in _catch_up(record, since_seq):
        yield event


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
