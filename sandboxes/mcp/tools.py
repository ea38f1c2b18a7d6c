"""The sandbox tools over MCP: one tool per operation record offered as a tool
(`sandboxes.operations.TOOLS`), listed with its definition (`sandboxes.schemas.tools`) and run
by its record, as the bot API runs the same record.

Arguments are checked against the record's input shape before anything happens. A tool
without `sandbox_id` acts on the chat's sandbox, found or opened (`services.chat_sandbox`)
from the connection's variables and session. A command in the foreground reports its output
as progress while it runs and is killed, with everything it started, if the client cancels
it; waiting for one in the background reports its output the same way. The answer is the
result's JSON text and structured content, followed by its media as MCP images (a chart the
code interpreter drew, for a model to see). An error is a tool error with the status, code and
message the bot API would answer.
"""

import asyncio
import contextlib
import json
import threading
from functools import cache
from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from boxyard.errors import BoxyardError, InvalidInput, problem
from boxyard.later import Awaited
from boxyard.threads import in_pool
from sandboxes import selectors, services
from sandboxes.mcp.connection import Caller, caller_of
from sandboxes.models import Exec
from sandboxes.operations import TOOLS, Answer, Call, Context, Operation, Streams, require_unicode
from sandboxes.schemas.execs import WaitIn
from sandboxes.schemas.tools import tool_specs
from sandboxes.services.shares import long_call

OPERATIONS: dict[str, Operation[Any, Any]] = {operation.name: operation for operation in TOOLS}
# Output queued for progress at most (characters); past it a command's progress stops.
PROGRESS_BACKLOG_CHARS = 1024 * 1024


@cache
def listed_tools(network: bool) -> tuple[types.Tool, ...]:
    """The tools as MCP lists them, for a pipeline with or without the network."""
    listed = []
    for spec in tool_specs():
        schema = spec.parameters
        sandbox_id = schema["properties"].get("sandbox_id")
        if sandbox_id is not None:
            sandbox_id["description"] = (
                "The sandbox_id returned by sandbox_open; leave it out (or send null or an empty "
                "string) for this chat's sandbox (opened when first needed)."
            )
            schema["required"].remove("sandbox_id")
            if not schema["required"]:
                del schema["required"]
        for name, argument in schema["properties"].items():
            if name not in schema.get("required", ()):
                schema["properties"][name] = _or_null(argument)
        listed.append(
            types.Tool(
                name=spec.name,
                title=spec.title,
                description=spec.description,
                input_schema=schema,
                output_schema=spec.output_schema,
                annotations=types.ToolAnnotations(
                    title=spec.title,
                    read_only_hint=spec.hints.read_only,
                    destructive_hint=spec.hints.destructive,
                    idempotent_hint=spec.hints.idempotent,
                    open_world_hint=network and spec.hints.networked,
                ),
            )
        )
    return tuple(listed)


def _or_null(argument: dict[str, Any]) -> dict[str, Any]:
    """An optional argument that may also be null (taken as left out)."""
    notes = {k: v for k, v in argument.items() if k in ("description", "default", "examples")}
    kind = {k: v for k, v in argument.items() if k not in notes}
    options = kind["anyOf"] if list(kind) == ["anyOf"] else [kind]
    return {"anyOf": [*options, {"type": "null"}], **notes}


def input_schema(name: str) -> dict[str, Any] | None:
    """A tool's input schema by name (the SDK checks `Mcp-Param-*` headers against it)."""
    for tool in listed_tools(False):
        if tool.name == name:
            return tool.input_schema
    return None


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    caller = caller_of(ctx.request)
    return types.ListToolsResult(tools=list(listed_tools(caller.pipeline.network_enabled)))


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    operation = OPERATIONS.get(params.name)
    if operation is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    caller = caller_of(ctx.request)
    try:
        arguments = given_arguments(params.arguments)
        require_unicode(arguments)
        streams = operation.hints.streams
        if streams is Streams.ITS_COMMAND:
            answer = await _followed(ctx, caller, operation, arguments)
        elif streams is Streams.NAMED_COMMAND and _wants_progress(ctx):
            answer = await _wait(ctx, caller, operation, arguments)
        else:
            answer = await _settled(operation, await in_pool(_run, caller, operation, arguments))
    except BoxyardError as error:
        return error_result(error)
    content: list[types.ContentBlock] = [
        types.TextContent(text=json.dumps(answer, ensure_ascii=False))
    ]
    content += [
        types.ImageContent(data=data, mime_type=mime) for mime, data in operation.media_of(answer)
    ]
    return types.CallToolResult(content=content, structured_content=answer)


def given_arguments(arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The arguments a call gives: a null is an argument left out (clients that send every
    key send null for those they do not set), and so is an empty `sandbox_id`."""
    given = {name: value for name, value in (arguments or {}).items() if value is not None}
    if given.get("sandbox_id") == "":
        del given["sandbox_id"]
    return given


def error_result(error: BoxyardError) -> types.CallToolResult:
    """An error as a tool error: the status, code and message the bot API would answer."""
    answer = problem(error)
    return types.CallToolResult(
        content=[types.TextContent(text=f"{answer.status} {error.code}: {error.message}")],
        structured_content={"status": answer.status, **answer.body},
        is_error=True,
    )


async def _settled(operation: Operation[Any, Any], answer: Answer | Awaited[Answer]) -> Answer:
    """A record's answer as it is sent; a long call's (waiting for an exec) waited for with no
    thread held."""
    if isinstance(answer, Awaited):
        answer = await answer.outcome()
    return operation.shown(answer)


def _run(
    caller: Caller, operation: Operation[Any, Any], arguments: dict[str, Any]
) -> Answer | Awaited[Answer]:
    answer = operation.run(_context(caller), _call(caller, operation, arguments))
    if operation.hints.names_chat_sandbox and caller.session is not None:
        assert not isinstance(answer, Awaited)  # an open answers at once
        services.remember_session_sandbox(
            caller.session, caller.pipeline, str(answer["sandbox_id"])
        )
    return answer


def _context(caller: Caller, watch: services.ExecWatch | None = None) -> Context:
    return Context(caller.principal, caller.origin, watch)


def _call(caller: Caller, operation: Operation[Any, Any], arguments: dict[str, Any]) -> Call[Any]:
    """The record's call: the input shape checked first, then the ids (the chat's sandbox
    opened only for a call that is otherwise good)."""
    unknown = set(arguments) - set(operation.ids + operation.fields)
    if unknown:
        raise InvalidInput(min(unknown), f"is not an argument of {operation.name}")
    given = {k: v for k, v in arguments.items() if k not in operation.ids}
    given.update(_from_connection(caller, operation))
    parsed = operation.parse(given)
    ids: dict[str, str] = {}
    for name in operation.ids:
        value = arguments.get(name)
        if value is None and name == "sandbox_id":
            opens = operation.hints.opens_chat_sandbox
            if opens and operation.check is not None:
                operation.check(caller.pipeline, parsed)  # bad input opens nothing
            value = services.chat_sandbox(
                caller.pipeline,
                caller.variables,
                caller.principal.actor,
                session=caller.session,
                open_it=opens,
            )
        if not isinstance(value, str) or not value:
            raise InvalidInput(name, "is required, as a string")
        ids[name] = value
    return Call(parsed, **ids)


def _from_connection(caller: Caller, operation: Operation[Any, Any]) -> dict[str, Any]:
    """What the connection says of an input that takes it: the pipeline and the chat's
    variables."""
    if operation.input is None:
        return {}
    known = operation.input.model_fields
    filled: dict[str, Any] = {}
    if "pipeline" in known:
        filled["pipeline"] = caller.pipeline.slug
    if "variables" in known:
        filled["variables"] = caller.variables
    return filled


def _wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    meta: dict[str, Any] = dict(ctx.meta or {})
    return meta.get("progress_token", meta.get("progressToken")) is not None


class _Follower:
    """A foreground command followed from the agent's reader thread into the event loop: its
    record (to kill it) and its output (as progress), with a bounded backlog."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.record: Exec | None = None
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._queued = 0
        self._lock = threading.Lock()

    def started(self, record: Exec) -> None:
        self.record = record

    def chunk(self, chunk: dict[str, Any]) -> None:
        with self._lock:
            self._queued += len(chunk["text"])
            if self._queued > PROGRESS_BACKLOG_CHARS:
                return  # the client reads slower than the command writes: the result has it
        self.loop.call_soon_threadsafe(self.queue.put_nowait, chunk)

    def taken(self, chunk: dict[str, Any]) -> None:
        with self._lock:
            self._queued -= len(chunk["text"])

    def end(self) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)


async def _followed(
    ctx: ServerRequestContext[Any, Any],
    caller: Caller,
    operation: Operation[Any, Any],
    arguments: dict[str, Any],
) -> Answer:
    """A command run with its output reported as progress as it comes."""
    follower = _Follower(asyncio.get_running_loop())
    running = asyncio.ensure_future(_command(caller, operation, arguments, follower))
    running.add_done_callback(lambda _: follower.end())
    pump = asyncio.ensure_future(_report(ctx, follower))
    try:
        answer = await asyncio.shield(running)
        with anyio.move_on_after(5):
            await asyncio.shield(pump)  # what came before the end, reported before the result
        return operation.shown(answer)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _kill(caller, follower, running)
        raise
    finally:
        pump.cancel()


async def _command(
    caller: Caller, operation: Operation[Any, Any], arguments: dict[str, Any], follower: _Follower
) -> Answer:
    """The command started in a thread, its end waited for with none."""
    started = await in_pool(_start_command, caller, operation, arguments, follower)
    return await started.outcome() if isinstance(started, Awaited) else started


def _start_command(
    caller: Caller, operation: Operation[Any, Any], arguments: dict[str, Any], follower: _Follower
) -> Answer | Awaited[Answer]:
    call = _call(caller, operation, arguments)
    return operation.run(_context(caller, follower), call)


async def _report(ctx: ServerRequestContext[Any, Any], follower: _Follower) -> None:
    reported = 0
    while (chunk := await follower.queue.get()) is not None:
        follower.taken(chunk)
        reported += 1
        await ctx.session.report_progress(reported, None, chunk["text"])


async def _kill(caller: Caller, follower: _Follower, running: "asyncio.Future[Any]") -> None:
    """Kill a command whose client cancelled it, once its record exists (it may not, yet)."""
    for _ in range(600):
        if follower.record is not None or running.done():
            break
        await asyncio.sleep(0.05)
    if follower.record is not None and not running.done():
        with contextlib.suppress(BoxyardError):
            await in_pool(services.kill_exec, follower.record, caller.principal.actor)


async def _wait(
    ctx: ServerRequestContext[Any, Any],
    caller: Caller,
    operation: Operation[Any, Any],
    arguments: dict[str, Any],
) -> Answer:
    """Wait for a command, its output reported as progress as it comes; then the record's
    answer, at once."""
    call = await in_pool(_call, caller, operation, arguments)
    timeout: float = call.given.timeout_seconds
    sandbox = await in_pool(selectors.sandbox_for, caller.principal, call.sandbox_id)
    record = await in_pool(selectors.exec_for, caller.principal, sandbox, call.exec_id)
    events = services.exec_events(record, 0)
    reported = 0
    with long_call(sandbox.pipeline_id):
        with anyio.move_on_after(timeout):
            async for event in events:
                if event["event"] == "chunk":
                    reported += 1
                    await ctx.session.report_progress(reported, None, event["text"])
                elif event["event"] != "keepalive":
                    break
        await events.aclose()
    now = Call(WaitIn(timeout_seconds=0), call.sandbox_id, call.exec_id)
    return await _settled(operation, await in_pool(operation.run, _context(caller), now))
