"""A run of code's results pushed as the interpreter gives them, to the end: what a door that
streams (the bot API's NDJSON, E2B's /execute) relays.

The run is started (and refused, if it must be) before the stream is returned; the stream then
gives each result (`results`' shapes) in order, a `{"type": "keepalive"}` after
KEEPALIVE_SECONDS of silence, and last one `end`: the run's exec and how it ended. A reader
that falls behind by more than BACKLOG_CHARS gets the rest from the run's own record of its
results once it has ended. A reader that leaves lets the run go on to its end or timeout."""

import asyncio
from collections.abc import AsyncGenerator, Callable

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from boxyard.later import Awaited
from boxyard.relay import BoundedRelay
from sandboxes.models import Exec, ExecState, Sandbox
from sandboxes.services.code.results import Result
from sandboxes.services.code.running import CodeRun, start_code
from sandboxes.services.execs.requests import CodeRequest

KEEPALIVE_SECONDS = 5
BACKLOG_CHARS = 4 * 1024 * 1024


def start_code_stream(
    sandbox: Sandbox,
    request: CodeRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    started: Callable[[Exec], None] | None = None,
) -> AsyncGenerator[Result, None]:
    """Start a run now (its refusals raise here) and give its results as they come.
    `started` is told the run's record first (to interrupt it: `kill_exec`)."""
    relay: BoundedRelay[Result] = BoundedRelay(None, BACKLOG_CHARS, _size)
    awaited = start_code(
        sandbox,
        request,
        actor,
        holder=holder,
        epoch=epoch,
        on_result=relay.push,
        started=started,
    )
    return _streamed(relay, awaited)


def _size(result: Result) -> int:
    return sum(len(value) for value in result.values() if isinstance(value, str)) + 64


async def _streamed(
    relay: BoundedRelay[Result], awaited: Awaited[CodeRun]
) -> AsyncGenerator[Result, None]:
    outcome = asyncio.ensure_future(awaited.outcome())
    told = 0
    try:
        while not outcome.done():
            taking = asyncio.ensure_future(relay.get(KEEPALIVE_SECONDS))
            await asyncio.wait({taking, outcome}, return_when=asyncio.FIRST_COMPLETED)
            if not taking.done():
                taking.cancel()
                break
            try:
                item = taking.result()
            except TimeoutError:
                yield {"type": "keepalive"}
                continue
            if item is None or item["type"] == "end":
                break  # behind (the rest comes from the run's record), or the last line
            told += 1
            yield item
        run = await outcome
    except BoxyardError as error:
        yield {"type": "error", "name": type(error).__name__, "value": str(error), "traceback": ""}
        yield {"type": "end", "status": "failed", "execution_count": None}
        return
    finally:
        if not outcome.done():
            outcome.cancel()  # the reader left: the run goes on, its end recorded when it comes
    for item in run.outcome.results[told:]:
        if item["type"] != "end":
            yield item
    yield ended(run)


def ended(run: CodeRun) -> Result:
    """The stream's last line: how the run ended, and its exec."""
    record: Exec = run.record
    return {
        "type": "end",
        "status": _status(run),
        "execution_count": run.outcome.execution_count,
        "exec_id": str(record.pk),
        "context_id": record.session,
        "exec_status": record.state,
        "duration_ms": record.duration_ms,
    }


def _status(run: CodeRun) -> str:
    if run.record.state == ExecState.TIMED_OUT:
        return "timed_out"
    if run.record.state == ExecState.KILLED:
        return "killed"
    if run.outcome.error is not None or run.record.state != ExecState.COMPLETED:
        return "error"
    return "ok"
