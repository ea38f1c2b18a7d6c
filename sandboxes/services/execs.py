"""Foreground exec: run one command in a sandbox and record it."""

import posixpath
import re
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import InvalidInput, InvalidState, RuntimeFailure
from pipelines.models import Pipeline
from sandboxes.models import Exec, ExecState, Sandbox, State
from sandboxes.runtime import ContainerGone, ExecDeadlineExceeded, get_runtime
from sandboxes.scripts import BAD_CWD, EXEC, WORKSPACE, sh
from sandboxes.services import containers, leases

MAX_COMMAND_BYTES = 256 * 1024
MAX_ENV_VARS = 200
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# How long past its own timeout we wait for the engine to end an exec's stream before giving
# up on it (the in-sandbox watchdog has killed the command by then).
_DEADLINE_GRACE_SECONDS = 15
_SIGKILL_EXIT = 137


@dataclass(frozen=True)
class ExecRequest:
    """A validated exec request."""

    argv: list[str] | None
    shell: str | None
    cwd: str
    env: dict[str, str]
    session: str
    timeout_seconds: int

    @property
    def command(self) -> list[str] | str:
        return self.argv if self.argv is not None else self.shell or ""


def clean_request(
    target: Sandbox | Pipeline,
    *,
    cmd: object,
    cwd: object = None,
    env: object = None,
    session: object = None,
    timeout_seconds: object = None,
    background: object = False,
) -> ExecRequest:
    """Check an exec request against the pipeline (or the sandbox's pipeline) it is for."""
    pipeline = target.pipeline if isinstance(target, Sandbox) else target
    argv: list[str] | None = None
    shell: str | None = None
    if isinstance(cmd, str):
        if not cmd.strip():
            raise InvalidInput("cmd", "must not be empty")
        shell = cmd
    elif isinstance(cmd, list):
        if not cmd or not all(isinstance(arg, str) for arg in cmd):
            raise InvalidInput("cmd", "must be a non-empty list of strings, or a shell string")
        if not cmd[0]:
            raise InvalidInput("cmd", "the program name (cmd[0]) must not be empty")
        argv = list(cmd)
    else:
        raise InvalidInput("cmd", "must be a list of strings (argv) or a shell string")
    parts = [shell] if shell is not None else argv or []
    if any("\x00" in part for part in parts):
        raise InvalidInput("cmd", "must not contain NUL characters")
    if sum(len(part.encode()) for part in parts) > MAX_COMMAND_BYTES:
        raise InvalidInput("cmd", f"is longer than {MAX_COMMAND_BYTES} bytes")

    if cwd is None or cwd == "":
        cwd_path = WORKSPACE
    elif isinstance(cwd, str) and "\x00" not in cwd and len(cwd) <= 4096:
        cwd_path = posixpath.normpath(posixpath.join(WORKSPACE, cwd))
    else:
        raise InvalidInput("cwd", "must be a path (absolute, or relative to /workspace)")

    clean_env = dict(pipeline.env or {})
    if env is not None:
        if not isinstance(env, dict) or len(env) > MAX_ENV_VARS:
            raise InvalidInput("env", f"must be an object of at most {MAX_ENV_VARS} variables")
        for name, value in env.items():
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                raise InvalidInput("env", f"{name!r} is not a valid variable name")
            if not isinstance(value, str) or "\x00" in value:
                raise InvalidInput(f"env.{name}", "must be a string without NUL characters")
            clean_env[name] = value

    if background:
        raise InvalidInput("background", "background execs are not available yet; run in the foreground")
    if session is None or session == "":
        session = "default"
    if session != "default":
        raise InvalidInput("session", f"unknown shell session {session!r}")

    ceiling = settings.BOXYARD_MAX_EXEC_TIMEOUT
    if timeout_seconds is None:
        timeout = pipeline.exec_timeout_seconds
    elif isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)):
        raise InvalidInput("timeout_seconds", "must be a number of seconds")
    elif not 1 <= timeout_seconds <= ceiling:
        raise InvalidInput("timeout_seconds", f"must be between 1 and {ceiling}")
    else:
        timeout = int(timeout_seconds)
    return ExecRequest(
        argv=argv, shell=shell, cwd=cwd_path, env=clean_env, session=str(session),
        timeout_seconds=timeout,
    )


def require_running(sandbox: Sandbox, operation: str) -> None:
    if sandbox.state != State.RUNNING:
        why = f" ({sandbox.stop_reason})" if sandbox.stop_reason else ""
        raise InvalidState(
            f"cannot {operation}: the sandbox is {sandbox.state}{why}; open it again to "
            "start it",
            state=sandbox.state,
            stop_reason=sandbox.stop_reason,
        )


def run_exec(
    sandbox: Sandbox,
    request: ExecRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> Exec:
    """Run a command to completion (or its timeout) and return the recorded Exec.

    The lease is checked (and renewed) in the transaction that records the exec, so a holder
    that lost the lease never reaches the container.
    """
    with transaction.atomic():
        sandbox = Sandbox.objects.locked().get(pk=sandbox.pk)
        require_running(sandbox, "exec")
        lease = leases.authorize(
            sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor
        )
        record = Exec.objects.create(
            sandbox=sandbox,
            session=request.session,
            command=request.command,
            cwd=request.cwd,
            env=request.env,
            actor=str(actor),
            holder=lease.holder,
            epoch=lease.epoch,
            timeout_seconds=request.timeout_seconds,
        )
        # Activity is stamped when the exec ends; while it runs, the running row is activity.

    mode, command = ("shell", [request.shell]) if request.shell is not None else ("argv", request.argv)
    argv = sh(EXEC, "boxyard-exec", str(request.timeout_seconds), request.cwd, mode, *(command or []))
    try:
        result = get_runtime().exec(
            sandbox.container_id,
            argv,
            env=request.env,
            output_limit=sandbox.pipeline.output_limit_bytes,
            deadline_seconds=request.timeout_seconds + _DEADLINE_GRACE_SECONDS,
        )
    except ContainerGone as error:
        _fail(record, ExecState.FAILED, str(error))
        containers.mark_gone(sandbox, error, actor)
        raise InvalidState(
            "the sandbox's container is gone; open the sandbox again to recreate it "
            "(the workspace is kept)",
            state=State.UNKNOWN,
        ) from error
    except ExecDeadlineExceeded as error:
        _fail(record, ExecState.LOST, str(error))
        raise
    except RuntimeFailure as error:
        _fail(record, ExecState.FAILED, str(error))
        raise

    if result.exit_code == BAD_CWD and result.stderr.startswith(b"boxyard: cwd") and not result.stdout:
        _fail(record, ExecState.FAILED, f"cwd {request.cwd} is not a directory")
        raise InvalidInput("cwd", f"{request.cwd} is not a directory in the sandbox")

    timed_out = (
        result.exit_code == _SIGKILL_EXIT and result.duration_ms >= request.timeout_seconds * 1000
    )
    record.state = ExecState.TIMED_OUT if timed_out else ExecState.COMPLETED
    record.exit_code = result.exit_code
    record.stdout = result.stdout.decode("utf-8", errors="replace")
    record.stderr = result.stderr.decode("utf-8", errors="replace")
    record.stdout_bytes = result.stdout_bytes
    record.stderr_bytes = result.stderr_bytes
    record.stdout_truncated = result.stdout_truncated
    record.stderr_truncated = result.stderr_truncated
    record.duration_ms = result.duration_ms
    if timed_out:
        record.error = f"timed out after {request.timeout_seconds} s; its processes were killed"
    _finish(record)
    return record


def _fail(record: Exec, state: str, error: str) -> None:
    record.state = state
    record.error = error[:2000]
    _finish(record)


def _finish(record: Exec) -> None:
    record.finished_at = timezone.now()
    with transaction.atomic():
        record.save()
        Sandbox.objects.filter(pk=record.sandbox_id).update(last_activity_at=Now())


def exec_chunks(record: Exec, since_seq: int = 0) -> list[dict[str, object]]:
    """An exec's output as chunks numbered from 1, those after `since_seq` (0: all)."""
    streams = [("stdout", record.stdout), ("stderr", record.stderr)]
    numbered = [(stream, text) for stream, text in streams if text]
    return [
        {"seq": seq, "stream": stream, "text": text}
        for seq, (stream, text) in enumerate(numbered, start=1)
        if seq > since_seq
    ]


def wait_exec(record: Exec, timeout_seconds: float) -> Exec:
    """The exec once it has finished, or as it is when the timeout runs out."""
    deadline = time.monotonic() + timeout_seconds
    while record.state == ExecState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
        record.refresh_from_db()
    return record


def kill_exec(record: Exec) -> Exec:
    """Kill a running exec. Foreground execs end with their request, so only a finished one
    can be named here: that is answered with its state."""
    if record.state == ExecState.RUNNING:
        raise InvalidState("a foreground exec ends with its own request and cannot be killed")
    return record


def list_sessions(sandbox: Sandbox) -> list[dict[str, object]]:
    if sandbox.state == State.DESTROYED:
        raise InvalidState("the sandbox is destroyed", state=sandbox.state)
    return [{"name": "default", "cwd": sandbox.workdir, "env": dict(sandbox.pipeline.env or {})}]
