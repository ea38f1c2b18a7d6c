"""Running a command: the exec recorded under the guard, then run through the sandbox's port
(its agent), in a session or fresh.

A foreground command in a session costs a write on this process's open
channel; a fresh one (outside any session) is a process the agent starts; a background one
keeps running and keeps its output in the agent, whoever asks next. The agent runs every
process as the sandbox user with a tag it cannot shed, so a timeout or a kill ends everything
the command started (see agent/contain.go).
"""

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol
from uuid import UUID

from django import db
from django.conf import settings

from boxyard.actors import Actor
from boxyard.errors import (
    N_,
    AgentGone,
    BoxyardError,
    ContainerGone,
    InvalidInput,
    NotFound,
    RuntimeFailure,
)
from boxyard.later import Awaited, Get
from boxyard.slots import Held
from boxyard.threads import release_connection
from hosts.engines import runtime_of
from sandboxes.guard import acting_on
from sandboxes.models import CodeContext, Exec, ExecState, Sandbox, ShellSession
from sandboxes.runtime import answers
from sandboxes.runtime.port import AgentOutdated, SandboxPort, port_of
from sandboxes.scripts import BAD_CWD
from sandboxes.services import booting, containers
from sandboxes.services.execs.ending import announce, fail, finish_from_status
from sandboxes.services.execs.requests import CodeRequest, ExecRequest
from sandboxes.services.shares import long_call

log = logging.getLogger(__name__)

# A command, or a run of code in a context: both are execs.
RunRequest = ExecRequest | CodeRequest

# Background execs are watched by the process that started them with waits this long.
_WATCH_SECONDS = 300
# Record the end of commands whose caller went away, and of followed ones as the agent reports
# it (a moment's work each, as they end).
_RECORDERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="exec-end")
# How long past its own timeout we wait for a command to be reported ended before giving up
# on it (the watchdog in the sandbox has killed it by then).
DEADLINE_GRACE_SECONDS = 15


class ExecWatch(Protocol):
    """Who follows a foreground command as it runs (an MCP client's progress, say): told its
    record as soon as there is one (to kill it), then each chunk of its output as the agent
    reads it ({seq, stream, text}), from the agent channel's reader thread."""

    def started(self, record: Exec) -> None: ...

    def chunk(self, chunk: dict[str, Any]) -> None: ...


class _Follow:
    """Who follows a background command from its first byte (`start_followed_exec`): its
    events, from the channel's reader thread, and what leaving them early takes. The end is
    recorded as soon as the agent reports it, off that thread, whether or not anyone still
    reads the events: the exit event carries the recording as a future (`recorded`)."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.on_event = on_event
        self.record_end: Callable[[dict[str, Any]], Exec] | None = None
        self.leave: Callable[[], None] = lambda: None

    def __call__(self, event: dict[str, Any]) -> None:
        if event["event"] == "exit" and self.record_end is not None:
            event["recorded"] = _RECORDERS.submit(self.record_end, event.pop("status", {}))
        self.on_event(event)


@dataclass(frozen=True)
class Followed:
    """A background exec followed from its first byte: its record, and `leave()`, for a
    follower that stops reading before the exit (this process then watches for the end, as
    it does for any background exec)."""

    record: Exec
    leave: Callable[[], None]


def run_exec(
    sandbox: Sandbox,
    request: RunRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    watch: ExecWatch | None = None,
) -> Exec:
    """Run a command and return its record: finished for a foreground exec, running for a
    background one. `watch` follows a foreground command through the agent as it runs."""
    return start_exec(
        sandbox, request, actor, holder=holder, epoch=epoch, watch=watch, counted=False
    ).block()


def start_exec(
    sandbox: Sandbox,
    request: RunRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    watch: ExecWatch | None = None,
    counted: bool = True,
) -> Awaited[Exec]:
    """`run_exec` as a long call: the command is recorded and sent to the agent here, and its
    end waited for by whoever holds the result (on the event loop, with no thread, or in
    place). A caller's foreground command (`counted`) holds one of the pipeline's long calls
    while it runs.

    The lease is checked (and renewed) in the transaction that records the exec, so a holder
    that lost the lease never reaches the container. A sandbox still on an older agent is
    migrated before the command is sent (`booting.current`), which then runs in its new
    container.
    """
    held = long_call(sandbox.pipeline_id) if counted and not request.background else None
    try:
        return _start(sandbox, request, actor, holder, epoch, watch, held)
    except BaseException:
        if held is not None:
            held.release()
        raise


def start_followed_exec(
    sandbox: Sandbox,
    request: ExecRequest,
    actor: Actor,
    on_event: Callable[[dict[str, Any]], None],
) -> Followed:
    """Start a background command whose output and end go to `on_event` from its first byte,
    as `subscribe` gives them, in the one request that starts it (no subscription of its
    own). Its end is recorded as the exit's report comes (the exit event's `recorded`, a
    future of the record), so this process does not watch for it as it does for any other
    background exec; a follower that stops reading before the exit calls `leave()`."""
    if not request.background:
        raise ValueError("only a background command is followed from its start")
    follow = _Follow(on_event)
    record = _start(sandbox, request, actor, None, None, None, None, follow).block()
    return Followed(record, follow.leave)


def _start(
    sandbox: Sandbox,
    request: RunRequest,
    actor: Actor,
    holder: str | None,
    epoch: int | None,
    watch: ExecWatch | None,
    held: Held | None,
    follow: _Follow | None = None,
) -> Awaited[Exec]:
    with acting_on(sandbox, actor, N_("exec"), holder=holder, epoch=epoch) as acting:
        sandbox, lease = acting.sandbox, acting.lease
        assert lease is not None
        if sandbox.env:  # the sandbox's own environment, under the command's
            request = replace(request, env={**sandbox.env, **request.env})
        init: dict[str, Any] | None
        if isinstance(request, CodeRequest):
            init, request = context_init(sandbox, request)
        else:
            init = None if request.one_shot else session_init(sandbox, request.session)
        record = Exec.objects.create(
            sandbox=sandbox,
            session=request.session,
            language=request.language if isinstance(request, CodeRequest) else "",
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
        announce(record, ended=False)
    if watch is not None:
        watch.started(record)
    return _run(sandbox, record, request, init, actor, watch, held, follow)


def session_init(sandbox: Sandbox, name: str) -> dict[str, Any]:
    """How a session starts when the agent does not have it (new, or a new container)."""
    if name == "default":
        return {"cwd": sandbox.workdir, "env": {}}
    row = ShellSession.objects.filter(sandbox=sandbox, name=name).first()
    if row is None:
        raise NotFound(
            N_(
                "no shell session %(name)r in this sandbox; create it first "
                "(POST /sandboxes/{id}/sessions)",
                name=name,
            ),
            session=name,
        )
    return {"cwd": row.cwd, "env": row.env}


def context_init(sandbox: Sandbox, request: CodeRequest) -> tuple[dict[str, Any], CodeRequest]:
    """How a code context starts when the agent does not have it, and the request with the
    context's language: a language's default context in the sandbox's workdir, any other
    from its row."""
    name = request.session
    if name == "default" or name.startswith("default-"):
        language = request.language or name.removeprefix("default-").replace("default", "python")
        return {"cwd": sandbox.workdir, "env": {}}, replace(request, language=language)
    row = CodeContext.objects.filter(sandbox=sandbox, name=name).first()
    if row is None:
        raise NotFound(
            N_(
                "no code context %(name)r in this sandbox; create it first "
                "(POST /sandboxes/{id}/code/contexts)",
                name=name,
            ),
            context_id=name,
        )
    if request.language and request.language != row.language:
        raise InvalidInput(
            "language",
            N_("context %(name)s runs %(language)s", name=name, language=row.language),
        )
    return {"cwd": row.cwd, "env": {}}, replace(request, language=row.language)


def _payload(
    sandbox: Sandbox, record: Exec, request: RunRequest, init: dict[str, Any] | None
) -> tuple[str, dict[str, Any]]:
    """The agent's op for the request, and its fields."""
    limit = sandbox.pipeline.output_limit_bytes
    payload: dict[str, Any] = {
        "exec": str(record.id),
        "timeout": request.timeout_seconds or 0,
        "limit": limit,
        "keep": max(settings.BOXYARD_EXEC_KEEP_BYTES, limit),
    }
    if isinstance(request, CodeRequest):
        payload.update(context=request.session, language=request.language, code=request.code)
        payload["init"] = init
        if request.env:
            payload["env"] = request.env
        return "code.run", payload
    payload["background"] = request.background
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
    if request.stdin:
        payload["stdin"] = True
    if env:
        payload["env"] = env
    return "run", payload


def _run(
    sandbox: Sandbox,
    record: Exec,
    request: RunRequest,
    init: dict[str, Any] | None,
    actor: Actor,
    watch: ExecWatch | None,
    held: Held | None,
    follow: _Follow | None,
) -> Awaited[Exec]:
    """Run in a session (`init` says how it starts if the agent does not have it yet), or
    fresh, outside any session, when `init` is None; or code in its context."""
    op, payload = _payload(sandbox, record, request, init)
    limit = payload["limit"]
    sandbox, agent = _port(sandbox, record, actor)
    wait = 10.0 if request.background else (request.timeout_seconds or 0) + DEADLINE_GRACE_SECONDS
    relay = None
    if watch is not None and not request.background:
        payload["watch"] = True  # the agent pushes the output to this run's own id
        relay = _relay(watch)
    try:
        if follow is not None:
            follow.record_end = lambda status: _end_reported(record, status, agent)
            request_id, answer, unfollow = agent.run_followed(follow, **payload)
            follow.leave = lambda: _leave(unfollow, agent, record.pk, limit)
        else:
            request_id, answer = agent.ask(op, on_event=relay, **payload)
    except (AgentGone, RuntimeFailure) as error:
        raise _lost_container(sandbox, record, error, actor) from error
    # A long command must not hold a database connection while it runs.
    release_connection()

    def finish(get: Get) -> Exec:
        return _ran(sandbox, agent, record, request, actor, get, watched=follow is None)

    def abandon() -> None:
        # Nobody waits any more, but the command runs on: its end is recorded when it comes,
        # and the pipeline's long call is held until then.
        answer.add_done_callback(lambda _: _RECORDERS.submit(_record_end, finish, answer, held))

    return Awaited(
        answer,
        finish,
        deadline=wait,
        abandon=abandon,
        forget=lambda: agent.forget(request_id),
        held=held,
        what="run",
        goes_on=True,
    )


def _record_end(finish: Callable[[Get], Exec], answer: "Future[Any]", held: Held | None) -> None:
    try:
        finish(lambda: answer.result(timeout=0))
    except BoxyardError:
        pass  # recorded as the error says
    except Exception:
        log.exception("recording the end of an abandoned command failed")
    finally:
        if held is not None:
            held.release()
        db.connection.close()


def _ran(
    sandbox: Sandbox,
    agent: SandboxPort,
    record: Exec,
    request: RunRequest,
    actor: Actor,
    get: Get,
    *,
    watched: bool = True,
) -> Exec:
    """The exec as the agent's answer to `run` leaves it; a background one's end watched
    for in this process unless it is followed (not `watched`)."""
    limit = sandbox.pipeline.output_limit_bytes
    try:
        status = get()
    except (AgentGone, RuntimeFailure) as error:
        raise _lost_container(sandbox, record, error, actor) from error
    except BoxyardError as error:
        fail(record, ExecState.FAILED, error.message)
        raise
    if request.background:
        if status.get("finished"):  # it could not start at all
            return finish_from_status(
                record, agent.call("status", exec=str(record.id), limit=limit), agent
            )
        if watched:
            _watch(agent, record.pk, limit)
        return record
    if (
        status.get("exit_code") == BAD_CWD
        and answers.text(status.get("stderr")).startswith("boxyard: cwd")
        and not status.get("stdout")
    ):
        fail(record, ExecState.FAILED, f"cwd {request.cwd} is not a directory")
        raise InvalidInput("cwd", N_("%(cwd)s is not a directory in the sandbox", cwd=request.cwd))
    return finish_from_status(record, status, agent)


def _relay(watch: ExecWatch) -> Callable[[dict[str, Any]], None]:
    def relay(message: dict[str, Any]) -> None:
        if message.get("event") == "chunk":
            watch.chunk(answers.chunks([message])[0])

    return relay


def _port(sandbox: Sandbox, record: Exec, actor: Actor) -> tuple[Sandbox, SandboxPort]:
    """The sandbox's port, the sandbox migrated first if it runs an older agent (then read
    again: its new container); a vanished container is recorded."""
    try:
        try:
            return sandbox, port_of(sandbox)
        except AgentOutdated:
            sandbox = booting.current(sandbox, actor)
            return sandbox, port_of(sandbox)
    except AgentOutdated as error:  # it could not be migrated: said, and recorded
        fail(record, ExecState.FAILED, str(error))
        raise
    except (AgentGone, ContainerGone) as error:
        raise _lost_container(sandbox, record, error, actor) from error


def _lost_container(
    sandbox: Sandbox, record: Exec, error: BoxyardError, actor: Actor
) -> BoxyardError:
    """What to raise when the agent cannot be reached: the container may be gone."""
    info = runtime_of(sandbox).inspect_container(sandbox.container_id)
    if info is None or not info.running:
        fail(record, ExecState.FAILED, str(error))
        stopped = ContainerGone(N_("the container stopped: %(error)s", error=error))
        return containers.gone(sandbox, stopped, actor)
    fail(record, ExecState.LOST, str(error))
    return error


def _end_reported(record: Exec, status: dict[str, Any], agent: SandboxPort) -> Exec:
    """A followed exec's end, recorded from the agent's report (in a recorder thread)."""
    try:
        return finish_from_status(record, status, agent)
    except Exception:
        log.exception("recording the end of followed exec %s failed", record.pk)
        raise
    finally:
        release_connection()


def _leave(unfollow: Callable[[], None], agent: SandboxPort, exec_pk: UUID, limit: int) -> None:
    """A followed background exec left before its end was recorded: its end watched for."""
    try:
        unfollow()
    finally:
        _watch(agent, exec_pk, limit)


def _watch(agent: SandboxPort, exec_pk: UUID, limit: int) -> None:
    """Record a background exec's end as soon as it comes (best effort: whoever reads the
    exec next records it too, so a restart of this process loses nothing)."""

    def watch() -> None:
        try:
            while True:
                status = agent.call(
                    "wait",
                    deadline=_WATCH_SECONDS + 30,
                    exec=str(exec_pk),
                    timeout=_WATCH_SECONDS,
                    limit=limit,
                )
                if status.get("finished"):
                    record = Exec.objects.select_related("sandbox").filter(pk=exec_pk).first()
                    if record is not None:
                        finish_from_status(record, status, agent)
                    return
        except BoxyardError:
            return  # the agent or the container went away; readers and the reconciler see to it
        except Exception:
            log.exception("watching background exec %s failed", exec_pk)
        finally:
            db.connection.close()  # the thread ends here: so does its connection

    threading.Thread(target=watch, name=f"watch-{str(exec_pk)[:8]}", daemon=True).start()
