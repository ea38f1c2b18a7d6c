"""What runs in a sandbox besides its execs: shell sessions and the pipeline's managed
processes."""

from typing import Any

from sandboxes import services
from sandboxes.operations.record import Call, Context, Hints, Operation
from sandboxes.operations.sandboxes import SANDBOX_PATH, named_sandbox
from sandboxes.schemas import Fencing, FencingQuery
from sandboxes.schemas.files import DeleteOut
from sandboxes.schemas.shells import (
    ProcessListOut,
    ProcessOut,
    ProcessOutputOut,
    ProcessOutputQuery,
    SessionIn,
    SessionListOut,
    SessionOut,
    StdinIn,
    StdinOut,
)

Answer = dict[str, Any]
SESSIONS_PATH = SANDBOX_PATH + "/sessions"
PROCESS_PATH = SANDBOX_PATH + "/processes/{name}"


def _as_it_is(answer: Answer) -> Answer:
    """A service's answer that is already the output's shape."""
    return answer


def _create_session(context: Context, call: Call[SessionIn]) -> Answer:
    body = call.given
    return services.create_session(
        named_sandbox(context, call), body.name, context.principal.actor, cwd=body.cwd,
        env=body.env, holder=body.holder, epoch=body.epoch,
    )  # fmt: skip


def _delete_session(context: Context, call: Call[FencingQuery]) -> str:
    query = call.given
    services.delete_session(
        named_sandbox(context, call), call.name, context.principal.actor, holder=query.holder,
        epoch=query.epoch,
    )  # fmt: skip
    return call.name


def _stdin(context: Context, call: Call[StdinIn]) -> Answer:
    body = call.given
    sandbox = named_sandbox(context, call)
    data = services.stdin_bytes(body.text, body.data_b64, eof=body.eof)
    return services.write_stdin(
        sandbox, call.name, data, context.principal.actor, eof=body.eof, holder=body.holder,
        epoch=body.epoch,
    )  # fmt: skip


def _output(context: Context, call: Call[ProcessOutputQuery]) -> Answer:
    query = call.given
    return services.read_output(
        named_sandbox(context, call),
        call.name,
        since_seq=query.since_seq,
        generation=query.generation,
        max_bytes=query.max_bytes,
        wait_seconds=query.wait_seconds,
    )


def _restart(context: Context, call: Call[Fencing]) -> Answer:
    body = call.given
    return services.restart_process(
        named_sandbox(context, call), call.name, context.principal.actor, holder=body.holder,
        epoch=body.epoch,
    )  # fmt: skip


LIST_SESSIONS = Operation[None, list[Answer]](
    name="sessions_list",
    summary="Shell sessions",
    method="GET",
    path=SESSIONS_PATH,
    output=SessionListOut,
    service=lambda context, call: services.list_sessions(named_sandbox(context, call)),
    present=lambda sessions: {"sessions": sessions},
    hints=Hints(read_only=True, idempotent=True),
)

CREATE_SESSION = Operation[SessionIn, Answer](
    name="session_create",
    summary="Start a shell session",
    method="POST",
    path=SESSIONS_PATH,
    input=SessionIn,
    output=SessionOut,
    service=_create_session,
    present=_as_it_is,
)

DELETE_SESSION = Operation[FencingQuery, str](
    name="session_delete",
    summary="End a shell session",
    method="DELETE",
    path=SESSIONS_PATH + "/{name}",
    input=FencingQuery,
    output=DeleteOut,
    service=_delete_session,
    present=lambda name: {"ok": True, "deleted": name},
    hints=Hints(destructive=True, idempotent=True),
)

LIST_PROCESSES = Operation[None, list[Answer]](
    name="processes_list",
    summary="The pipeline's managed processes in this sandbox",
    method="GET",
    path=SANDBOX_PATH + "/processes",
    output=ProcessListOut,
    # Starts a declared process that is not running yet: not read-only.
    service=lambda context, call: services.list_processes(named_sandbox(context, call)),
    present=lambda processes: {"processes": processes},
    hints=Hints(idempotent=True),
)

PROCESS_STDIN = Operation[StdinIn, Answer](
    name="process_stdin",
    summary="Write to a managed process's stdin",
    method="POST",
    path=PROCESS_PATH + "/stdin",
    input=StdinIn,
    output=StdinOut,
    service=_stdin,
    present=_as_it_is,
)

PROCESS_OUTPUT = Operation[ProcessOutputQuery, Answer](
    name="process_output",
    summary="A managed process's output as numbered chunks",
    method="GET",
    path=PROCESS_PATH + "/output",
    input=ProcessOutputQuery,
    output=ProcessOutputOut,
    service=_output,
    present=_as_it_is,
    hints=Hints(read_only=True, idempotent=True),
)

PROCESS_RESTART = Operation[Fencing, Answer](
    name="process_restart",
    summary="Restart a managed process",
    method="POST",
    path=PROCESS_PATH + "/restart",
    input=Fencing,
    output=ProcessOut,
    service=_restart,
    present=_as_it_is,
    hints=Hints(destructive=True),
)
