"""`process.Process`: commands started, followed, listed, written to and signalled, each the
matching exec service (`services.start_exec`, `exec_events`, `write_exec_stdin`, `kill_exec`)
under the sandbox's pipeline; a command started with a pty is a terminal (`pty.py`).

A process is an exec of the sandbox: its E2B pid is a number derived from the exec's id (the
same in every web process, and after a restart), and its tag is kept in the exec's own
environment (`E2B_PROCESS_TAG`), so no row of this door's own is needed. A command runs in the
background for Boxyard, whether the SDK waits for it or not, and the stream follows it to its
end: leaving the stream leaves it running, as E2B's does.
"""

import base64
from collections.abc import AsyncIterator
from typing import Any

from boxyard.threads import in_pool
from sandboxes import services
from sandboxes.e2b.envd import paths, pty
from sandboxes.e2b.envd.calls import Call, until_gone
from sandboxes.e2b.envd.connect import (
    Body,
    ConnectError,
    Message,
    Stream,
    invalid,
    read_request,
    send_unary,
)
from sandboxes.e2b.envd.outputs import ended, event, pid_of
from sandboxes.models import Exec, ExecState
from sandboxes.services.shares import long_call

TAG_VARIABLE = "E2B_PROCESS_TAG"
_SIGNALS = {"SIGNAL_SIGKILL": "KILL", "SIGNAL_SIGTERM": "TERM", 9: "KILL", 15: "TERM"}
_LOGIN_SHELLS = ("/bin/bash", "bash", "/bin/sh", "sh")


def _running(call: Call) -> list[Exec]:
    return list(
        Exec.objects.select_related("sandbox__pipeline").filter(
            sandbox=call.sandbox, state=ExecState.RUNNING
        )
    )


def _selected(call: Call, selector: object) -> Exec:
    """The running exec a ProcessSelector names, by pid or by tag (NOT_FOUND: none)."""
    if not isinstance(selector, dict) or not ("pid" in selector or "tag" in selector):
        raise invalid("process", "name the process by pid or tag")
    for record in _running(call):
        if "pid" in selector and selector["pid"] == pid_of(record.pk):
            return record
        if "tag" in selector and selector["tag"] == (record.env or {}).get(TAG_VARIABLE):
            return record
    named = selector.get("pid", selector.get("tag"))
    raise ConnectError("not_found", f"process {named} not found")


def _bytes(value: object, field: str) -> bytes:
    if not isinstance(value, str):
        raise invalid(field, "must be base64 bytes")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise invalid(field, "is not valid base64") from None


def _command(config: Message) -> tuple[list[str] | str, dict[str, str], str]:
    """(argv or a shell string, environment, cwd) of a ProcessConfig. The SDK's own way of
    running a command (`/bin/bash -l -c <cmd>`) becomes a shell string, so the sandbox's shell
    runs it (bash where the image has it, else sh)."""
    cmd, args = config.get("cmd"), config.get("args") or []
    if not isinstance(cmd, str) or not cmd:
        raise invalid("process.cmd", "must name the program to run")
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise invalid("process.args", "must be a list of strings")
    envs = config.get("envs") or {}
    if not isinstance(envs, dict):
        raise invalid("process.envs", "must be an object of strings")
    cwd = config.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise invalid("process.cwd", "must be a path")
    command: list[str] | str = [cmd, *args]
    if cmd in _LOGIN_SHELLS and args[-2:-1] == ["-c"] and set(args[:-2]) <= {"-l", "--login"}:
        command = args[-1]
    return command, dict(envs), paths.cwd_of(cwd)


def _exec_request(call: Call, request: Message) -> services.ExecRequest:
    command, envs, cwd = _command(request.get("process") or {})
    env = {"HOME": paths.HOME, "USER": paths.USER, "PWD": cwd, **envs}
    tag = request.get("tag")
    if isinstance(tag, str) and tag:
        env[TAG_VARIABLE] = tag
    return services.clean_request(
        call.sandbox,
        cmd=command,
        cwd=paths.to_workspace(cwd),
        env=env,
        background=True,
        stdin=bool(request.get("stdin", False)),
    )


async def start(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    if request.get("pty"):
        await pty.start(call, request)
        return
    with long_call(call.sandbox.pipeline_id):  # taken before anything starts
        exec_request = _exec_request(call, request)
        record, events = await services.start_exec_events(
            call.sandbox, exec_request, call.actor, raw=True
        )
        await _follow(call, record, events)


async def connect(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    record = await in_pool(_selected, call, request.get("process"))
    if pty.is_pty(record):
        await pty.connect(call, record)
        return
    with long_call(call.sandbox.pipeline_id):
        await _follow(call, record, services.exec_events(record, 0, raw=True))


async def _follow(call: Call, record: Exec, events: AsyncIterator[dict[str, Any]]) -> None:
    """The exec's events as Connect messages until its end, the client's leaving, or the
    call's deadline (`Connect-Timeout-Ms`). The caller holds one of the pipeline's long
    calls meanwhile, as the bot API's stream of an exec does."""
    stream = Stream(call.send)
    await stream.message(event("start", {"pid": pid_of(record.pk)}))
    work = until_gone(call, _relay(stream, events))
    await stream.run(work, call.deadline())


async def _relay(stream: Stream, events: AsyncIterator[dict[str, Any]]) -> None:
    """Output as data events; the end once the events are over, so that the exec's end is
    recorded (and the process gone from `List`) when the client hears of it."""
    end: Message | None = None
    async for said in events:
        kind = said["event"]
        if kind == "chunk":  # bytes fields are base64 in protobuf's JSON
            data = base64.b64encode(said["data"]).decode()
            await stream.message(event("data", {said["stream"]: data}))
        elif kind == "keepalive":
            await stream.message(event("keepalive", {}))
        elif kind == "exit":
            end = ended(said.get("exit_code"), said)
        elif kind == "gone":
            end = ended(None, said)
    if end is not None:
        await stream.message(event("end", end))


def _list(call: Call) -> Message:
    processes = []
    for record in _running(call):
        env = dict(record.env or {})
        tag = env.pop(TAG_VARIABLE, None)
        command = record.command
        cmd, args = (
            ("/bin/bash", ["-l", "-c", command])
            if isinstance(command, str)
            else (command[0], command[1:])
        )
        config = {"cmd": cmd, "args": args, "envs": env, "cwd": paths.to_home(record.cwd)}
        info: Message = {"config": config, "pid": pid_of(record.pk)}
        if tag:
            info["tag"] = tag
        processes.append(info)
    return {"processes": processes}


async def list_processes(call: Call) -> None:
    await read_request(call.scope, call.receive)
    await send_unary(call.send, await in_pool(_list, call))


def _write(call: Call, selector: object, given: object, *, eof: bool = False) -> None:
    record = _selected(call, selector)
    if isinstance(given, dict) and "pty" in given:
        pty.write(call, record, _bytes(given["pty"], "input.pty"))
        return
    data = _bytes(given.get("stdin", ""), "input.stdin") if isinstance(given, dict) else b""
    services.write_exec_stdin(record, data, call.actor, eof=eof)


async def send_input(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    await in_pool(_write, call, request.get("process"), request.get("input"))
    await send_unary(call.send, {})


async def close_stdin(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    await in_pool(_write, call, request.get("process"), None, eof=True)
    await send_unary(call.send, {})


async def stream_input(call: Call) -> None:
    """A client stream: a start naming the process, then its input, in order."""
    stream = Stream(call.send)

    async def take() -> None:
        selector: object = None
        async for message in Body(call.receive).messages():
            said = message.get("event", message)
            if "start" in said:
                selector = (said["start"] or {}).get("process")
            elif "data" in said:
                if selector is None:
                    raise invalid("event", "start the stream by naming the process")
                await in_pool(_write, call, selector, (said["data"] or {}).get("input"))
        await stream.message({})

    await stream.run(take())


def _signal(call: Call, request: Message) -> None:
    record = _selected(call, request.get("process"))
    signal = _SIGNALS.get(request.get("signal"))
    if signal is None:
        raise invalid("signal", "must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
    if pty.is_pty(record) and signal == "KILL":
        pty.kill(call, record)
        return
    services.kill_exec(record, call.actor, signal=signal)


async def send_signal(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    await in_pool(_signal, call, request)
    await send_unary(call.send, {})


async def update(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    record = await in_pool(_selected, call, request.get("process"))
    size = ((request.get("pty") or {}).get("size")) or {}
    await in_pool(pty.resize, call, record, size.get("cols"), size.get("rows"))
    await send_unary(call.send, {})


METHODS = {
    "Start": start,
    "Connect": connect,
    "List": list_processes,
    "SendInput": send_input,
    "StreamInput": stream_input,
    "CloseStdin": close_stdin,
    "SendSignal": send_signal,
    "Update": update,
}
