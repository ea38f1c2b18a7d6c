"""A sandbox as the bot API shows it, and the shapes of opening, closing, resetting and the
lease's calls, with the presenters that turn rows into them."""

from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Field, Schema
from pydantic import StrictStr

from sandboxes.models import Lease, Sandbox
from sandboxes.schemas.common import (
    Fencing,
    FencingQuery,
    Input,
    Integer,
    holder_field,
    reason_field,
)
from sandboxes.services import ResetResult, WorkspaceUsage

VariableValue = StrictStr | Integer


class LeaseOut(Schema):
    holder: str
    epoch: int
    expires_at: datetime | None


class WorkspaceOut(Schema):
    limit_bytes: int | None = Field(
        description="The size of the workspace's disk; writes past it fail (ENOSPC inside, 507 "
        "workspace_full through the API). Null: a workspace made before workspaces had disks."
    )
    used_bytes: int | None = Field(description="Used now; null when the sandbox is not running.")
    enforced: bool


class SandboxOut(Schema):
    sandbox_id: UUID
    pipeline: str
    scope_key: str
    status: str
    stop_reason: str
    status_detail: str
    image: str
    workdir: str
    generation: int
    created_at: datetime
    last_activity_at: datetime | None
    idle_deadline: datetime | None = Field(
        None, description="Reaped for idleness after this, unless used or leased before."
    )
    expires_at: datetime | None = Field(None, description="Reaped at this time (time to live).")
    lease: LeaseOut
    workspace: WorkspaceOut | None = Field(
        None, description="The workspace's disk: its size and use (one sandbox's GET only)."
    )


class OpenIn(Input):
    pipeline: str = Field(..., min_length=1, max_length=50, description="The pipeline's slug.")
    variables: dict[str, VariableValue | None] = Field(
        default_factory=dict,
        description="Chat variables (launcher_type, launcher_id, sender_id, conversation_id, "
        "query_id, user_id, task_id, workflow_run_id, session_key); the pipeline's scope "
        "template decides which are needed.",
    )
    holder: str | None = holder_field(
        "Who takes or shares the sandbox's lease; defaults to the scope key."
    )
    background: bool = Field(
        False,
        alias="async",
        description="Return at once: a sandbox that needs a container comes back `creating` "
        "and a worker starts it; poll GET /sandboxes/{id} until it is `running`.",
    )


class OpenOut(SandboxOut):
    created: bool
    source: str = Field(
        ..., description="existing (the key's sandbox), pool (claimed from the warm pool) or cold"
    )


class SandboxListOut(Schema):
    sandboxes: list[SandboxOut]


class KeepAliveOut(Schema):
    ok: bool
    idle_deadline: datetime | None
    expires_at: datetime | None


class ResetIn(Fencing):
    reason: str | None = reason_field(None, "Why, for the event it records.")


class ResetOut(Schema):
    ok: bool
    killed: int = Field(description="How many processes were ended.")
    duration_ms: int


class CloseOut(Schema):
    ok: bool
    status: str


class CloseQuery(FencingQuery):
    delete_workspace: bool = Field(
        False, description="Also delete every file in /workspace (default false)."
    )


class TakeoverIn(Input):
    holder: str | None = holder_field("Who takes the lease; defaults to the caller.")
    reason: str = reason_field("", "Why, for the event it records.")


def lease_out(lease: Lease) -> dict[str, Any]:
    return {
        "holder": lease.holder,
        "epoch": lease.epoch,
        "expires_at": lease.expires_at if lease.holder else None,
    }


def sandbox_out(sandbox: Sandbox, workspace: WorkspaceUsage | None = None) -> dict[str, Any]:
    shown = {
        "sandbox_id": sandbox.id,
        "pipeline": sandbox.pipeline.slug,
        "scope_key": sandbox.scope_key,
        "status": sandbox.state,
        "stop_reason": sandbox.stop_reason,
        "status_detail": sandbox.status_detail,
        "image": sandbox.image,
        "workdir": sandbox.workdir,
        "generation": sandbox.generation,
        "created_at": sandbox.created_at,
        "last_activity_at": sandbox.last_activity_at,
        "idle_deadline": sandbox.idle_deadline,
        "expires_at": sandbox.expires_at,
        "lease": lease_out(sandbox.lease),
    }
    if workspace is not None:
        shown["workspace"] = {
            "limit_bytes": workspace.limit_bytes,
            "used_bytes": workspace.used_bytes,
            "enforced": workspace.enforced,
        }
    return shown


def reset_out(result: ResetResult) -> dict[str, Any]:
    return {"ok": True, "killed": result.killed, "duration_ms": result.duration_ms}
