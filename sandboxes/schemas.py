"""Request and response shapes of the bot API (field names follow seed 001's tool schemas).

Types here are what the OpenAPI document promises; the services check the meaning (paths
inside /workspace, limits, known variables) and name the field they refuse.
"""

from datetime import datetime
from typing import Literal
from uuid import UUID

from ninja import Field, Schema
from pydantic import StrictInt, StrictStr

VariableValue = StrictStr | StrictInt


class ErrorBody(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorOut(Schema):
    error: ErrorBody


class Fencing(Schema):
    """Optional on every call that changes a sandbox: who acts, and the epoch it holds."""

    holder: str | None = Field(None, max_length=200, description="Defaults to the scope key.")
    epoch: int | None = Field(None, ge=0, description="Refused if the lease has moved on.")


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


class OpenIn(Schema):
    pipeline: str = Field(..., min_length=1, max_length=50, description="The pipeline's slug.")
    variables: dict[str, VariableValue | None] = Field(
        default_factory=dict,
        description="Chat variables (launcher_type, launcher_id, sender_id, conversation_id, "
        "query_id, user_id, task_id, workflow_run_id, session_key); the pipeline's scope "
        "template decides which are needed.",
    )
    holder: str | None = Field(None, max_length=200)
    background: bool = Field(
        False,
        alias="async",
        description="Return at once: a sandbox that needs a container comes back `creating` "
        "and a worker starts it; poll GET /sandboxes/{id} until it is `running`.",
    )


class KeepAliveOut(Schema):
    ok: bool
    idle_deadline: datetime | None
    expires_at: datetime | None


class OpenOut(SandboxOut):
    created: bool
    source: str = Field(
        ..., description="existing (the key's sandbox), pool (claimed from the warm pool) or cold"
    )


class SandboxListOut(Schema):
    sandboxes: list[SandboxOut]


class ExecIn(Fencing):
    cmd: list[StrictStr] | StrictStr = Field(
        ...,
        description="argv list (run as is), or a shell string (run in the session's shell, so "
        "`cd`, `export` and functions persist)",
    )
    cwd: str | None = Field(
        None,
        description="For this command only; default: the session's cwd. Relative paths are "
        "under /workspace.",
    )
    env: dict[str, StrictStr] | None = Field(
        None, description="Variables for this command only, on top of the session's."
    )
    session: str | None = Field(None, description="Shell session name (default 'default').")
    timeout_seconds: int | None = Field(
        None, ge=1, description="Default: the pipeline's; background execs have none unless given."
    )
    background: bool = Field(
        False, description="Return at once; read the output by sequence number, wait, or kill."
    )
    fresh: bool = Field(
        False,
        description="Run in a new process outside any session, in /workspace (or cwd) with "
        "the sandbox's environment: no session state is read or kept. Not with background.",
    )


class ExecOut(Schema):
    exec_id: UUID
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int | None
    session: str
    background: bool
    session_restarted: bool = Field(
        description="The command ended its shell (exit, exec, set -e, a kill): the session was "
        "started again from its last cwd and environment."
    )
    oom_killed: bool = Field(
        description="The kernel killed it (exit code 137): the sandbox ran out of memory."
    )
    error: str


class Chunk(Schema):
    seq: int
    stream: Literal["stdout", "stderr"]
    text: str


class ExecOutputOut(Schema):
    chunks: list[Chunk]
    done: bool
    status: str
    exit_code: int | None


class WaitIn(Schema):
    timeout_seconds: float = Field(30, ge=0, le=900)


class WaitOut(Schema):
    done: bool
    status: str
    exit_code: int | None


class ResetIn(Fencing):
    reason: str | None = Field(None, max_length=200, description="Why, for the event it records.")


class ResetOut(Schema):
    ok: bool
    killed: int = Field(description="How many processes were ended.")
    duration_ms: int


class KillOut(Schema):
    ok: bool
    status: str


class WriteIn(Fencing):
    path: str = Field(..., min_length=1, max_length=4096)
    contents: str | None = None
    contents_b64: str | None = None
    mode: str | None = Field(None, description="Octal permissions, default '0644'.")
    overwrite: bool = True


class WriteOut(Schema):
    ok: bool
    path: str
    size_bytes: int


class ReadOut(Schema):
    path: str
    contents: str | None = None
    contents_b64: str | None = None
    truncated: bool
    size_bytes: int


class EntryOut(Schema):
    path: str
    name: str
    type: str
    size: int
    mode: str
    mtime_unix: int


class ListOut(Schema):
    entries: list[EntryOut]
    truncated: bool


class DeleteOut(Schema):
    ok: bool
    deleted: str


class CloseOut(Schema):
    ok: bool
    status: str


class SessionIn(Fencing):
    name: str = Field(..., min_length=1, max_length=64)
    cwd: str | None = Field(None, description="Starting directory; default /workspace.")
    env: dict[str, StrictStr] | None = Field(None, description="Starting variables.")


class SessionOut(Schema):
    name: str
    cwd: str
    env: dict[str, str]
    busy: bool
    started: bool = Field(description="Whether its shell runs now (it starts at its first use).")


class SessionListOut(Schema):
    sessions: list[SessionOut]


class ProcessOut(Schema):
    name: str
    state: str = Field(description="running, backoff (restarting soon), exited, stopped")
    generation: int = Field(description="How many times it was started; each run is one.")
    restarts: int
    pid: int | None
    last_exit_code: int | None
    backoff_ms: int
    cmd: list[str] | str


class ProcessListOut(Schema):
    processes: list[ProcessOut]


class StdinIn(Fencing):
    text: str | None = Field(None, description="Text to write (UTF-8).")
    data_b64: str | None = Field(None, description="Or bytes, base64-encoded.")
    eof: bool = Field(False, description="Close stdin after writing.")


class StdinOut(Schema):
    ok: bool
    generation: int


class ProcessOutputOut(Schema):
    name: str
    generation: int
    running: bool
    exit_code: int | None
    chunks: list[Chunk]
