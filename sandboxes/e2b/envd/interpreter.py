"""The code interpreter of an E2B sandbox (port 49999, `E2b-Sandbox-Port: 49999`), as
`e2b-code-interpreter` speaks to it: `POST /execute` (the run's results as JSON lines) and
the code contexts (`GET`/`POST /contexts`, `POST /contexts/{id}/restart`,
`DELETE /contexts/{id}`), each the sandbox's code service.

The lines are E2B's: the results as Boxyard shapes them (the same names), `stdout` and
`stderr` with a timestamp, a `result` always with its `extra` (a string's text without its
quotes), `keepalive` in silence, then
`number_of_executions` and `end_of_execution`; never a blank line. A refusal is its status
with the message as plain text, which the SDK raises as its own (404: `NotFoundException`).
A client that leaves before the end (the SDK's `timeout`) has the run interrupted, its
context's state kept, as E2B's kernels are.
"""

import json
import re
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any

from boxyard.errors import BoxyardError
from boxyard.threads import in_pool
from sandboxes import services
from sandboxes.e2b.envd.calls import Call, until_gone
from sandboxes.e2b.envd.connect import STATUSES, ConnectError, Message, Send, invalid, read_request
from sandboxes.models import Exec
from sandboxes.services.code.results import Result

PORT = "49999"
_CONTEXT = re.compile(r"/contexts/(?P<id>[^/]+)(?P<restart>/restart)?")


async def serve(call: Call, path: str) -> None:
    """The route `path` names, its refusals in the SDK's shape."""
    method = call.scope.get("method", "")
    try:
        if (method, path) == ("POST", "/execute"):
            await _execute(call)
        elif (method, path) == ("GET", "/contexts"):
            listed = await in_pool(services.list_contexts, call.sandbox)
            await send_json(call.send, [_context(context) for context in listed])
        elif (method, path) == ("POST", "/contexts"):
            await _create(call)
        elif (method, path) == ("GET", "/health"):
            await send_json(call.send, "OK")
        elif (named := _CONTEXT.fullmatch(path)) and method == (
            "POST" if named["restart"] else "DELETE"
        ):
            act = services.restart_context if named["restart"] else services.delete_context
            await in_pool(act, call.sandbox, named["id"], call.actor)
            await send_json(call.send, None)
        else:
            await send_text(call.send, 404, f"no route {method} {path}")
    except BoxyardError as error:
        await send_text(call.send, error.status, error.message)
    except ConnectError as error:
        await send_text(call.send, STATUSES.get(error.code, 400), error.message)


async def _create(call: Call) -> None:
    body = await read_request(call.scope, call.receive)
    language, cwd = _string(body, "language"), _string(body, "cwd")
    made = await in_pool(
        lambda: services.create_context(call.sandbox, call.actor, language=language, cwd=cwd)
    )
    await send_json(call.send, _context(made))


async def _execute(call: Call) -> None:
    body = await read_request(call.scope, call.receive)
    code, context, language = (
        body.get("code"),
        _string(body, "context_id"),
        _string(body, "language"),
    )
    if not isinstance(code, str):
        raise invalid("code", "must be a string")
    if context and language:
        raise invalid("context_id", "only one of context_id or language can be provided")
    env = body.get("env_vars") or None
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(value, str) for value in env.values())
    ):
        raise invalid("env_vars", "must map names to strings")
    request = await in_pool(
        lambda: services.clean_code_request(
            call.sandbox, code=code, context=context, language=language, env=env
        )
    )
    runs: list[Exec] = []
    results = await in_pool(
        lambda: services.start_code_stream(call.sandbox, request, call.actor, started=runs.append)
    )
    await call.send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-cache")],
        }
    )
    relayed: list[bool] = []
    try:
        await until_gone(call, _relay(call.send, results, relayed))
    finally:
        await results.aclose()
        if not relayed and runs:
            # The client left (its own timeout, as the SDK's is): the kernel is interrupted,
            # as E2B's is, so that the context's next run need not wait; its state stays.
            await in_pool(_interrupt, runs[0], call)
    await call.send({"type": "http.response.body", "body": b""})


async def _relay(send: Send, results: AsyncGenerator[Result, None], relayed: list[bool]) -> None:
    async for result in results:
        for line in lines_of(result):
            data = json.dumps(line, separators=(",", ":")).encode() + b"\n"
            await send({"type": "http.response.body", "body": data, "more_body": True})
    relayed.append(True)


def _interrupt(record: Exec, call: Call) -> None:
    try:
        services.kill_exec(record, call.actor, signal="INT")
    except BoxyardError:
        pass  # it ended, or its sandbox did


def lines_of(result: Result) -> list[Message]:
    """A Boxyard result as E2B's lines (none for what the SDK has no word for)."""
    kind = result["type"]
    if kind in ("stdout", "stderr"):
        return [{**result, "timestamp": _now()}]
    if kind == "result":
        line = {"extra": {}, **{k: v for k, v in result.items() if v is not None}}
        text = line.get("text")
        if isinstance(text, str) and len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
            line["text"] = text[1:-1]  # a string's repr, as E2B gives it: its value
        return [line]
    if kind in ("error", "keepalive"):
        return [result]
    if kind == "end":
        count = result.get("execution_count")
        told: list[Message] = [{"type": "end_of_execution"}]
        if isinstance(count, int):
            told.insert(0, {"type": "number_of_executions", "execution_count": count})
        return told
    return []  # `restarted`: the SDK's results have no place for it


def _context(context: dict[str, Any]) -> Message:
    return {"id": context["id"], "language": context["language"], "cwd": context["cwd"]}


def _string(body: Message, field: str) -> str | None:
    value = body.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise invalid(field, "must be a string")
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def send_json(send: Send, value: Any, status: int = 200) -> None:
    data = json.dumps(value, separators=(",", ":")).encode()
    await _send(send, status, b"application/json", data)


async def send_text(send: Send, status: int, message: str) -> None:
    """A refusal as the SDK reads it: the status, and the message as the body's text."""
    await _send(send, status, b"text/plain; charset=utf-8", message.encode())


async def _send(send: Send, status: int, kind: bytes, data: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", kind), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})
