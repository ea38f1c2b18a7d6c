"""Sandboxes themselves: open, look, reset, close, keep alive, the lease; compute mode."""

from typing import Any

from sandboxes import selectors, services
from sandboxes.models import Lease, Sandbox
from sandboxes.operations.record import Call, Context, Hints, Operation
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
    SandboxOut,
    TakeoverIn,
    lease_out,
    reset_out,
    sandbox_out,
)

SANDBOX_PATH = "/sandboxes/{sandbox_id}"


def _open(context: Context, call: Call[OpenIn]) -> tuple[Sandbox, services.Opened]:
    who, body = context.principal, call.given
    pipeline = selectors.pipeline_for(who, body.pipeline)
    opened = services.open_sandbox(
        pipeline, body.variables, who.actor, holder=body.holder, background=body.background
    )
    return selectors.sandbox_for(who, opened.sandbox.pk), opened


def _open_out(found: tuple[Sandbox, services.Opened]) -> dict[str, Any]:
    sandbox, opened = found
    return {**sandbox_out(sandbox), "created": opened.created, "source": opened.source}


def named_sandbox(context: Context, call: Call[Any]) -> Sandbox:
    return selectors.sandbox_for(context.principal, call.sandbox_id)


def _usage(context: Context, call: Call[None]) -> tuple[Sandbox, Any]:
    """The sandbox, with its workspace's size and use (asked of the sandbox when it runs)."""
    sandbox = named_sandbox(context, call)
    return sandbox, services.workspace_usage(sandbox)


def _reset(context: Context, call: Call[ResetIn]) -> Any:
    body = call.given
    return services.reset_sandbox(
        named_sandbox(context, call), context.principal.actor, reason=body.reason,
        holder=body.holder, epoch=body.epoch,
    )  # fmt: skip


def _close(context: Context, call: Call[CloseQuery]) -> Sandbox:
    query = call.given
    return services.close_sandbox(
        named_sandbox(context, call),
        context.principal.actor,
        delete_workspace=query.delete_workspace,
        holder=query.holder,
        epoch=query.epoch,
    )


def _keep_alive(context: Context, call: Call[Fencing]) -> Sandbox:
    body = call.given
    return services.keep_alive(
        named_sandbox(context, call), context.principal.actor, holder=body.holder,
        epoch=body.epoch,
    )  # fmt: skip


def _kept_alive_out(sandbox: Sandbox) -> dict[str, Any]:
    return {"ok": True, "idle_deadline": sandbox.idle_deadline, "expires_at": sandbox.expires_at}


def _renew(context: Context, call: Call[Fencing]) -> Lease:
    body = call.given
    return services.renew_lease(
        named_sandbox(context, call), context.principal.actor, holder=body.holder,
        epoch=body.epoch,
    )  # fmt: skip


def _release(context: Context, call: Call[Fencing]) -> Lease:
    who, body = context.principal, call.given
    return services.release_lease(
        named_sandbox(context, call), who.actor, holder=body.holder, epoch=body.epoch,
        force=who.is_admin,
    )  # fmt: skip


def _takeover(context: Context, call: Call[TakeoverIn]) -> Lease:
    body = call.given
    return services.takeover_lease(
        named_sandbox(context, call), context.principal.actor, holder=body.holder,
        reason=body.reason,
    )  # fmt: skip


def _run(context: Context, call: Call[RunIn]) -> services.RunResult:
    who, body = context.principal, call.given
    return services.run_code(
        selectors.pipeline_for(who, body.pipeline),
        who.actor,
        language=body.language,
        code=body.code,
        files_in=body.files,
        env=body.env,
        timeout_seconds=body.timeout_seconds,
        args=body.args,
    )


OPEN = Operation[OpenIn, tuple[Sandbox, services.Opened]](
    name="sandbox_open",
    summary="Get or create the sandbox of a scope",
    method="POST",
    path="/sandboxes/open",
    input=OpenIn,
    output=OpenOut,
    service=_open,
    present=_open_out,
    title="Open the chat's sandbox",
    description=(
        "Open this conversation's sandbox, or resume it if it already exists: a persistent "
        "Linux container whose working directory is /workspace. Takes no arguments: the "
        "pipeline and this chat's variables come from the connection (the bot runtime, or "
        "the MCP URL), so every call in the same chat returns the same sandbox with the "
        "same files. Returns sandbox_id, workdir, image and created (false when an existing "
        "sandbox was resumed). Call it before the other sandbox tools, and again if one "
        "reports that the sandbox is unknown or closed."
    ),
    hints=Hints(idempotent=True, names_chat_sandbox=True),
)

GET = Operation[None, tuple[Sandbox, Any]](
    name="sandbox_get",
    summary="One sandbox",
    method="GET",
    path=SANDBOX_PATH,
    output=SandboxOut,
    service=_usage,
    present=lambda found: sandbox_out(*found),
    hints=Hints(read_only=True, idempotent=True),
)

RESET = Operation[ResetIn, Any](
    name="sandbox_reset",
    summary="End every process in the sandbox; sessions and managed processes start again",
    method="POST",
    path=SANDBOX_PATH + "/reset",
    input=ResetIn,
    output=ResetOut,
    service=_reset,
    present=reset_out,
    hints=Hints(destructive=True),
)

CLOSE = Operation[CloseQuery, Sandbox](
    name="sandbox_close",
    summary="Close a sandbox",
    method="DELETE",
    path=SANDBOX_PATH,
    input=CloseQuery,
    output=CloseOut,
    service=_close,
    present=lambda closed: {"ok": True, "status": closed.state},
    title="Close the sandbox",
    description=(
        "Close the sandbox when the work is finished: its container is stopped. The files "
        "in /workspace are kept for a later sandbox_open unless delete_workspace is true. "
        "Do not close it between steps of the same task."
    ),
    hints=Hints(destructive=True, idempotent=True),
)

KEEP_ALIVE = Operation[Fencing, Sandbox](
    name="sandbox_keepalive",
    summary="Count as activity now (the idle deadline moves) and renew the lease",
    method="POST",
    path=SANDBOX_PATH + "/keepalive",
    input=Fencing,
    output=KeepAliveOut,
    service=_keep_alive,
    present=_kept_alive_out,
    hints=Hints(idempotent=True),
)

RENEW_LEASE = Operation[Fencing, Lease](
    name="lease_renew",
    summary="Renew the lease",
    method="POST",
    path=SANDBOX_PATH + "/lease/renew",
    input=Fencing,
    output=LeaseOut,
    service=_renew,
    present=lease_out,
    hints=Hints(idempotent=True),
)

RELEASE_LEASE = Operation[Fencing, Lease](
    name="lease_release",
    summary="Release the lease",
    method="POST",
    path=SANDBOX_PATH + "/lease/release",
    input=Fencing,
    output=LeaseOut,
    service=_release,
    present=lease_out,
    hints=Hints(idempotent=True),
)

TAKEOVER_LEASE = Operation[TakeoverIn, Lease](
    name="lease_takeover",
    summary="Take the lease over",
    method="POST",
    path=SANDBOX_PATH + "/lease/takeover",
    input=TakeoverIn,
    output=LeaseOut,
    service=_takeover,
    present=lease_out,
)

RUN = Operation[RunIn, services.RunResult](
    name="sandbox_run",
    summary="Compute mode: run code once in a fresh sandbox",
    method="POST",
    path="/run",
    input=RunIn,
    output=RunOut,
    service=_run,
    present=run_out,
    title="Run code once",
    description=(
        "Compute mode: run one program (language python, javascript, bash or sh, with "
        "optional args) in a fresh sandbox that is destroyed afterwards, and return ok, "
        "exit_code, stdout and stderr. Nothing is kept: use it for a self-contained "
        "calculation, and sandbox_exec for work on the chat's files."
    ),
    hints=Hints(networked=True),
)
