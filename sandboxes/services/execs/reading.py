"""An exec as it runs: its output as numbered chunks (polled, or pushed as it comes), waiting
for its end, killing it. While its sandbox runs, the agent knows it; after, its record does."""

from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, InvalidInput, NotFound
from boxyard.later import Awaited, Get
from boxyard.threads import release_connection
from sandboxes.guard import acting_on
from sandboxes.models import Exec, ExecState, State
from sandboxes.runtime import answers
from sandboxes.runtime.port import SandboxPort, port_of
from sandboxes.services.execs.ending import finish_from_status, forgotten
from sandboxes.services.shares import long_call

_PAGE = 1024 * 1024
# The signals a caller may send an exec (the agent knows these).
SIGNALS = ("KILL", "TERM", "INT", "HUP")


class ExecOutput(NamedTuple):
    """A page of an exec's output: its chunks, the exec as it is now, and how many bytes of
    its output are no longer kept anywhere (see `dropped_bytes` in the schema)."""

    chunks: list[dict[str, Any]]
    record: Exec
    dropped_bytes: int


def exec_output_recording_end(
    record: Exec, since_seq: int = 0, max_bytes: int | None = None
) -> ExecOutput:
    """An exec's output as chunks numbered from 1: those after `since_seq` (the last seen),
    at most about `max_bytes` of them; and the exec as it is now. What the agent no longer
    keeps (its budget of all output was full, oldest first) is skipped, and counted.

    A read that writes: when the agent says the exec has ended (or no longer knows it), its
    end is recorded here if nothing recorded it first (`ending.end`)."""
    agent = _live_agent(record)
    if agent is not None:
        try:
            answer = agent.call(
                "output", exec=str(record.id), since_seq=since_seq, max_bytes=max_bytes or 0
            )
        except NotFound:
            record = forgotten(record)
        else:
            chunks = answers.chunks(answer.get("chunks"))
            if answer.get("finished") and record.state == ExecState.RUNNING:
                # The answer's chunks were read before the end was; a later read gets the rest.
                try:
                    status = _status(agent, record)
                except NotFound:
                    status = answer  # let go by the agent meanwhile: its end, as just read
                record = finish_from_status(record, status, agent)
            return ExecOutput(chunks, record, answers.count(answer.get("dropped_bytes")))
    elif record.state == ExecState.RUNNING and record.background:
        record = forgotten(record)
    return ExecOutput(exec_chunks(record, since_seq), record, _not_stored(record))


def _not_stored(record: Exec) -> int:
    """What its record does not hold of a finished exec's output (it holds the start)."""
    held = [(record.stdout_bytes, record.stdout), (record.stderr_bytes, record.stderr)]
    return sum(max(0, size - len(text.encode("utf-8", "surrogatepass"))) for size, text in held)


def exec_output_bytes(
    record: Exec, stream: Literal["stdout", "stderr"] = "stdout"
) -> Iterator[bytes]:
    """All of one stream of an exec's output that is kept (the agent keeps up to
    BOXYARD_EXEC_KEEP_BYTES, far beyond what an answer carries), as bytes, a page of about
    1 MiB at a time; for a running exec, what it has written so far."""
    agent = _live_agent(record)
    if agent is None:
        stored = record.stdout if stream == "stdout" else record.stderr
        return iter([stored.encode("utf-8", errors="surrogatepass")] if stored else [])
    return _pages(agent, record, stream)


def _pages(agent: SandboxPort, record: Exec, stream: str) -> Iterator[bytes]:
    since = 0
    while True:
        try:
            answer = agent.call("output", exec=str(record.id), since_seq=since, max_bytes=_PAGE)
        except NotFound:
            return  # let go by the agent meanwhile
        pieces = answer.get("chunks")
        if not isinstance(pieces, list) or not pieces:
            return
        for piece in pieces:
            if isinstance(piece, dict):
                since = max(since, answers.count(piece.get("seq")))
                if (piece.get("stream") == "stderr") == (stream == "stderr"):
                    yield answers.data(piece.get("data"))


def _status(agent: SandboxPort, record: Exec) -> dict[str, Any]:
    return agent.call(
        "status", exec=str(record.id), limit=record.sandbox.pipeline.output_limit_bytes
    )


def exec_chunks(record: Exec, since_seq: int = 0) -> list[dict[str, Any]]:
    """The output stored with a finished exec, as chunks numbered from 1 (at most two: one
    per stream; what the agent kept beyond them is gone with its sandbox)."""
    streams = [("stdout", record.stdout), ("stderr", record.stderr)]
    numbered = [(stream, text) for stream, text in streams if text]
    return [
        {"seq": seq, "stream": stream, "text": text}
        for seq, (stream, text) in enumerate(numbered, start=1)
        if seq > since_seq
    ]


def wait_exec(record: Exec, timeout_seconds: float) -> Exec:
    """The exec once it has finished, or as it is when the timeout runs out."""
    return await_exec(record, timeout_seconds, counted=False).block()


def await_exec(record: Exec, timeout_seconds: float, *, counted: bool = True) -> Awaited[Exec]:
    """`wait_exec` as a long call: the agent is asked here, and its answer waited for by
    whoever holds the result (on the event loop, with no thread, or in place). A caller's
    wait (`counted`) holds one of the pipeline's long calls meanwhile."""
    if record.state != ExecState.RUNNING:
        return Awaited.now(record)
    agent = _live_agent(record)
    if agent is None:  # its sandbox stopped: the reconciler records its end
        return Awaited.now(record)
    held = long_call(record.sandbox.pipeline_id) if counted else None
    try:
        request_id, answer = agent.ask(
            "wait",
            exec=str(record.id),
            timeout=timeout_seconds,
            limit=record.sandbox.pipeline.output_limit_bytes,
        )
    except BaseException:
        if held is not None:
            held.release()
        raise
    release_connection()  # not held while the agent is waited for

    def finish(get: Get) -> Exec:
        try:
            status = get()
        except NotFound:
            return forgotten(record)
        return finish_from_status(record, status, agent)

    return Awaited(
        answer,
        finish,
        deadline=timeout_seconds + 30,
        abandon=lambda: agent.forget(request_id),
        held=held,
        what="wait",
    )


def kill_exec(
    record: Exec,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    signal: str = "KILL",
) -> Exec:
    """Kill an exec and every process it started, wherever they went, also those it left
    running after it ended; answer once it has ended (or, for a `signal` it may handle, TERM
    or INT or HUP, after 10 s if it has not)."""
    if signal not in SIGNALS:
        raise InvalidInput("signal", N_("must be one of %(choices)s", choices=", ".join(SIGNALS)))
    with acting_on(
        record.sandbox, actor, N_("kill an exec"), holder=holder, epoch=epoch, states=tuple(State)
    ):
        pass  # the lease says whether the caller may; the agent does the killing
    agent = _live_agent(record)
    if agent is None:
        return record  # its sandbox stopped: so did every process of it
    try:
        agent.call("kill", exec=str(record.id), signal=signal)
    except NotFound:
        return forgotten(record)
    return wait_exec(record, 10)


def subscribe(
    record: Exec, since_seq: int, on_event: Callable[[dict[str, Any]], None]
) -> Callable[[], None] | None:
    """Deliver the exec's chunks after `since_seq`, then its end, to `on_event` as they come
    ({"event": "chunk", seq, stream, text} and {"event": "exit", ...}); returns the function
    that stops it, or None when the exec can only be read from its record."""
    agent = _live_agent(record)
    if agent is None:
        return None
    try:
        return agent.follow(str(record.id), since_seq, on_event)
    except NotFound:
        forgotten(record)
        return None


def _live_agent(record: Exec) -> SandboxPort | None:
    """The port of the agent that knows this exec, if it may still know it."""
    sandbox = record.sandbox
    if sandbox.state != State.RUNNING or not sandbox.container_id:
        return None
    try:
        return port_of(sandbox)
    except BoxyardError:
        return None
