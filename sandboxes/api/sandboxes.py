"""The bot API's routes for sandboxes themselves: open, list, get, reset, close, keep alive,
the lease, compute mode and metrics. Each runs its operation's record
(`sandboxes.operations.sandboxes`); the list and the metrics, reads of the caller's pipeline,
are written here."""

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from sandboxes import metrics, selectors
from sandboxes.api.common import (
    ANY,
    BODY,
    CHANGES,
    LEASED,
    READS,
    Answered,
    answer,
    principal,
    responds,
    route,
)
from sandboxes.models import State
from sandboxes.operations import Call
from sandboxes.operations import sandboxes as operations
from sandboxes.schemas import Fencing
from sandboxes.schemas.execs import RunIn
from sandboxes.schemas.sandboxes import (
    CloseQuery,
    OpenIn,
    ResetIn,
    SandboxListOut,
    TakeoverIn,
    sandbox_out,
)

router = Router(tags=["sandboxes"])


@route(router, operations.OPEN, CHANGES)
def open_sandbox(request: HttpRequest, body: OpenIn) -> Answered:
    return answer(request, operations.OPEN, Call(body))


@router.get(
    "/metrics",
    response=responds(dict[str, Any], ANY),
    summary="Sandbox metrics of the caller's pipeline (an admin: every pipeline, and overall)",
)
def sandbox_metrics(request: HttpRequest) -> dict[str, Any]:
    return metrics.snapshot(principal(request).pipeline)


@router.get(
    "/sandboxes", response=responds(SandboxListOut, ANY), summary="The pipeline's sandboxes"
)
def list_sandboxes(
    request: HttpRequest, status: State | None = None, scope_key: str | None = None
) -> dict[str, Any]:
    # `status` is the enum of states, so the document tells a caller every value it takes.
    found = selectors.sandboxes_for(
        principal(request), status=status.value if status else None, scope_key=scope_key
    )
    return {"sandboxes": [sandbox_out(sandbox) for sandbox in found]}


@route(router, operations.GET, READS)
def get_sandbox(request: HttpRequest, sandbox_id: str) -> Answered:
    """The sandbox, with its workspace's size and use (asked of the sandbox when it runs)."""
    return answer(request, operations.GET, Call(None, sandbox_id))


@route(router, operations.RESET, CHANGES)
def reset_sandbox(request: HttpRequest, sandbox_id: str, body: ResetIn) -> Answered:
    return answer(request, operations.RESET, Call(body, sandbox_id))


@route(router, operations.CLOSE, LEASED)
def close_sandbox(request: HttpRequest, sandbox_id: str, query: Query[CloseQuery]) -> Answered:
    return answer(request, operations.CLOSE, Call(query, sandbox_id))


@route(router, operations.KEEP_ALIVE, CHANGES)
def keep_alive(request: HttpRequest, sandbox_id: str, body: Fencing) -> Answered:
    return answer(request, operations.KEEP_ALIVE, Call(body, sandbox_id))


@route(router, operations.RENEW_LEASE, CHANGES)
def renew_lease(request: HttpRequest, sandbox_id: str, body: Fencing) -> Answered:
    return answer(request, operations.RENEW_LEASE, Call(body, sandbox_id))


@route(router, operations.RELEASE_LEASE, CHANGES)
def release_lease(request: HttpRequest, sandbox_id: str, body: Fencing) -> Answered:
    return answer(request, operations.RELEASE_LEASE, Call(body, sandbox_id))


@route(router, operations.TAKEOVER_LEASE, BODY)
def takeover_lease(request: HttpRequest, sandbox_id: str, body: TakeoverIn) -> Answered:
    """The previous holder's calls get 423 until the lease is released. A takeover holds until
    released, or until the operator's ceiling (`expires_at`; null: no ceiling)."""
    return answer(request, operations.TAKEOVER_LEASE, Call(body, sandbox_id))


@route(router, operations.RUN, BODY | {507})
def run(request: HttpRequest, body: RunIn) -> Answered:
    return answer(request, operations.RUN, Call(body))
