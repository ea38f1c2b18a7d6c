"""The bot API's routes for what runs in a sandbox besides its execs: shell sessions and the
pipeline's managed processes."""

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from sandboxes import selectors, services
from sandboxes.api.common import CHANGES, LEASED, principal, responds
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
    SessionToEnd,
    StdinIn,
    StdinOut,
)

router = Router(tags=["sandboxes"])


@router.get(
    "/sandboxes/{sandbox_id}/sessions", response=responds(SessionListOut), summary="Shell sessions"
)
def list_sessions(request: HttpRequest, sandbox_id: str) -> dict[str, Any]:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return {"sessions": services.list_sessions(sandbox)}


@router.post(
    "/sandboxes/{sandbox_id}/sessions",
    response=responds(SessionOut, CHANGES),
    summary="Start a shell session",
)
def create_session(request: HttpRequest, sandbox_id: str, body: SessionIn) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return services.create_session(
        sandbox, body.name, who.actor, cwd=body.cwd, env=body.env, holder=body.holder,
        epoch=body.epoch,
    )  # fmt: skip


@router.delete(
    "/sandboxes/{sandbox_id}/sessions/{name}",
    response=responds(DeleteOut, LEASED),
    summary="End a shell session",
)
def delete_session(
    request: HttpRequest,
    sandbox_id: str,
    query: Query[FencingQuery],
    name: SessionToEnd,
) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    services.delete_session(sandbox, name, who.actor, holder=query.holder, epoch=query.epoch)
    return {"ok": True, "deleted": name}


@router.get(
    "/sandboxes/{sandbox_id}/processes",
    response=responds(ProcessListOut),
    summary="The pipeline's managed processes in this sandbox",
)
def list_processes(request: HttpRequest, sandbox_id: str) -> dict[str, Any]:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return {"processes": services.start_and_list_processes(sandbox)}


@router.post(
    "/sandboxes/{sandbox_id}/processes/{name}/stdin",
    response=responds(StdinOut, CHANGES),
    summary="Write to a managed process's stdin",
)
def process_stdin(
    request: HttpRequest, sandbox_id: str, name: str, body: StdinIn
) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    data = services.stdin_bytes(body.text, body.data_b64, eof=body.eof)
    return services.write_stdin(
        sandbox, name, data, who.actor, eof=body.eof, holder=body.holder, epoch=body.epoch
    )


@router.get(
    "/sandboxes/{sandbox_id}/processes/{name}/output",
    response=responds(ProcessOutputOut),
    summary="A managed process's output as numbered chunks",
)
def process_output(
    request: HttpRequest, sandbox_id: str, name: str, query: Query[ProcessOutputQuery]
) -> dict[str, Any]:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return services.read_output(
        sandbox,
        name,
        since_seq=query.since_seq,
        generation=query.generation,
        max_bytes=query.max_bytes,
        wait_seconds=query.wait_seconds,
    )


@router.post(
    "/sandboxes/{sandbox_id}/processes/{name}/restart",
    response=responds(ProcessOut, CHANGES),
    summary="Restart a managed process",
)
def process_restart(
    request: HttpRequest, sandbox_id: str, name: str, body: Fencing
) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return services.restart_process(sandbox, name, who.actor, holder=body.holder, epoch=body.epoch)
