"""The bot API's routes for the code interpreter: run code (its answer as one JSON object, or
its results as NDJSON lines as they come), and the code contexts. Each JSON route runs its
operation's record (`sandboxes.operations.code`); the NDJSON stream is written here."""

import json
from collections.abc import AsyncIterator

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Query, Router

from sandboxes import selectors, services
from sandboxes.api.common import (
    CHANGES,
    LEASED,
    READS,
    Answered,
    answer,
    principal,
    responds,
    route,
)
from sandboxes.operations import Call, code
from sandboxes.schemas import FencingQuery
from sandboxes.schemas.code import CodeIn, ContextIn
from sandboxes.services.code.results import Result

router = Router(tags=["sandboxes"])
NDJSON = "application/x-ndjson"


@router.post(
    code.RUN_CODE.path,
    response=responds(code.RUN_CODE.output, CHANGES),
    summary=code.RUN_CODE.summary,
    openapi_extra={
        "responses": {
            200: {
                "description": "The run's results. With `Accept: application/x-ndjson`, one "
                "JSON object per line as the interpreter gives them (`stdout`, `stderr`, "
                "`result`, `error`, `keepalive`), the last one `end`.",
                "content": {NDJSON: {"schema": {"type": "string"}}},
            }
        }
    },
)
def run_code(
    request: HttpRequest, sandbox_id: str, body: CodeIn
) -> Answered | StreamingHttpResponse:
    if NDJSON not in request.headers.get("Accept", ""):
        return answer(request, code.RUN_CODE, Call(body, sandbox_id))
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    results = services.start_code_stream(
        sandbox, code.clean_code(sandbox, body), who.actor, holder=body.holder, epoch=body.epoch
    )
    response = StreamingHttpResponse(_lines(results), content_type=NDJSON)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _lines(results: AsyncIterator[Result]) -> AsyncIterator[bytes]:
    async for result in results:
        yield json.dumps(result, separators=(",", ":")).encode() + b"\n"


@route(router, code.LIST_CONTEXTS, READS)
def list_contexts(request: HttpRequest, sandbox_id: str) -> Answered:
    return answer(request, code.LIST_CONTEXTS, Call(None, sandbox_id))


@route(router, code.CREATE_CONTEXT, CHANGES)
def create_context(request: HttpRequest, sandbox_id: str, body: ContextIn) -> Answered:
    return answer(request, code.CREATE_CONTEXT, Call(body, sandbox_id))


@route(router, code.RESTART_CONTEXT, LEASED)
def restart_context(
    request: HttpRequest, sandbox_id: str, name: str, query: Query[FencingQuery]
) -> Answered:
    return answer(request, code.RESTART_CONTEXT, Call(query, sandbox_id, name=name))


@route(router, code.DELETE_CONTEXT, LEASED)
def delete_context(
    request: HttpRequest, sandbox_id: str, name: str, query: Query[FencingQuery]
) -> Answered:
    return answer(request, code.DELETE_CONTEXT, Call(query, sandbox_id, name=name))
