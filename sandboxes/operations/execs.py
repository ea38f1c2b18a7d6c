"""Commands: run one, read its output, wait for it, kill it, look at it."""

from typing import Any

from boxyard.later import Awaited
from pipelines.models import Pipeline
from sandboxes import selectors, services
from sandboxes.models import Exec, Sandbox
from sandboxes.operations.record import Call, Context, Hints, Operation, Streams
from sandboxes.schemas import Fencing
from sandboxes.schemas.execs import (
    ExecIn,
    ExecOut,
    ExecOutputOut,
    KillOut,
    OutputQuery,
    WaitIn,
    WaitOut,
    exec_out,
    progress_out,
)

_SANDBOX = "/sandboxes/{sandbox_id}"
EXEC_PATH = _SANDBOX + "/execs/{exec_id}"
_READ = Hints(read_only=True, idempotent=True)


def clean_exec(target: Sandbox | Pipeline, body: ExecIn) -> services.ExecRequest:
    """The exec the body asks for, checked against the sandbox (or, before there is one, its
    pipeline)."""
    return services.clean_request(
        target,
        cmd=body.cmd,
        cwd=body.cwd,
        env=body.env,
        session=body.session,
        timeout_seconds=body.timeout_seconds,
        background=body.background,
        one_shot=body.fresh,
    )


def _checked(pipeline: Pipeline, body: ExecIn) -> None:
    clean_exec(pipeline, body)


def named_exec(context: Context, call: Call[Any]) -> Exec:
    """The exec the call names, in the sandbox it names, as the caller may see them."""
    who = context.principal
    return selectors.exec_for(who, selectors.sandbox_for(who, call.sandbox_id), call.exec_id)


def _start(context: Context, call: Call[ExecIn]) -> Awaited[Exec]:
    """A long call, whose answer comes once a foreground command has ended; the context's
    `watch` follows it as it runs."""
    who, body = context.principal, call.given
    sandbox = selectors.sandbox_for(who, call.sandbox_id)
    return services.start_exec(
        sandbox,
        clean_exec(sandbox, body),
        who.actor,
        holder=body.holder,
        epoch=body.epoch,
        watch=context.watch,
    )


def _output(context: Context, call: Call[OutputQuery]) -> Any:
    return services.exec_output_recording_end(
        named_exec(context, call), call.given.since_seq, call.given.max_bytes
    )


def _output_out(output: Any) -> dict[str, Any]:
    chunks, record, dropped = output
    return {"chunks": chunks, **progress_out(record), "dropped_bytes": dropped}


def _wait(context: Context, call: Call[WaitIn]) -> Awaited[Exec]:
    return services.await_exec(named_exec(context, call), call.given.timeout_seconds)


def _kill(context: Context, call: Call[Fencing]) -> Exec:
    given = call.given
    return services.kill_exec(
        named_exec(context, call), context.principal.actor, holder=given.holder, epoch=given.epoch
    )


EXEC = Operation[ExecIn, Exec](
    name="sandbox_exec",
    summary="Run a command",
    method="POST",
    path=_SANDBOX + "/exec",
    input=ExecIn,
    output=ExecOut,
    service=_start,
    present=exec_out,
    check=_checked,
    title="Run a command",
    description=(
        "Run a command in the sandbox and return exit_code, stdout and stderr. cmd is a "
        "shell string (run by a persistent shell, so pipes, && and redirections work, and "
        "cd, export and functions carry over to the next command) or an argv array. It "
        "starts in /workspace (or where an earlier cd went) as a non-root user, without "
        "network access unless this bot's pipeline enables it. Files under /workspace "
        "persist between calls and between messages. Output past the pipeline's limit is "
        "cut and truncated is true: send large output to a file and read parts of it. A "
        "command is killed at its timeout. For long jobs or servers set background: it "
        'returns at once with status "running" and an exec_id to use with '
        "sandbox_exec_read, sandbox_exec_wait and sandbox_exec_kill."
    ),
    hints=Hints(
        destructive=True, opens_chat_sandbox=True, networked=True, streams=Streams.ITS_COMMAND
    ),
)

GET_EXEC = Operation[None, Exec](
    name="exec_get",
    summary="One exec",
    method="GET",
    path=EXEC_PATH,
    output=ExecOut,
    service=named_exec,
    present=exec_out,
    hints=_READ,
)

EXEC_OUTPUT = Operation[OutputQuery, Any](
    name="sandbox_exec_read",
    summary="An exec's output as numbered chunks",
    method="GET",
    path=EXEC_PATH + "/output",
    input=OutputQuery,
    output=ExecOutputOut,
    service=_output,
    present=_output_out,
    title="Read a command's output",
    description=(
        "Read the output of a command started by sandbox_exec, as numbered chunks "
        "{seq, stream, text}, with done and exit_code. To poll, pass the seq of the last "
        "chunk you already have as since_seq to get only what came after it. Returns at "
        "once; use sandbox_exec_wait to block until the command ends."
    ),
    hints=_READ,
)

EXEC_WAIT = Operation[WaitIn, Exec](
    name="sandbox_exec_wait",
    summary="Wait for an exec",
    method="POST",
    path=EXEC_PATH + "/wait",
    input=WaitIn,
    output=WaitOut,
    service=_wait,
    present=progress_out,
    title="Wait for a command",
    description=(
        "Wait until a command started by sandbox_exec ends, or until timeout_seconds pass. "
        "Returns done and exit_code (null while it still runs); read its output with "
        "sandbox_exec_read."
    ),
    hints=Hints(read_only=True, idempotent=True, streams=Streams.NAMED_COMMAND),
)

EXEC_KILL = Operation[Fencing, Exec](
    name="sandbox_exec_kill",
    summary="Kill an exec",
    method="POST",
    path=EXEC_PATH + "/kill",
    input=Fencing,
    output=KillOut,
    service=_kill,
    present=lambda record: {"ok": True, "status": record.state},
    title="Kill a command",
    description=(
        "Kill a command started by sandbox_exec and every process it started, also those "
        "it left running in the background. Returns once it has ended, with its status."
    ),
    hints=Hints(destructive=True, idempotent=True),
)
