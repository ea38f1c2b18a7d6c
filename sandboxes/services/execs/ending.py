"""An exec's end, recorded once: from the agent's report, from a terminal's close, or as a
failure. An exec's states are a small table (`TRANSITIONS`): it starts `running` and ends once,
in one of the ended states, never to move again. `end` is the only writer of an exec's end: a
conditional update on `running`, so only the first report counts, and the request that waited
for it, a watcher thread and a later reader can all try. An end is activity of the sandbox,
and counted; its start and its end are said to the open dashboards (`announce`)."""

from typing import Any

from django.db import transaction
from django.utils import timezone

from boxyard.errors import NotFound
from sandboxes import live, metrics
from sandboxes.models import Exec, ExecState, Sandbox, stored_size
from sandboxes.runtime import answers
from sandboxes.runtime.port import SandboxPort, port_of

# Which states may follow which: an exec runs, then ends once; an ended exec never moves.
ENDED = frozenset(
    {
        ExecState.COMPLETED,
        ExecState.TIMED_OUT,
        ExecState.FAILED,
        ExecState.KILLED,
        ExecState.LOST,
    }
)
TRANSITIONS: dict[ExecState, frozenset[ExecState]] = {
    ExecState.RUNNING: ENDED,
    **{state: frozenset() for state in ENDED},
}
# The fields an exec's end writes; only `end` writes them.
END_FIELDS = frozenset({"state", "finished_at"})


def end(record: Exec, state: ExecState, *, said: bool = True, **values: Any) -> Exec:
    """End a running exec in `state` with `values` (its exit code, output, error …), if
    nothing ended it first: the first report counts, and a later one leaves the record as the
    first left it (`record` is then read again). `said`: the end is activity of the sandbox,
    counted and said to the dashboards (a terminal's is not)."""
    if state not in TRANSITIONS[ExecState.RUNNING]:
        raise ValueError(f"an exec does not end {state!r}")
    values = {**values, "state": state, "finished_at": timezone.now()}
    with transaction.atomic():
        updated = Exec.objects.filter(pk=record.pk, state=ExecState.RUNNING).update(**values)
        if updated and said:
            _ended(record, state, values.get("duration_ms", record.duration_ms))
    if not updated:  # another process recorded the end first: show what it recorded
        record.refresh_from_db()
        return record
    for name, value in values.items():
        setattr(record, name, value)
    return record


def finish_from_status(
    record: Exec, status: dict[str, Any], port: SandboxPort | None = None
) -> Exec:
    """Record an exec's end as the agent reports it (nothing if it has not ended); `port`
    reaches the agent for the first bytes of its output when the report does not carry them."""
    if not status.get("finished"):
        return record
    stdout_bytes = answers.count(status.get("stdout_bytes"))
    stderr_bytes = answers.count(status.get("stderr_bytes"))
    stdout, stderr = status.get("stdout"), status.get("stderr")
    if stdout is None and stderr is None and stdout_bytes + stderr_bytes:
        stdout, stderr = _heads(record, port)
    head_out, head_err = answers.data(stdout), answers.data(stderr)
    exit_code = answers.optional_int(status.get("exit_code"))
    exit_code = -1 if exit_code is None else exit_code
    if status.get("timed_out"):
        state = ExecState.TIMED_OUT
        error = f"timed out after {record.timeout_seconds} s; its processes were killed"
    elif status.get("killed"):
        state, error = ExecState.KILLED, "killed on request"
    elif exit_code < 0:
        state, error = ExecState.FAILED, str(status.get("error") or "the command could not run")
    else:
        state, error = ExecState.COMPLETED, ""
    notes = [error] if error else []
    if status.get("oom_killed") is True:
        notes.append("killed by the kernel: the sandbox ran out of memory (its memory_mb limit)")
    if status.get("session_restarted"):
        notes.append(
            "the command ended its shell; the session was started again with its last state"
        )
    if not record.background and (evicted := answers.count(status.get("evicted_bytes"))):
        notes.append(
            f"its first {evicted} bytes of output were dropped: the sandbox was keeping all "
            "the output its commands may keep (BOXYARD_AGENT_OUTPUT_BYTES)"
        )
    if left := answers.count(status.get("left_running")):
        deadline = (
            f"end when its timeout ({record.timeout_seconds} s) passes"
            if record.timeout_seconds
            else "run until killed"
        )
        notes.append(f"it left {left} process{'es' if left > 1 else ''} running, which {deadline}")
    values: dict[str, Any] = {
        "exit_code": exit_code,
        "stdout": head_out.decode("utf-8", errors="replace"),
        "stderr": head_err.decode("utf-8", errors="replace"),
        "stdout_bytes": max(stdout_bytes, len(head_out)),
        "stderr_bytes": max(stderr_bytes, len(head_err)),
        "stdout_truncated": stdout_bytes > len(head_out),
        "stderr_truncated": stderr_bytes > len(head_err),
        "session_restarted": status.get("session_restarted") is True,
        "oom_killed": status.get("oom_killed") is True,
        "duration_ms": answers.count(status.get("duration_ms")),
        "error": "; ".join(notes)[:2000],
    }
    values["output_size"] = stored_size(values["stdout"], values["stderr"])
    return end(record, state, **values)


def _heads(record: Exec, port: SandboxPort | None) -> tuple[object, object]:
    """The first bytes of each stream, from the agent, as it sends them (base64); nothing if
    it has let the exec go (it keeps finished ones within a cap)."""
    sandbox = record.sandbox
    try:
        if port is None:
            port = port_of(sandbox)
        status = port.call("status", exec=str(record.id), limit=sandbox.pipeline.output_limit_bytes)
    except NotFound:
        return None, None
    return status.get("stdout"), status.get("stderr")


def fail(record: Exec, state: ExecState, error: str) -> Exec:
    """The exec could not run, or its end cannot be known (`lost`)."""
    return end(record, state, error=error[:2000])


def forgotten(record: Exec) -> Exec:
    """The agent no longer knows a running exec (its sandbox restarted): it is lost."""
    if record.state == ExecState.RUNNING:
        record = end(
            record,
            ExecState.LOST,
            said=False,
            error="the sandbox's agent no longer knows this exec (the sandbox restarted)",
        )
        announce(record)
    return record


def announce(record: Exec, *, ended: bool = True) -> None:
    """Say that a command started or ended, once the transaction commits: the open pages of
    its sandbox show it (its row; at its end its session and the files; a background one in
    the processes too)."""
    live.changed(
        record.sandbox_id, None, live.command_parts(ended=ended, background=record.background)
    )


def _ended(record: Exec, state: ExecState, duration_ms: int | None) -> None:
    """An exec's end: activity of its sandbox (through the loaded sandbox when there is one,
    which knows when it was last stamped), counted, and said."""
    announce(record)
    sandbox: Sandbox | None
    if Exec.sandbox.is_cached(record) and Sandbox.pipeline.is_cached(record.sandbox):
        sandbox = record.sandbox
        sandbox.record_activity()
    elif sandbox := Sandbox.objects.select_related("pipeline").filter(pk=record.sandbox_id).first():
        sandbox.record_activity(force=True)
    if sandbox is not None:
        metrics.observe_exec(sandbox.pipeline.slug, state, duration_ms)
