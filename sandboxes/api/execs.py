"""The bot API's routes for commands: run one, read its output (polled or as server-sent
events), wait for it, kill it."""

from typing import Any, Literal

from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header
from ninja import Query, Router

from boxyard.later import Awaited, Later
from boxyard.threads import pulled
from pipelines.models import Pipeline
from sandboxes import selectors, services
from sandboxes.api.common import BODY, CHANGES, READS, later, principal, responds
from sandboxes.api.sse import event_stream
from sandboxes.models import Sandbox
from sandboxes.schemas import Fencing
from sandboxes.schemas.execs import (
    SSE_EVENT,
    ExecIn,
    ExecOut,
    ExecOutputOut,
    KillOut,
    OutputQuery,
    StreamQuery,
    WaitIn,
    WaitOut,
    exec_out,
    progress_out,
)
from sandboxes.selectors import Principal
from sandboxes.services.shares import long_call

router = Router(tags=["sandboxes"])


@router.post(
    "/sandboxes/{sandbox_id}/exec", response=responds(ExecOut, CHANGES), summary="Run a command"
)
def exec_command(request: HttpRequest, sandbox_id: str, body: ExecIn) -> Later:
    return later(run_command(principal(request), sandbox_id, body), ExecOut, lambda answer: answer)


def run_command(
    who: Principal, sandbox_id: str, body: ExecIn, watch: services.ExecWatch | None = None
) -> Awaited[dict[str, Any]]:
    """An exec as the API runs it (also the MCP server's, which follows it with `watch`): a
    long call, whose answer comes once a foreground command has ended."""
    sandbox = selectors.sandbox_for(who, sandbox_id)
    exec_request = clean_exec(sandbox, body)
    started = services.start_exec(
        sandbox, exec_request, who.actor, holder=body.holder, epoch=body.epoch, watch=watch
    )
    return started.then(exec_out)


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


@router.get(
    "/sandboxes/{sandbox_id}/execs/{exec_id}", response=responds(ExecOut), summary="One exec"
)
def get_exec(request: HttpRequest, sandbox_id: str, exec_id: str) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return exec_out(selectors.exec_for(who, sandbox, exec_id))


@router.get(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/output",
    response=responds(ExecOutputOut),
    summary="An exec's output as numbered chunks",
)
def exec_output(
    request: HttpRequest, sandbox_id: str, exec_id: str, query: Query[OutputQuery]
) -> dict[str, Any]:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    chunks, record, dropped = services.exec_output_recording_end(
        record, query.since_seq, query.max_bytes
    )
    return {"chunks": chunks, **progress_out(record), "dropped_bytes": dropped}


@router.get(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/output/raw",
    response=responds(None, READS),
    summary="One stream of an exec's output, all that is kept, as bytes",
    openapi_extra={
        "responses": {
            200: {
                "description": "The stream's bytes (up to BOXYARD_EXEC_KEEP_BYTES), streamed.",
                "content": {"application/octet-stream": {"schema": {"type": "string"}}},
            }
        }
    },
)
def exec_output_raw(
    request: HttpRequest,
    sandbox_id: str,
    exec_id: str,
    stream: Literal["stdout", "stderr"] = "stdout",
) -> StreamingHttpResponse:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    pages = services.exec_output_bytes(record, stream)
    response = StreamingHttpResponse(
        pulled(pages, batch=16), content_type="application/octet-stream"
    )
    disposition = content_disposition_header(True, f"{record.pk}.{stream}")
    if disposition:
        response["Content-Disposition"] = disposition
    return response


@router.get(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/stream",
    response=responds(None, READS),
    summary="An exec's output as server-sent events, as it is produced",
    openapi_extra={
        "responses": {
            200: {  # the same key as `response`'s, or the document would hold "200" twice
                "description": "`chunk` events ({seq, stream, text}), then one `exit` event "
                "({exit_code, timed_out, killed}); comments keep the connection alive.",
                "content": {"text/event-stream": {"schema": SSE_EVENT}},
            }
        }
    },
)
def exec_stream(
    request: HttpRequest, sandbox_id: str, exec_id: str, query: Query[StreamQuery]
) -> StreamingHttpResponse:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    # Open for as long as the exec runs: one of the pipeline's long calls.
    held = long_call(record.sandbox.pipeline_id)
    return event_stream(services.exec_events(record, query.since_seq), held)


@router.post(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/wait",
    response=responds(WaitOut, BODY),
    summary="Wait for an exec",
)
def exec_wait(request: HttpRequest, sandbox_id: str, exec_id: str, body: WaitIn) -> Later:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    return later(services.await_exec(record, body.timeout_seconds), WaitOut, progress_out)


@router.post(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/kill",
    response=responds(KillOut, CHANGES),
    summary="Kill an exec",
)
def exec_kill(request: HttpRequest, sandbox_id: str, exec_id: str, body: Fencing) -> dict[str, Any]:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    record = services.kill_exec(record, who.actor, holder=body.holder, epoch=body.epoch)
    return {"ok": True, "status": record.state}
