"""The bot API's routes for commands: run one, read its output (polled or as server-sent
events), wait for it, kill it. Each JSON route runs its operation's record
(`sandboxes.operations.execs`); the output's bytes and its server-sent events are written
here, as streams that no record's answer is."""

from typing import Literal

from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header
from ninja import Query, Router

from boxyard.threads import pulled
from sandboxes import selectors, services
from sandboxes.api.common import BODY, CHANGES, READS, Answered, answer, principal, responds, route
from sandboxes.api.sse import event_stream
from sandboxes.operations import Call, execs
from sandboxes.schemas import Fencing
from sandboxes.schemas.execs import SSE_EVENT, ExecIn, OutputQuery, StreamQuery, WaitIn
from sandboxes.services.shares import long_call

router = Router(tags=["sandboxes"])


@route(router, execs.EXEC, CHANGES)
def exec_command(request: HttpRequest, sandbox_id: str, body: ExecIn) -> Answered:
    return answer(request, execs.EXEC, Call(body, sandbox_id))


@route(router, execs.GET_EXEC, READS)
def get_exec(request: HttpRequest, sandbox_id: str, exec_id: str) -> Answered:
    return answer(request, execs.GET_EXEC, Call(None, sandbox_id, exec_id))


@route(router, execs.EXEC_OUTPUT, READS)
def exec_output(
    request: HttpRequest, sandbox_id: str, exec_id: str, query: Query[OutputQuery]
) -> Answered:
    return answer(request, execs.EXEC_OUTPUT, Call(query, sandbox_id, exec_id))


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


@route(router, execs.EXEC_WAIT, BODY)
def exec_wait(request: HttpRequest, sandbox_id: str, exec_id: str, body: WaitIn) -> Answered:
    return answer(request, execs.EXEC_WAIT, Call(body, sandbox_id, exec_id))


@route(router, execs.EXEC_KILL, CHANGES)
def exec_kill(request: HttpRequest, sandbox_id: str, exec_id: str, body: Fencing) -> Answered:
    return answer(request, execs.EXEC_KILL, Call(body, sandbox_id, exec_id))
