"""The bot API's routes for sandboxes themselves: open, list, get, reset, close, keep alive,
the lease, compute mode and metrics. Each parses, fetches what the caller may see, calls one
service and presents the answer."""

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from sandboxes import metrics, selectors, services
from sandboxes.api.common import ANY, BODY, CHANGES, LEASED, principal, responds
from sandboxes.models import State
from sandboxes.schemas import Fencing
from sandboxes.schemas.execs import RunIn, RunOut, run_out
from sandboxes.schemas.sandboxes import (
    CloseOut,
    CloseQuery,
    KeepAliveOut,
    LeaseOut,
    OpenIn,
    OpenOut,
    ResetIn,
    ResetOut,
    SandboxListOut,
    SandboxOut,
    TakeoverIn,
    lease_out,
    reset_out,
    sandbox_out,
)

router = Router(tags=["sandboxes"])


@router.post(
    "/sandboxes/open",
    response=responds(OpenOut, CHANGES),
    summary="Get or create the sandbox of a scope",
)
def open_sandbox(request: HttpRequest, body: OpenIn) -> dict[str, Any]:
    who = principal(request)
    pipeline = selectors.pipeline_for(who, body.pipeline)
    opened = services.open_sandbox(
        pipeline, body.variables, who.actor, holder=body.holder, background=body.background
    )
    sandbox = selectors.sandbox_for(who, opened.sandbox.pk)
    return {**sandbox_out(sandbox), "created": opened.created, "source": opened.source}


@router.get(
    "/metrics",
    response=responds(dict[str, Any], ANY),
    summary="Sandbox metrics of the caller's pipeline (an admin: every pipeline, and overall)",
)
def sandbox_metrics(request: HttpRequest) -> dict[str, Any]:
    return metrics.flush_and_snapshot(principal(request).pipeline)


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


@router.get("/sandboxes/{sandbox_id}", response=responds(SandboxOut), summary="One sandbox")
def get_sandbox(request: HttpRequest, sandbox_id: str) -> dict[str, Any]:
    """The sandbox, with its workspace's size and use (asked of the sandbox when it runs)."""
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return sandbox_out(sandbox, services.workspace_usage(sandbox))


@router.post(
    "/sandboxes/{sandbox_id}/reset",
    response=responds(ResetOut, CHANGES),
    summary="End every process in the sandbox; sessions and managed processes start again",
)
def reset_sandbox(request: HttpRequest, sandbox_id: str, body: ResetIn) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    result = services.reset_sandbox(
        sandbox, who.actor, reason=body.reason, holder=body.holder, epoch=body.epoch
    )
    return reset_out(result)


@router.delete(
    "/sandboxes/{sandbox_id}", response=responds(CloseOut, LEASED), summary="Close a sandbox"
)
def close_sandbox(
    request: HttpRequest, sandbox_id: str, query: Query[CloseQuery]
) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    closed = services.close_sandbox(
        sandbox,
        who.actor,
        delete_workspace=query.delete_workspace,
        holder=query.holder,
        epoch=query.epoch,
    )
    return {"ok": True, "status": closed.state}


@router.post(
    "/sandboxes/{sandbox_id}/keepalive",
    response=responds(KeepAliveOut, CHANGES),
    summary="Count as activity now (the idle deadline moves) and renew the lease",
)
def keep_alive(request: HttpRequest, sandbox_id: str, body: Fencing) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    sandbox = services.keep_alive(sandbox, who.actor, holder=body.holder, epoch=body.epoch)
    return {"ok": True, "idle_deadline": sandbox.idle_deadline, "expires_at": sandbox.expires_at}


@router.post(
    "/sandboxes/{sandbox_id}/lease/renew",
    response=responds(LeaseOut, CHANGES),
    summary="Renew the lease",
)
def renew_lease(request: HttpRequest, sandbox_id: str, body: Fencing) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return lease_out(services.renew_lease(sandbox, who.actor, holder=body.holder, epoch=body.epoch))


@router.post(
    "/sandboxes/{sandbox_id}/lease/release",
    response=responds(LeaseOut, CHANGES),
    summary="Release the lease",
)
def release_lease(request: HttpRequest, sandbox_id: str, body: Fencing) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    lease = services.release_lease(
        sandbox, who.actor, holder=body.holder, epoch=body.epoch, force=who.is_admin
    )
    return lease_out(lease)


@router.post(
    "/sandboxes/{sandbox_id}/lease/takeover",
    response=responds(LeaseOut, BODY),
    summary="Take the lease over",
)
def takeover_lease(request: HttpRequest, sandbox_id: str, body: TakeoverIn) -> dict[str, Any]:
    """The previous holder's calls get 423 until the lease is released. A takeover holds until
    released, or until the operator's ceiling (`expires_at`; null: no ceiling)."""
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    lease = services.takeover_lease(sandbox, who.actor, holder=body.holder, reason=body.reason)
    return lease_out(lease)


@router.post(
    "/run",
    response=responds(RunOut, BODY | {507}),
    summary="Compute mode: run code once in a fresh sandbox",
)
def run(request: HttpRequest, body: RunIn) -> dict[str, Any]:
    who = principal(request)
    pipeline = selectors.pipeline_for(who, body.pipeline)
    result = services.run_code(
        pipeline,
        who.actor,
        language=body.language,
        code=body.code,
        files_in=body.files,
        env=body.env,
        timeout_seconds=body.timeout_seconds,
    )
    return run_out(result)
