"""What every route of the bot API shares: who is calling, and the answers a route documents.

The statuses a route can answer are declared once here, by family, and each route takes its
family's set: the OpenAPI document lists exactly what the server answers (423 where a taken-over
lease refuses, 507 where the workspace can fill, 411 where an upload must say its length).

The views block (the database, the engine): under ASGI each request runs in a thread of the
server's pool (config.handlers), except while a long call waits for a sandbox (`Later`).
"""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from boxyard.later import Awaited, Later
from sandboxes.operations import Answer, Call, Context, Operation
from sandboxes.schemas import ErrorOut
from sandboxes.selectors import Principal

# Every call: bad input, no token, a refused session's CSRF check, not found (also another
# pipeline's), a quota, and the engine's failures (unreachable, broken, too slow).
ANY = frozenset({400, 401, 403, 404, 429, 502, 503, 504})
# A call on a sandbox: one that is not running, or whose container is gone, is 409.
READS = ANY | {409}
# A call that acts under the lease: busy or a stale epoch is 409, taken over is 423.
LEASED = READS | {423}
# A call with a JSON body: one over the size the server reads is 413.
BODY = READS | {408, 413}
CHANGES = LEASED | BODY
# A call that writes to the workspace: a full workspace is 507.
WRITES = CHANGES | {507}
# An upload streamed as it arrives (no size bound of the server's): it must say its length.
UPLOADS = LEASED | {408, 411, 507}
# A file's download: conditional requests and ranges.
DOWNLOADS = READS | {412, 416}


# What a route of a record answers: the presented answer, with its status where it is not 200,
# or a long call's answer to come.
Answered = Answer | Status[Answer] | Later


def route(
    router: Router, operation: Operation[Any, Any], errors: frozenset[int]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The route of an operation's record: its method and path, its output and `errors`, the
    failures it can answer."""
    return router.api_operation(
        [operation.method],
        operation.path,
        response=responds(operation.output, errors, operation.status),
        summary=operation.summary,
    )


def answer(request: HttpRequest, operation: Operation[Any, Any], call: Call[Any]) -> Answered:
    """The record run for the caller: its presented answer (with its status), or a long
    call's answer to come (`Later`), in the output's shape as django-ninja renders it."""
    answered = operation.run(context(request), call)
    if isinstance(answered, Awaited):
        return Later(answered.then(operation.shown))
    if operation.status != 200:
        return Status(operation.status, answered)
    return answered


def context(request: HttpRequest) -> Context:
    """Who calls, and the origin the request reached (for absolute links)."""
    return Context(principal(request), request.build_absolute_uri("/").removesuffix("/"))


def responds(schema: Any, errors: frozenset[int] = READS, status: int = 200) -> dict[Any, Any]:
    """The success shape, and the error shape of each failure the route can answer."""
    return {status: schema, frozenset(errors): ErrorOut}


def principal(request: HttpRequest) -> Principal:
    """The caller, as the API's authentication found it (a pipeline's token or an admin)."""
    who = request.auth  # type: ignore[attr-defined]  # set by django-ninja's authentication
    assert isinstance(who, Principal)
    return who
