"""The bot API's sandbox routes: parse, authorize, call one service, render."""

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Query, Router, Schema
from ninja.responses import codes_4xx, codes_5xx

from boxyard.errors import InvalidInput
from boxyard.relay import BoundedRelay
from boxyard.threads import in_pool
from sandboxes import metrics, selectors, services
from sandboxes.models import Exec, ExecState, Sandbox, State
from sandboxes.schemas import (
    ResetIn,
    ResetOut,
    CloseOut,
    DeleteOut,
    EntryOut,
    ErrorOut,
    ExecIn,
    ExecOut,
    ExecOutputOut,
    KeepAliveOut,
    Fencing,
    KillOut,
    LeaseOut,
    ListOut,
    OpenIn,
    OpenOut,
    ReadOut,
    SandboxListOut,
    SandboxOut,
    ProcessListOut,
    ProcessOut,
    ProcessOutputOut,
    SessionIn,
    SessionListOut,
    SessionOut,
    StdinIn,
    StdinOut,
    WaitIn,
    WaitOut,
    WriteIn,
    WriteOut,
)
from sandboxes.selectors import Principal
from sandboxes.services.compute import run_code

router = Router(tags=["sandboxes"])

# The views block (the database, the engine, a command that runs for minutes): under ASGI
# each request runs in a thread of its own from the server's pool (config.handlers).


def responds(schema: type) -> dict:
    """The success shape, and the error shape every failure has (documented for clients)."""
    return {200: schema, codes_4xx: ErrorOut, codes_5xx: ErrorOut}


def principal(request: HttpRequest) -> Principal:
    return request.auth  # type: ignore[attr-defined,no-any-return]


def render_sandbox(sandbox: Sandbox) -> dict:
    lease = sandbox.lease
    return {
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
        "lease": render_lease(lease),
    }


def render_lease(lease: object) -> dict:
    return {
        "holder": lease.holder,  # type: ignore[attr-defined]
        "epoch": lease.epoch,  # type: ignore[attr-defined]
        "expires_at": lease.expires_at if lease.holder else None,  # type: ignore[attr-defined]
    }


def render_exec(record: Exec) -> dict:
    return {
        "exec_id": record.id,
        "status": record.state,
        "exit_code": record.exit_code,
        "stdout": record.stdout,
        "stderr": record.stderr,
        "truncated": record.truncated,
        "stdout_truncated": record.stdout_truncated,
        "stderr_truncated": record.stderr_truncated,
        "duration_ms": record.duration_ms,
        "session": record.session,
        "background": record.background,
        "session_restarted": record.session_restarted,
        "oom_killed": record.oom_killed,
        "error": record.error,
    }


@router.post("/sandboxes/open", response=responds(OpenOut), summary="Get or create the sandbox of a scope")
def open_sandbox(request: HttpRequest, body: OpenIn) -> dict:
    who = principal(request)
    pipeline = selectors.pipeline_for(who, body.pipeline)
    opened = services.open_sandbox(
        pipeline, body.variables, who.actor, holder=body.holder, background=body.background
    )
    sandbox = selectors.sandbox_for(who, opened.sandbox.pk)
    return {**render_sandbox(sandbox), "created": opened.created, "source": opened.source}


@router.get(
    "/metrics", response=responds(dict[str, Any]),
    summary="Sandbox metrics of the caller's pipeline (an admin: every pipeline, and overall)",
)
def sandbox_metrics(request: HttpRequest) -> dict[str, Any]:
    return metrics.snapshot(principal(request).pipeline)


@router.get("/sandboxes", response=responds(SandboxListOut), summary="The pipeline's sandboxes")
def list_sandboxes(
    request: HttpRequest, status: State | None = None, scope_key: str | None = None
) -> dict:
    # `status` is the enum of states, so the document tells a caller every value it takes.
    found = selectors.sandboxes_for(
        principal(request), status=status.value if status else None, scope_key=scope_key
    )
    return {"sandboxes": [render_sandbox(sandbox) for sandbox in found]}


@router.get("/sandboxes/{sandbox_id}", response=responds(SandboxOut), summary="One sandbox")
def get_sandbox(request: HttpRequest, sandbox_id: str) -> dict:
    """The sandbox, with its workspace's size and use (asked of the sandbox when it runs)."""
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    usage = services.workspace_usage(sandbox)
    return {
        **render_sandbox(sandbox),
        "workspace": {
            "limit_bytes": usage.limit_bytes, "used_bytes": usage.used_bytes,
            "enforced": usage.enforced,
        },
    }


@router.post(
    "/sandboxes/{sandbox_id}/reset", response=responds(ResetOut),
    summary="End every process in the sandbox; sessions and managed processes start again",
)
def reset_sandbox(request: HttpRequest, sandbox_id: str, body: ResetIn) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    result = services.reset_sandbox(
        sandbox, who.actor, reason=body.reason, holder=body.holder, epoch=body.epoch
    )
    return {"ok": True, "killed": result.killed, "duration_ms": result.duration_ms}


class CloseQuery(Fencing):
    delete_workspace: bool = False


@router.delete("/sandboxes/{sandbox_id}", response=responds(CloseOut), summary="Close a sandbox")
def close_sandbox(request: HttpRequest, sandbox_id: str, query: Query[CloseQuery]) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    closed = services.close_sandbox(
        sandbox, who.actor, delete_workspace=query.delete_workspace, holder=query.holder,
        epoch=query.epoch,
    )
    return {"ok": True, "status": closed.state}


@router.post("/sandboxes/{sandbox_id}/exec", response=responds(ExecOut), summary="Run a command")
def exec_command(request: HttpRequest, sandbox_id: str, body: ExecIn) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    exec_request = services.clean_request(
        sandbox, cmd=body.cmd, cwd=body.cwd, env=body.env, session=body.session,
        timeout_seconds=body.timeout_seconds, background=body.background, one_shot=body.fresh,
    )
    record = services.run_exec(sandbox, exec_request, who.actor, holder=body.holder, epoch=body.epoch)
    return render_exec(record)


@router.get("/sandboxes/{sandbox_id}/execs/{exec_id}", response=responds(ExecOut), summary="One exec")
def get_exec(request: HttpRequest, sandbox_id: str, exec_id: str) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return render_exec(selectors.exec_for(who, sandbox, exec_id))


class OutputQuery(Schema):
    since_seq: int = Field(0, ge=0, description="The last sequence number already seen (0: none).")
    max_bytes: int | None = Field(
        None, ge=1, le=16 * 1024 * 1024, description="About how much output to return at most."
    )


def render_progress(record: Exec) -> dict:
    return {
        "done": record.state != ExecState.RUNNING, "status": record.state,
        "exit_code": record.exit_code,
    }


@router.get(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/output", response=responds(ExecOutputOut),
    summary="An exec's output as numbered chunks",
)
def exec_output(request: HttpRequest, sandbox_id: str, exec_id: str, query: Query[OutputQuery]) -> dict:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    chunks, record = services.exec_output(record, query.since_seq, query.max_bytes)
    return {"chunks": chunks, **render_progress(record)}


# One server-sent event (its `data` is a JSON object).
_SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["chunk", "exit", "gone"]},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"type": "object"},
        },
    },
}


class StreamQuery(Schema):
    since_seq: int = Field(0, ge=0, description="The last sequence number already seen (0: none).")


@router.get(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/stream",
    response={200: None, codes_4xx: ErrorOut, codes_5xx: ErrorOut},
    summary="An exec's output as server-sent events, as it is produced",
    openapi_extra={
        "responses": {
            200: {  # the same key as `response`'s, or the document would hold "200" twice
                "description": "`chunk` events ({seq, stream, text}), then one `exit` event "
                "({exit_code, timed_out, killed}); comments keep the connection alive.",
                "content": {"text/event-stream": {"schema": _SSE_EVENT}},
            }
        }
    },
)
def exec_stream(
    request: HttpRequest, sandbox_id: str, exec_id: str, query: Query[StreamQuery]
) -> StreamingHttpResponse:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    response = StreamingHttpResponse(_events(record, query.since_seq), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _events(record: Exec, since_seq: int) -> AsyncIterator[bytes]:
    """Chunks as the agent reads them, then the end; from the record if the agent is gone.
    A client that falls behind by more than _BACKLOG_CHARS gets the rest read from the
    agent's copy of the output, at its own pace."""
    relay: BoundedRelay[dict] = BoundedRelay(
        asyncio.get_running_loop(), _BACKLOG_CHARS, lambda event: len(event.get("text", "")) + 64
    )
    stop = await in_pool(services.subscribe, record, since_seq, relay.push)
    if stop is None:
        chunks, record = await in_pool(services.exec_output, record, since_seq)
        for chunk in chunks:
            yield _sse("chunk", chunk)
        yield _sse("exit", render_progress(record))
        return
    behind = False
    try:
        while True:
            try:
                event = await relay.get(timeout=_KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if event is None:
                behind = True
                break
            kind = event.pop("event")
            if kind == "chunk":
                since_seq = event["seq"]
            yield _sse(kind, event)
            if kind in ("exit", "gone"):
                break
    finally:
        await in_pool(stop)
    while behind:
        chunks, record = await in_pool(services.exec_output, record, since_seq, _BACKLOG_CHARS)
        for chunk in chunks:
            since_seq = chunk["seq"]  # type: ignore[assignment]  # an int, from render_chunks
            yield _sse("chunk", chunk)
        if not chunks and record.state != ExecState.RUNNING:
            yield _sse("exit", {
                **render_progress(record), "timed_out": record.state == ExecState.TIMED_OUT,
                "killed": record.state == ExecState.KILLED,
            })
            return
        if not chunks:
            await asyncio.sleep(_CATCH_UP_PAUSE_SECONDS)
    await in_pool(services.wait_exec, record, 5)


_KEEPALIVE_SECONDS = 15
# Output queued for one event stream at most (characters of text); and how often a stream
# that fell behind looks for new output once it has caught up.
_BACKLOG_CHARS = 1024 * 1024
_CATCH_UP_PAUSE_SECONDS = 0.25


@router.post(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/wait", response=responds(WaitOut), summary="Wait for an exec"
)
def exec_wait(request: HttpRequest, sandbox_id: str, exec_id: str, body: WaitIn) -> dict:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    return render_progress(services.wait_exec(record, body.timeout_seconds))


@router.post(
    "/sandboxes/{sandbox_id}/execs/{exec_id}/kill", response=responds(KillOut), summary="Kill an exec"
)
def exec_kill(request: HttpRequest, sandbox_id: str, exec_id: str, body: Fencing) -> dict:
    who = principal(request)
    record = selectors.exec_for(who, selectors.sandbox_for(who, sandbox_id), exec_id)
    record = services.kill_exec(record, who.actor, holder=body.holder, epoch=body.epoch)
    return {"ok": True, "status": record.state}


@router.put("/sandboxes/{sandbox_id}/files", response=responds(WriteOut), summary="Write a file")
def write_file(request: HttpRequest, sandbox_id: str, body: WriteIn) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    size, data = services.files.decoded_contents(body.contents, body.contents_b64)
    request.__dict__.pop("_body", None)  # parsed: the raw body need not wait for the write
    path = services.write_file(
        sandbox, body.path, data, who.actor, mode=body.mode, overwrite=body.overwrite,
        holder=body.holder, epoch=body.epoch,
    )
    return {"ok": True, "path": path, "size_bytes": size}


class ReadQuery(Schema):
    path: str = Field(..., min_length=1, max_length=4096)
    max_bytes: int | None = Field(None, ge=0)


@router.get("/sandboxes/{sandbox_id}/files", response=responds(ReadOut), summary="Read a file")
def read_file(request: HttpRequest, sandbox_id: str, query: Query[ReadQuery]) -> dict:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    content = services.read_file(sandbox, query.path, query.max_bytes)
    rendered = {
        "path": services.files.workspace_path(query.path),
        "truncated": content.truncated,
        "size_bytes": content.size_bytes,
    }
    try:
        rendered["contents"] = content.data.decode("utf-8")
    except UnicodeDecodeError:
        rendered["contents_b64"] = base64.b64encode(content.data).decode()
    return rendered


class ListQuery(Schema):
    path: str = Field("/workspace", min_length=1, max_length=4096)
    recursive: bool = False


@router.get("/sandboxes/{sandbox_id}/files/list", response=responds(ListOut), summary="List a directory")
def list_files(request: HttpRequest, sandbox_id: str, query: Query[ListQuery]) -> dict:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    entries, truncated = services.list_files(sandbox, query.path, query.recursive)
    return {"entries": [EntryOut(**entry.__dict__) for entry in entries], "truncated": truncated}


class DeleteQuery(Fencing):
    path: str = Field(..., min_length=1, max_length=4096)
    recursive: bool = False


@router.delete("/sandboxes/{sandbox_id}/files", response=responds(DeleteOut), summary="Delete a file")
def delete_file(request: HttpRequest, sandbox_id: str, query: Query[DeleteQuery]) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    deleted = services.delete_file(
        sandbox, query.path, who.actor, recursive=query.recursive, holder=query.holder,
        epoch=query.epoch,
    )
    return {"ok": True, "deleted": deleted}


@router.get("/sandboxes/{sandbox_id}/sessions", response=responds(SessionListOut), summary="Shell sessions")
def list_sessions(request: HttpRequest, sandbox_id: str) -> dict:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return {"sessions": services.list_sessions(sandbox)}


@router.post("/sandboxes/{sandbox_id}/sessions", response=responds(SessionOut), summary="Start a shell session")
def create_session(request: HttpRequest, sandbox_id: str, body: SessionIn) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return services.create_session(
        sandbox, body.name, who.actor, cwd=body.cwd, env=body.env, holder=body.holder,
        epoch=body.epoch,
    )


@router.delete(
    "/sandboxes/{sandbox_id}/sessions/{name}", response=responds(DeleteOut), summary="End a shell session"
)
def delete_session(request: HttpRequest, sandbox_id: str, name: str, query: Query[Fencing]) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    services.delete_session(sandbox, name, who.actor, holder=query.holder, epoch=query.epoch)
    return {"ok": True, "deleted": name}


@router.get(
    "/sandboxes/{sandbox_id}/processes", response=responds(ProcessListOut),
    summary="The pipeline's managed processes in this sandbox",
)
def list_processes(request: HttpRequest, sandbox_id: str) -> dict:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return {"processes": services.list_processes(sandbox)}


@router.post(
    "/sandboxes/{sandbox_id}/processes/{name}/stdin", response=responds(StdinOut),
    summary="Write to a managed process's stdin",
)
def process_stdin(request: HttpRequest, sandbox_id: str, name: str, body: StdinIn) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    if (body.text is None) == (body.data_b64 is None) and not body.eof:
        raise InvalidInput("text", "give text or data_b64 (or eof)")
    if body.data_b64 is not None:
        try:
            data = base64.b64decode(body.data_b64, validate=True)
        except ValueError:
            raise InvalidInput("data_b64", "is not valid base64") from None
    else:
        data = (body.text or "").encode()
    return services.write_stdin(
        sandbox, name, data, who.actor, eof=body.eof, holder=body.holder, epoch=body.epoch
    )


class ProcessOutputQuery(Schema):
    since_seq: int = Field(0, ge=0, description="The last sequence number already seen (0: none).")
    generation: int | None = Field(None, ge=1, description="Which run; default the current one.")
    max_bytes: int | None = Field(None, ge=1, le=16 * 1024 * 1024)
    wait_seconds: float = Field(
        0, ge=0, le=60, description="Wait this long for new output if there is none yet."
    )


@router.get(
    "/sandboxes/{sandbox_id}/processes/{name}/output", response=responds(ProcessOutputOut),
    summary="A managed process's output as numbered chunks",
)
def process_output(
    request: HttpRequest, sandbox_id: str, name: str, query: Query[ProcessOutputQuery]
) -> dict:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return services.read_output(
        sandbox, name, since_seq=query.since_seq, generation=query.generation,
        max_bytes=query.max_bytes, wait_seconds=query.wait_seconds,
    )


@router.post(
    "/sandboxes/{sandbox_id}/processes/{name}/restart", response=responds(ProcessOut),
    summary="Restart a managed process",
)
def process_restart(request: HttpRequest, sandbox_id: str, name: str, body: Fencing) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return services.restart_process(sandbox, name, who.actor, holder=body.holder, epoch=body.epoch)


@router.post(
    "/sandboxes/{sandbox_id}/keepalive", response=responds(KeepAliveOut),
    summary="Count as activity now (the idle deadline moves) and renew the lease",
)
def keep_alive(request: HttpRequest, sandbox_id: str, body: Fencing) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    sandbox = services.keep_alive(sandbox, who.actor, holder=body.holder, epoch=body.epoch)
    return {"ok": True, "idle_deadline": sandbox.idle_deadline, "expires_at": sandbox.expires_at}


@router.post("/sandboxes/{sandbox_id}/lease/renew", response=responds(LeaseOut), summary="Renew the lease")
def renew_lease(request: HttpRequest, sandbox_id: str, body: Fencing) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    return render_lease(services.renew_lease(sandbox, who.actor, holder=body.holder, epoch=body.epoch))


@router.post("/sandboxes/{sandbox_id}/lease/release", response=responds(LeaseOut), summary="Release the lease")
def release_lease(request: HttpRequest, sandbox_id: str, body: Fencing) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    lease = services.release_lease(
        sandbox, who.actor, holder=body.holder, epoch=body.epoch, force=who.is_admin
    )
    return render_lease(lease)


class TakeoverIn(Schema):
    holder: str | None = Field(None, max_length=200)
    reason: str = Field("", max_length=200)


@router.post("/sandboxes/{sandbox_id}/lease/takeover", response=responds(LeaseOut), summary="Take the lease over")
def takeover_lease(request: HttpRequest, sandbox_id: str, body: TakeoverIn) -> dict:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    lease = services.takeover_lease(sandbox, who.actor, holder=body.holder, reason=body.reason)
    return render_lease(lease)


class RunIn(Schema):
    pipeline: str = Field(..., min_length=1, max_length=50)
    language: str = Field(..., description="python, bash or sh")
    code: str
    files: dict[str, str] | None = Field(None, description="More files: path → text")
    env: dict[str, str] | None = None
    timeout_seconds: int | None = Field(None, ge=1)


class RunOut(Schema):
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    duration_ms: int
    status: str
    oom_killed: bool = Field(description="The kernel killed it: the sandbox ran out of memory.")
    error: str


@router.post("/run", response=responds(RunOut), summary="Compute mode: run code once in a fresh sandbox")
def run(request: HttpRequest, body: RunIn) -> dict:
    who = principal(request)
    pipeline = selectors.pipeline_for(who, body.pipeline)
    result = run_code(
        pipeline, who.actor, language=body.language, code=body.code, files_in=body.files,
        env=body.env, timeout_seconds=body.timeout_seconds,
    )
    record = result.exec
    return {
        "ok": result.ok,
        "exit_code": record.exit_code,
        "stdout": record.stdout,
        "stderr": record.stderr,
        "truncated": record.truncated,
        "duration_ms": result.duration_ms,
        "status": record.state,
        "oom_killed": record.oom_killed,
        "error": record.error,
    }

