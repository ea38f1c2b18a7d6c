"""Exec: run commands in a sandbox's shell sessions, in the foreground or the background.

Sandboxes created with the agent (all of them, when the agent binary is installed) run every
command through it: a foreground command in a session costs a write on the open channel, a
fresh one (outside any session) is a process the agent starts, and a background command keeps
running and keeps its output in the agent, whoever asks next. The agent runs every process as
the sandbox user with a tag it cannot shed, so a timeout or a kill ends everything the
command started (see agent/contain.go). Sandboxes without the agent run each command in a new
engine exec ("one-shot"), with the `default` session only and no background execs.
"""

import base64
import logging
import posixpath
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django import db
from django.db import transaction
from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import BoxyardError, InvalidInput, InvalidState, NotFound, RuntimeFailure
from pipelines.models import Pipeline
from sandboxes import metrics
from sandboxes.models import SESSION_NAME, Exec, ExecState, Sandbox, ShellSession, State
from sandboxes.runtime import ContainerGone, ExecDeadlineExceeded, get_runtime
from sandboxes.runtime.agent import AgentChannel, AgentGone, channel
from sandboxes.scripts import BAD_CWD, EXEC, WORKSPACE, sh
from sandboxes.services import containers, leases

log = logging.getLogger(__name__)

MAX_COMMAND_BYTES = 256 * 1024
MAX_ENV_VARS = 200
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SESSION_NAME = re.compile(SESSION_NAME)
# How long past its own timeout we wait for a command to be reported ended before giving up
# on it (the watchdog in the sandbox has killed it by then).
_DEADLINE_GRACE_SECONDS = 15
_SIGKILL_EXIT = 137
# Background execs are watched by the process that started them with waits this long.
_WATCH_SECONDS = 300
# The agent's protocol version that runs fresh commands itself (older ones: an engine exec).
FRESH_SINCE_VERSION = 2


@dataclass(frozen=True)
class ExecRequest:
    """A validated exec request."""

    argv: list[str] | None
    shell: str | None
    cwd: str | None  # None: the session's own cwd
    env: dict[str, str]  # for this command only, on top of the session's environment
    session: str
    timeout_seconds: int | None  # None: none (background execs only)
    background: bool = False
    # A new process outside any session ("fresh"): the sandbox's own environment and cwd.
    one_shot: bool = False
    pipeline_env: dict[str, str] = field(default_factory=dict)

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
    one_shot: bool = False,
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

    if one_shot and background:
        raise InvalidInput("fresh", "a fresh exec runs in the foreground; drop fresh or background")
    if one_shot and session not in (None, "", "default"):
        raise InvalidInput("fresh", "a fresh exec runs outside any session; drop fresh or session")
    return ExecRequest(
        argv=argv,
        shell=shell,
        cwd=clean_cwd(cwd),
        env=clean_env(env),
        session=clean_session_name(session),
        timeout_seconds=_clean_timeout(pipeline, timeout_seconds, bool(background)),
        background=_clean_flag(background, "background"),
        one_shot=one_shot,
        pipeline_env=dict(pipeline.env or {}),
    )


def clean_cwd(cwd: object) -> str | None:
    if cwd is None or cwd == "":
        return None
    if isinstance(cwd, str) and "\x00" not in cwd and len(cwd) <= 4096:
        return posixpath.normpath(posixpath.join(WORKSPACE, cwd))
    raise InvalidInput("cwd", "must be a path (absolute, or relative to /workspace)")


def clean_env(env: object) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, dict) or len(env) > MAX_ENV_VARS:
        raise InvalidInput("env", f"must be an object of at most {MAX_ENV_VARS} variables")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidInput("env", f"{name!r} is not a valid variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidInput(f"env.{name}", "must be a string without NUL characters")
    return dict(env)


def clean_session_name(session: object) -> str:
    if session is None or session == "":
        return "default"
    if not isinstance(session, str) or not _SESSION_NAME.fullmatch(session):
        raise InvalidInput(
            "session", "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return session


def _clean_flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(name, "must be true or false")
    return value


def _clean_timeout(pipeline: Pipeline, timeout_seconds: object, background: bool) -> int | None:
    ceiling = settings.BOXYARD_MAX_EXEC_TIMEOUT
    if timeout_seconds is None:
        # A background command runs until it ends or is killed; a foreground one is bounded.
        return None if background else pipeline.exec_timeout_seconds
    if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)):
        raise InvalidInput("timeout_seconds", "must be a number of seconds")
    if not 1 <= timeout_seconds <= ceiling:
        raise InvalidInput("timeout_seconds", f"must be between 1 and {ceiling}")
    return int(timeout_seconds)


def release_connection() -> None:
    """Give this thread's database connection back while it waits on a sandbox (the next
    query opens one again); not inside a transaction, which must keep its connection.

    Only a database server counts its connections: an SQLite connection is a file handle,
    cheaper to keep than to open again."""
    if db.connection.vendor != "sqlite" and not db.connection.in_atomic_block:
        db.connection.close()


def require_running(sandbox: Sandbox, operation: str) -> None:
    if sandbox.state != State.RUNNING:
        why = f" ({sandbox.stop_reason})" if sandbox.stop_reason else ""
        raise InvalidState(
            f"cannot {operation}: the sandbox is {sandbox.state}{why}; open it again to "
            "start it",
            state=sandbox.state,
            stop_reason=sandbox.stop_reason,
        )


def session_init(sandbox: Sandbox, name: str) -> dict[str, Any]:
    """How a session starts when the agent does not have it (new, or a new container)."""
    if name == "default":
        return {"cwd": sandbox.workdir, "env": {}}
    row = ShellSession.objects.filter(sandbox=sandbox, name=name).first()
    if row is None:
        raise NotFound(
            f"no shell session {name!r} in this sandbox; create it first "
            "(POST /sandboxes/{id}/sessions)",
            session=name,
        )
    return {"cwd": row.cwd, "env": row.env}


def run_exec(
    sandbox: Sandbox,
    request: ExecRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> Exec:
    """Run a command and return its record: finished for a foreground exec, running for a
    background one.

    The lease is checked (and renewed) in the transaction that records the exec, so a holder
    that lost the lease never reaches the container.
    """
    with transaction.atomic():
        sandbox = _relock(sandbox)
        require_running(sandbox, "exec")
        engine = not sandbox.agent
        if engine and request.background:
            raise InvalidInput(
                "background", "this sandbox runs without the agent, so it has no background execs"
            )
        if engine and request.session != "default":
            raise InvalidInput(
                "session", "this sandbox runs without the agent, so it has only the default session"
            )
        init = None if engine or request.one_shot else session_init(sandbox, request.session)
        lease = leases.authorize(
            sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor
        )
        record = Exec.objects.create(
            sandbox=sandbox,
            session=request.session,
            command=request.command,
            cwd=request.cwd or "",
            env=request.env,
            background=request.background,
            actor=str(actor),
            holder=lease.holder,
            epoch=lease.epoch,
            timeout_seconds=request.timeout_seconds or 0,
        )
        # Activity is stamped when the exec ends; while it runs, the running row is activity.
    if engine:
        return _run_one_shot(sandbox, record, request, actor)
    return _run_in_agent(sandbox, record, request, init, actor)


# What an exec depends on that may have changed since the caller read the sandbox.
_LIVE_FIELDS = ("state", "stop_reason", "container_id", "agent", "generation", "last_activity_at")


def _relock(sandbox: Sandbox) -> Sandbox:
    """The sandbox with its row locked and its changing fields read again under the lock: a
    narrow read (the caller loaded the row and its pipeline a moment ago)."""
    row = (
        Sandbox.objects.select_for_update(no_key=True)
        .filter(pk=sandbox.pk)
        .values_list(*_LIVE_FIELDS)
        .first()
    )
    if row is None:
        raise NotFound(f"no sandbox {sandbox.pk}")
    for name, value in zip(_LIVE_FIELDS, row):
        setattr(sandbox, name, value)
    return sandbox


# --- through the agent -------------------------------------------------------------------------


def _agent(sandbox: Sandbox, record: Exec | None, actor: Actor) -> AgentChannel:
    """This process's channel to the sandbox's agent; a vanished container is recorded."""
    try:
        return channel(sandbox.container_id)
    except (AgentGone, ContainerGone) as error:
        raise _lost_container(sandbox, record, error, actor) from error


def _lost_container(
    sandbox: Sandbox, record: Exec | None, error: BaseException, actor: Actor
) -> BoxyardError:
    """What to raise when the agent cannot be reached: the container may be gone."""
    info = get_runtime().inspect_container(sandbox.container_id)
    if info is None or not info.running:
        if record is not None:
            _fail(record, ExecState.FAILED, str(error))
        containers.mark_gone(sandbox, ContainerGone(f"the container stopped: {error}"), actor)
        return InvalidState(
            "the sandbox's container is gone; open the sandbox again to recreate it "
            "(the workspace is kept)",
            state=State.UNKNOWN,
        )
    if record is not None:
        _fail(record, ExecState.LOST, str(error))
    return error if isinstance(error, BoxyardError) else RuntimeFailure(str(error))


def _run_in_agent(
    sandbox: Sandbox, record: Exec, request: ExecRequest, init: dict[str, Any] | None,
    actor: Actor,
) -> Exec:
    """Run in a session (`init` says how it starts if the agent does not have it yet), or
    fresh, outside any session, when `init` is None."""
    limit = sandbox.pipeline.output_limit_bytes
    payload: dict[str, Any] = {
        "exec": str(record.id),
        "timeout": request.timeout_seconds or 0,
        "limit": limit,
        "keep": max(settings.BOXYARD_EXEC_KEEP_BYTES, limit),
        "background": request.background,
    }
    env = request.env
    if init is None:
        # As a new engine exec would run it: the pipeline's environment as it is now, on top
        # of the one the container was made with.
        payload["fresh"] = True
        env = {**request.pipeline_env, **request.env}
    else:
        payload["session"] = request.session
        payload["init"] = init
    if request.shell is not None:
        payload["shell"] = request.shell
    else:
        payload["argv"] = request.argv
    if request.cwd is not None:
        payload["cwd"] = request.cwd
    if env:
        payload["env"] = env
    agent = _agent(sandbox, record, actor)
    if init is None and agent.version < FRESH_SINCE_VERSION:
        return _run_one_shot(sandbox, record, request, actor)  # an agent older than fresh runs
    wait = 10.0 if request.background else (request.timeout_seconds or 0) + _DEADLINE_GRACE_SECONDS
    try:
        # A long command must not hold a database connection while it runs.
        status = agent.call("run", deadline=wait, on_slow=release_connection, **payload)
    except (AgentGone, RuntimeFailure) as error:
        raise _lost_container(sandbox, record, error, actor) from error
    except BoxyardError as error:
        _fail(record, ExecState.FAILED, error.message)
        raise
    if request.background:
        if status.get("finished"):  # it could not start at all
            return finish_from_status(record, agent.call("status", exec=str(record.id), limit=limit))
        _watch(sandbox.container_id, record.pk, limit)
        return record
    if (
        status.get("exit_code") == BAD_CWD
        and _decode(status.get("stderr")).startswith("boxyard: cwd")
        and not status.get("stdout")
    ):
        _fail(record, ExecState.FAILED, f"cwd {request.cwd} is not a directory")
        raise InvalidInput("cwd", f"{request.cwd} is not a directory in the sandbox")
    return finish_from_status(record, status)


def finish_from_status(record: Exec, status: dict[str, Any]) -> Exec:
    """Record an exec's end as the agent reports it; only the first report counts."""
    if not status.get("finished"):
        return record
    stdout, stderr = status.get("stdout"), status.get("stderr")
    if stdout is None and stderr is None and status.get("stdout_bytes", 0) + status.get("stderr_bytes", 0):
        stdout, stderr = _heads(record)
    stdout_bytes, stderr_bytes = _int(status.get("stdout_bytes")), _int(status.get("stderr_bytes"))
    head_out, head_err = _raw(stdout), _raw(stderr)
    exit_code = status.get("exit_code")
    exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else -1
    if status.get("timed_out"):
        state = ExecState.TIMED_OUT
        error = f"timed out after {record.timeout_seconds} s; its processes were killed"
    elif status.get("killed"):
        state, error = ExecState.KILLED, "killed on request"
    elif exit_code < 0:
        state, error = ExecState.FAILED, str(status.get("error") or "the command could not run")
    else:
        state, error = ExecState.COMPLETED, ""
    if status.get("oom_killed") is True:
        note = "killed by the kernel: the sandbox ran out of memory (its memory_mb limit)"
        error = f"{error}; {note}" if error else note
    if status.get("session_restarted"):
        note = "the command ended its shell; the session was started again with its last state"
        error = f"{error}; {note}" if error else note
    if left := _int(status.get("left_running")):
        deadline = f"end when its timeout ({record.timeout_seconds} s) passes" if record.timeout_seconds else "run until killed"
        note = f"it left {left} process{'es' if left > 1 else ''} running, which {deadline}"
        error = f"{error}; {note}" if error else note
    values = {
        "state": state,
        "exit_code": exit_code,
        "stdout": head_out.decode("utf-8", errors="replace"),
        "stderr": head_err.decode("utf-8", errors="replace"),
        "stdout_bytes": max(stdout_bytes, len(head_out)),
        "stderr_bytes": max(stderr_bytes, len(head_err)),
        "stdout_truncated": stdout_bytes > len(head_out),
        "stderr_truncated": stderr_bytes > len(head_err),
        "session_restarted": status.get("session_restarted") is True,
        "oom_killed": status.get("oom_killed") is True,
        "duration_ms": _int(status.get("duration_ms")),
        "error": error[:2000],
        "finished_at": timezone.now(),
    }
    with transaction.atomic():
        updated = Exec.objects.filter(pk=record.pk, state=ExecState.RUNNING).update(**values)
        if updated:
            _ended(record, state, values["duration_ms"])
    if not updated:  # another process recorded the end first: show what it recorded
        record.refresh_from_db()
        return record
    for name, value in values.items():
        setattr(record, name, value)
    return record


def _heads(record: Exec) -> tuple[bytes, bytes]:
    """The first bytes of each stream, from the agent; nothing if it has let the exec go (it
    keeps finished ones within a cap)."""
    sandbox = record.sandbox
    try:
        status = channel(sandbox.container_id).call(
            "status", exec=str(record.id), limit=sandbox.pipeline.output_limit_bytes
        )
    except NotFound:
        return b"", b""
    return _raw(status.get("stdout")), _raw(status.get("stderr"))


# What the agent answers comes from inside the sandbox, where the sandbox's own code could
# tamper with it: every value is checked before use, and anything odd reads as empty.


def optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _raw(data: object) -> bytes:
    if not isinstance(data, str) or not data:
        return b""
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        return b""


def render_chunks(chunks: object) -> list[dict[str, object]]:
    """The agent's chunks as the API shows them: {seq, stream, text}."""
    if not isinstance(chunks, list):
        return []
    return [
        {
            "seq": _int(chunk.get("seq")),
            "stream": "stderr" if chunk.get("stream") == "stderr" else "stdout",
            "text": _decode(chunk.get("data")),
        }
        for chunk in chunks
        if isinstance(chunk, dict)
    ]


def _decode(data: object) -> str:
    return _raw(data).decode("utf-8", errors="replace")


def _watch(container: str, exec_pk: object, limit: int) -> None:
    """Record a background exec's end as soon as it comes (best effort: whoever reads the
    exec next records it too, so a restart of this process loses nothing)."""

    def watch() -> None:
        try:
            agent = channel(container)
            while True:
                status = agent.call(
                    "wait", deadline=_WATCH_SECONDS + 30, exec=str(exec_pk),
                    timeout=_WATCH_SECONDS, limit=limit,
                )
                if status.get("finished"):
                    record = Exec.objects.select_related("sandbox").filter(pk=exec_pk).first()
                    if record is not None:
                        finish_from_status(record, status)
                    return
        except BoxyardError:
            return  # the agent or the container went away; readers and the reconciler see to it
        except Exception:  # noqa: BLE001 - a watcher must never take the process down
            log.exception("watching background exec %s failed", exec_pk)
        finally:
            db.connection.close()  # the thread ends here: so does its connection

    threading.Thread(target=watch, name=f"watch-{str(exec_pk)[:8]}", daemon=True).start()


# --- one-shot (a fresh engine exec) -----------------------------------------------------------------


def _run_one_shot(sandbox: Sandbox, record: Exec, request: ExecRequest, actor: Actor) -> Exec:
    timeout = request.timeout_seconds or sandbox.pipeline.exec_timeout_seconds
    cwd = request.cwd or WORKSPACE
    mode, command = ("shell", [request.shell]) if request.shell is not None else ("argv", request.argv)
    argv = sh(EXEC, "boxyard-exec", str(timeout), cwd, mode, *(command or []))
    try:
        result = get_runtime().exec(
            sandbox.container_id,
            argv,
            env={**request.pipeline_env, **request.env},
            output_limit=sandbox.pipeline.output_limit_bytes,
            deadline_seconds=timeout + _DEADLINE_GRACE_SECONDS,
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
        _fail(record, ExecState.FAILED, f"cwd {cwd} is not a directory")
        raise InvalidInput("cwd", f"{cwd} is not a directory in the sandbox")

    timed_out = result.exit_code == _SIGKILL_EXIT and result.duration_ms >= timeout * 1000
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
        record.error = f"timed out after {timeout} s; its processes were killed"
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
        _ended(record, record.state, record.duration_ms)


def _ended(record: Exec, state: str, duration_ms: int | None) -> None:
    """An exec's end: activity of its sandbox (through the loaded sandbox when there is one,
    which knows when it was last stamped), and counted."""
    if Exec.sandbox.is_cached(record) and Sandbox.pipeline.is_cached(record.sandbox):
        sandbox: Sandbox | None = record.sandbox
        sandbox.record_activity()  # type: ignore[union-attr]
    elif sandbox := Sandbox.objects.select_related("pipeline").filter(pk=record.sandbox_id).first():
        sandbox.record_activity(force=True)
    if sandbox is not None:
        metrics.observe_exec(sandbox.pipeline.slug, state, duration_ms)


# --- reading, waiting, killing ---------------------------------------------------------------------


def _live_agent(record: Exec) -> AgentChannel | None:
    """The agent that knows this exec, if it may still know it."""
    sandbox = record.sandbox
    if not sandbox.agent or sandbox.state != State.RUNNING or not sandbox.container_id:
        return None
    try:
        return channel(sandbox.container_id)
    except BoxyardError:
        return None


def _forgotten(record: Exec) -> Exec:
    """The agent no longer knows a running exec (its sandbox restarted): it is lost."""
    if record.state == ExecState.RUNNING:
        with transaction.atomic():
            Exec.objects.filter(pk=record.pk, state=ExecState.RUNNING).update(
                state=ExecState.LOST,
                error="the sandbox's agent no longer knows this exec (the sandbox restarted)",
                finished_at=timezone.now(),
            )
        record.refresh_from_db()
    return record


def exec_output(
    record: Exec, since_seq: int = 0, max_bytes: int | None = None
) -> tuple[list[dict[str, object]], Exec]:
    """An exec's output as chunks numbered from 1: those after `since_seq` (the last seen),
    at most about `max_bytes` of them; and the exec as it is now."""
    agent = _live_agent(record)
    if agent is not None:
        try:
            answer = agent.call(
                "output", exec=str(record.id), since_seq=since_seq, max_bytes=max_bytes or 0
            )
        except NotFound:
            record = _forgotten(record)
        else:
            chunks = render_chunks(answer.get("chunks"))
            if answer.get("finished") and record.state == ExecState.RUNNING:
                # The answer's chunks were read before the end was; a later read gets the rest.
                try:
                    status = _status(agent, record)
                except NotFound:
                    status = answer  # let go by the agent meanwhile: its end, as just read
                record = finish_from_status(record, status)
            return chunks, record
    elif record.state == ExecState.RUNNING and record.background:
        record = _forgotten(record)
    return exec_chunks(record, since_seq), record


def _status(agent: AgentChannel, record: Exec) -> dict[str, Any]:
    return agent.call(
        "status", exec=str(record.id), limit=record.sandbox.pipeline.output_limit_bytes
    )


def exec_chunks(record: Exec, since_seq: int = 0) -> list[dict[str, object]]:
    """The output stored with a finished exec, as chunks numbered from 1 (at most two: one
    per stream; what the agent kept beyond them is gone with its sandbox)."""
    streams = [("stdout", record.stdout), ("stderr", record.stderr)]
    numbered = [(stream, text) for stream, text in streams if text]
    return [
        {"seq": seq, "stream": stream, "text": text}
        for seq, (stream, text) in enumerate(numbered, start=1)
        if seq > since_seq
    ]


def wait_exec(record: Exec, timeout_seconds: float) -> Exec:
    """The exec once it has finished, or as it is when the timeout runs out."""
    if record.state != ExecState.RUNNING:
        return record
    agent = _live_agent(record)
    if agent is not None:
        try:
            status = agent.call(
                "wait", deadline=timeout_seconds + 30, on_slow=release_connection,
                exec=str(record.id),
                timeout=timeout_seconds, limit=record.sandbox.pipeline.output_limit_bytes,
            )
        except NotFound:
            return _forgotten(record)
        return finish_from_status(record, status)
    deadline = time.monotonic() + timeout_seconds
    while record.state == ExecState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
        record.refresh_from_db()
    return record


def kill_exec(record: Exec, actor: Actor, *, holder: str | None = None, epoch: int | None = None) -> Exec:
    """Kill an exec and every process it started, wherever they went, also those it left
    running after it ended; answer once it has ended."""
    if record.state != ExecState.RUNNING and not record.sandbox.agent:
        return record
    with transaction.atomic():
        sandbox = Sandbox.objects.locked().get(pk=record.sandbox_id)
        leases.authorize(sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor)
    agent = _live_agent(record)
    if agent is None:
        if record.state != ExecState.RUNNING:
            return record  # its sandbox stopped: so did every process of it
        raise InvalidState("this exec runs without the agent and ends with its own request")
    try:
        agent.call("kill", exec=str(record.id))
    except NotFound:
        return _forgotten(record)
    return wait_exec(record, 10)


def subscribe(
    record: Exec, since_seq: int, on_event: Callable[[dict[str, Any]], None]
) -> Callable[[], None] | None:
    """Deliver the exec's chunks after `since_seq`, then its end, to `on_event` as they come
    ({"event": "chunk", seq, stream, text} and {"event": "exit", ...}); returns the function
    that stops it, or None when the exec can only be read from its record."""
    agent = _live_agent(record)
    if agent is None:
        return None

    def relay(message: dict[str, Any]) -> None:
        if message["event"] == "chunk":
            on_event({"event": "chunk", **render_chunks([message])[0]})
        elif message["event"] == "exit":
            status = message.get("status") or {}
            on_event({
                "event": "exit", "exit_code": optional_int(status.get("exit_code")),
                "timed_out": status.get("timed_out") is True, "killed": status.get("killed") is True,
            })
        else:
            on_event({"event": "gone", "reason": message.get("reason", "")})

    try:
        answer = agent.call("subscribe", exec=str(record.id), since_seq=since_seq, on_event=relay)
    except NotFound:
        _forgotten(record)
        return None
    subscription = answer["_id"]
    return lambda: agent.unsubscribe(subscription, str(record.id))
