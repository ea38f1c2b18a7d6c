"""Managed processes: the long-running programs a pipeline declares (an MCP stdio server,
say), kept alive by the agent in each of its sandboxes.

The agent starts them, restarts one that dies with a growing backoff (1 s doubling to 30 s,
back to 1 s after a minute of good running) and keeps each run's output as an exec named
`<name>~<generation>`. Bots write to a process's stdin and read its stdout through the API,
which is enough to speak a line protocol such as MCP over stdio.
"""

import base64
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, InvalidInput, Message, NotFound
from boxyard.threads import release_connection
from sandboxes import events
from sandboxes.guard import acting_on, require_running
from sandboxes.models import Sandbox, State
from sandboxes.runtime import answers
from sandboxes.runtime.port import SandboxPort, port_of

log = logging.getLogger(__name__)

MAX_STDIN_BYTES = 1024 * 1024
MAX_WAIT_SECONDS = 60


def _declared(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    return {process["name"]: process for process in sandbox.pipeline.processes or []}


def _start_payload(process: dict[str, Any]) -> dict[str, Any]:
    cmd = process["cmd"]
    payload: dict[str, Any] = {
        "name": process["name"],
        "cwd": process.get("cwd", "/workspace"),
        "env": process.get("env", {}),
        "restart": process.get("restart", True),
        "keep": settings.BOXYARD_EXEC_KEEP_BYTES,
    }
    payload["shell" if isinstance(cmd, str) else "argv"] = cmd
    return payload


def start_declared(sandbox: Sandbox, agent: SandboxPort | None = None) -> list[dict[str, Any]]:
    """Start the pipeline's processes that are not running in the sandbox (idempotent)."""
    payloads = {name: _start_payload(process) for name, process in _declared(sandbox).items()}
    if not payloads:
        return []
    agent = agent or port_of(sandbox)
    running = _live(agent)
    return [
        agent.call("process.start", **payload)
        for name, payload in payloads.items()
        if name not in running or running[name].get("state") in ("stopped", "exited")
    ]


def _live(agent: SandboxPort) -> dict[str, dict[str, Any]]:
    listed = agent.call("process.list").get("processes")
    return (
        {p["name"]: p for p in listed if isinstance(p, dict) and isinstance(p.get("name"), str)}
        if isinstance(listed, list)
        else {}
    )


def start_after_boot(sandbox: Sandbox) -> None:
    """Called once a sandbox runs: its processes start; a failure is an event, not an error
    of the open (the processes are started again when they are next asked for)."""
    if not _declared(sandbox):
        return
    try:
        start_declared(sandbox)
    except BoxyardError as error:
        log.warning("managed processes of %s did not start: %s", sandbox.pk, error)
        with transaction.atomic():
            events.record(
                "system", "process.start_failed", sandbox=sandbox, reason=str(error)[:200]
            )


def _agent_for(sandbox: Sandbox, operation: Message) -> SandboxPort:
    require_running(sandbox, operation)
    return port_of(sandbox)


def _render(info: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": declared["name"],
        "state": str(info.get("state", "")),
        "generation": answers.optional_int(info.get("generation")) or 0,
        "restarts": answers.optional_int(info.get("restarts")) or 0,
        "pid": answers.optional_int(info.get("pid")) or None,
        "last_exit_code": answers.optional_int(info.get("last_exit_code")),
        "backoff_ms": answers.optional_int(info.get("backoff_ms")) or 0,
        "cmd": declared["cmd"],
    }


def start_and_list_processes(sandbox: Sandbox) -> list[dict[str, Any]]:
    """Start any of the pipeline's processes that is not running, then list them all as they
    are now (the bot API's `GET …/processes`: a read that writes). `read_processes` starts
    none."""
    if _declared(sandbox) and sandbox.state == State.RUNNING:
        start_declared(sandbox)
    return read_processes(sandbox)


def read_processes(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The pipeline's processes in this sandbox as they are now, starting none (what the
    dashboard shows)."""
    declared = _declared(sandbox)
    if not declared:
        return []
    if sandbox.state != State.RUNNING:
        return [_render({"state": "stopped"}, process) for process in declared.values()]
    live = _live(port_of(sandbox))
    return [
        _render(live.get(name, {"state": "stopped"}), process) for name, process in declared.items()
    ]


def _declared_one(sandbox: Sandbox, name: str) -> dict[str, Any]:
    """The pipeline's declaration of process `name`; NotFound if it declares none so named."""
    declared = _declared(sandbox)
    if name not in declared:
        raise NotFound(
            N_(
                "pipeline %(pipeline)s declares no process %(name)r",
                pipeline=sandbox.pipeline.slug,
                name=name,
            ),
            process=name,
        )
    return declared[name]


def _process(sandbox: Sandbox, name: str, agent: SandboxPort) -> dict[str, Any]:
    declared = {name: _declared_one(sandbox, name)}
    start_declared(sandbox, agent)
    for info in agent.call("process.list").get("processes") or []:
        if isinstance(info, dict) and info.get("name") == name:
            return {
                **_render(info, declared[name]),
                "exec": info.get("exec") if isinstance(info.get("exec"), str) else None,
            }
    raise NotFound(N_("process %(name)r is not running in this sandbox", name=name), process=name)


def _not_running(name: str, info: dict[str, Any]) -> InvalidInput:
    """The refusal to talk to a managed process between two of its runs."""
    return InvalidInput(
        "process",
        N_(
            "%(name)s is %(state)s (it is restarted after a backoff); try again",
            name=name,
            state=info["state"],
        ),
    )


def stdin_bytes(text: str | None, data_b64: str | None, *, eof: bool) -> bytes:
    """What to write, given as text or as base64 (one of them); nothing at all only with
    `eof`."""
    if (text is None) == (data_b64 is None) and not eof:
        raise InvalidInput("text", N_("give text or data_b64 (or eof)"))
    if data_b64 is not None:
        try:
            return base64.b64decode(data_b64, validate=True)
        except ValueError:
            raise InvalidInput("data_b64", N_("is not valid base64")) from None
    return (text or "").encode()


def write_stdin(
    sandbox: Sandbox,
    name: str,
    data: bytes,
    actor: Actor,
    *,
    eof: bool = False,
    holder: str | None = None,
    epoch: int | None = None,
) -> dict[str, Any]:
    """Write bytes to the process's stdin (its current run); `eof` closes it after them."""
    if len(data) > MAX_STDIN_BYTES:
        raise InvalidInput("data", N_("at most %(count)s bytes per write", count=MAX_STDIN_BYTES))
    with acting_on(
        sandbox, actor, N_("write to a process"), holder=holder, epoch=epoch, activity=True
    ):
        pass
    agent = _agent_for(sandbox, N_("write to a process"))
    info = _process(sandbox, name, agent)
    if info["state"] != "running" or not info["exec"]:
        raise _not_running(name, info)
    agent.call("stdin", exec=info["exec"], data=base64.b64encode(data).decode(), eof=eof)
    return {"ok": True, "generation": info["generation"]}


def read_output(
    sandbox: Sandbox,
    name: str,
    *,
    since_seq: int = 0,
    generation: int | None = None,
    max_bytes: int | None = None,
    wait_seconds: float = 0,
) -> dict[str, Any]:
    """The output of one run of the process (default: the current one) after `since_seq`;
    with `wait_seconds`, wait that long for something new if there is nothing yet."""
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise InvalidInput(
            "wait_seconds", N_("must be between 0 and %(most)s", most=MAX_WAIT_SECONDS)
        )
    agent = _agent_for(sandbox, N_("read a process"))
    info = _process(sandbox, name, agent)
    run = generation or info["generation"]
    if not 1 <= run <= info["generation"]:
        raise InvalidInput(
            "generation", N_("must be between 1 and %(most)s", most=info["generation"])
        )
    answer = agent.call(
        "output",
        deadline=wait_seconds + 30,
        on_slow=release_connection,
        exec=f"{name}~{run}",
        since_seq=since_seq,
        max_bytes=max_bytes or 0,
        timeout=wait_seconds,
    )
    return {
        "name": name,
        "generation": run,
        "running": not answer.get("finished"),
        "exit_code": answers.optional_int(answer.get("exit_code"))
        if answer.get("finished")
        else None,
        "chunks": answers.chunks(answer.get("chunks")),
    }


def follow_output(
    sandbox: Sandbox, name: str, on_event: Callable[[dict[str, Any]], None]
) -> tuple[int, Callable[[], None]]:
    """Follow the process's current run: its output from the start, then its end, to
    `on_event` as they come (chunks, then one exit or gone; see `SandboxPort.follow`).
    Returns the run's generation and the function that stops following it."""
    agent = _agent_for(sandbox, N_("read a process"))
    info = _process(sandbox, name, agent)
    if info["state"] != "running" or not info["exec"]:
        raise _not_running(name, info)
    return info["generation"], agent.follow(info["exec"], 0, on_event)


def restart_process(
    sandbox: Sandbox,
    name: str,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> dict[str, Any]:
    """Stop the process (TERM, then KILL after 3 s) and start it again at once. A name the
    pipeline does not declare is refused (NotFound) before anything is recorded."""
    declared = _declared_one(sandbox, name)
    with acting_on(sandbox, actor, N_("restart a process"), holder=holder, epoch=epoch) as acting:
        events.record(actor, "process.restarted", sandbox=acting.sandbox, process=name)
    agent = _agent_for(sandbox, N_("restart a process"))
    _process(sandbox, name, agent)
    info = agent.call("process.restart", deadline=60, **_start_payload(declared))
    return _render(info, declared)
