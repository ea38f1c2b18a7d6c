"""The sandbox tools over MCP: listed from the one catalog (`sandboxes.schemas.tools`), and each
one run by the bot API's own route function, so a tool does exactly what its call does.

Arguments are checked against the call's own request shape before anything happens. A tool
without `sandbox_id` acts on the chat's sandbox, found or opened from the connection's
variables. A command in the foreground reports its output as progress while it runs and is
killed, with everything it started, if the client cancels it; waiting for one in the background
reports its output the same way. An error of the API is a tool error with the same status,
code and message.
"""

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from ninja.responses import Status
from pydantic import ValidationError

from boxyard.errors import BoxyardError, InvalidInput, NotFound, problem
from boxyard.later import Awaited, Later
from boxyard.threads import in_pool
from config.api import field_name, require_unicode
from pipelines import scope
from sandboxes import selectors, services
from sandboxes.api import execs, files, links
from sandboxes.api import sandboxes as sandbox_routes
from sandboxes.mcp.connection import Caller, caller_of
from sandboxes.models import Exec
from sandboxes.schemas.execs import ExecIn, WaitIn
from sandboxes.schemas.tools import ToolSpec, tool_specs
from sandboxes.services.shares import long_call

# Each tool's route function of the bot API (the exec is run by `execs.run_command`).
ROUTES: dict[str, Callable[..., Any]] = {
    "sandbox_open": sandbox_routes.open_sandbox,
    "sandbox_exec": execs.exec_command,
    "sandbox_exec_read": execs.exec_output,
    "sandbox_exec_wait": execs.exec_wait,
    "sandbox_exec_kill": execs.exec_kill,
    "sandbox_fs_write": files.write_file,
    "sandbox_fs_read": files.read_file,
    "sandbox_fs_list": files.list_files,
    "sandbox_fs_delete": files.delete_file,
    "sandbox_fs_link": links.create_link,
    "sandbox_close": sandbox_routes.close_sandbox,
    "sandbox_run": sandbox_routes.run,
}
SPECS = {spec.name: spec for spec in tool_specs()}
# Tools that open the chat's sandbox when called without one (the others act on what an
# earlier call made: an exec, or the sandbox itself to close).
OPENS = frozenset(
    {
        "sandbox_exec",
        "sandbox_fs_write",
        "sandbox_fs_read",
        "sandbox_fs_list",
        "sandbox_fs_delete",
        "sandbox_fs_link",
    }
)
# Tools that reach beyond the sandbox when the pipeline gives it the network.
_NETWORKED = frozenset({"sandbox_exec", "sandbox_run"})
# Output queued for progress at most (characters); past it a command's progress stops.
PROGRESS_BACKLOG_CHARS = 1024 * 1024
# The sandbox a session opened, for scopes that give each open a sandbox of its own.
_session_sandboxes: dict[str, str] = {}
_SESSIONS_KEPT = 10_000


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
                    open_world_hint=network and spec.name in _NETWORKED,
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
    spec = SPECS.get(params.name)
    if spec is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    caller = caller_of(ctx.request)
    try:
        arguments = given_arguments(params.arguments)
        require_unicode(arguments)
        if spec.name == "sandbox_exec":
            answer = await _exec(ctx, caller, spec, arguments)
        elif spec.name == "sandbox_exec_wait" and _wants_progress(ctx):
            answer = await _wait(ctx, caller, spec, arguments)
        else:
            answer = await _settled(spec, await in_pool(_run, caller, spec, arguments))
    except BoxyardError as error:
        return error_result(error)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(answer, ensure_ascii=False))],
        structured_content=answer,
    )


def given_arguments(arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The arguments a call gives: a null is an argument left out (clients that send every
    key send null for those they do not set), and so is an empty `sandbox_id`."""
    given = {name: value for name, value in (arguments or {}).items() if value is not None}
    if given.get("sandbox_id") == "":
        del given["sandbox_id"]
    return given


def error_result(error: BoxyardError) -> types.CallToolResult:
    """An error of the bot API as a tool error: the same status, code and message."""
    answer = problem(error)
    return types.CallToolResult(
        content=[types.TextContent(text=f"{answer.status} {error.code}: {error.message}")],
        structured_content={"status": answer.status, **answer.body},
        is_error=True,
    )


async def _settled(spec: ToolSpec, answer: dict[str, Any] | Later) -> dict[str, Any]:
    """A route's answer; a long call's (waiting for an exec) waited for with no thread held."""
    if isinstance(answer, Later):
        return _shown(spec, await answer.awaited.outcome())
    return answer


def _run(caller: Caller, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any] | Later:
    return _call_route(caller, spec, _route_arguments(caller, spec, arguments))


def _call_route(caller: Caller, spec: ToolSpec, kwargs: dict[str, Any]) -> dict[str, Any] | Later:
    answer = ROUTES[spec.name](caller.http_request(), **kwargs)
    if isinstance(answer, Later):
        return answer  # a long call: see `_settled`
    if isinstance(answer, Status):
        answer = answer.value
    if spec.name == "sandbox_open":
        _remember(caller, str(answer["sandbox_id"]))
    return _shown(spec, answer)


def _shown(spec: ToolSpec, answer: dict[str, Any]) -> dict[str, Any]:
    """The answer as the API sends it, through the same response shape."""
    shown: dict[str, Any] = spec.output.model_validate(answer).model_dump(mode="json")
    return shown


def _route_arguments(caller: Caller, spec: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """The route function's arguments: the request shapes checked first, then the ids (the
    chat's sandbox opened only for a call that is otherwise good)."""
    unknown = set(arguments) - set(spec.path_arguments + spec.body_arguments)
    unknown -= set(spec.query_arguments)
    if unknown:
        raise InvalidInput(min(unknown), f"is not an argument of {spec.name}")
    given = {k: v for k, v in arguments.items() if k not in spec.path_arguments}
    if spec.name in ("sandbox_open", "sandbox_run"):
        given["pipeline"] = caller.pipeline.slug
    if spec.name == "sandbox_open":
        given["variables"] = caller.variables
    kwargs: dict[str, Any] = {}
    for kind, shape in (("body", spec.body), ("query", spec.query)):
        if shape is not None:
            try:
                kwargs[kind] = shape.model_validate(given)
            except ValidationError as error:
                first = error.errors()[0]
                field = field_name(("body", *first["loc"]))
                raise InvalidInput(field, first["msg"]) from None
    for name in spec.path_arguments:
        value = arguments.get(name)
        if value is None and name == "sandbox_id":
            if spec.name in OPENS:
                _refuse_bad_input(caller, spec, kwargs)
            value = chat_sandbox(caller, open_it=spec.name in OPENS)
        if not isinstance(value, str) or not value:
            raise InvalidInput(name, "is required, as a string")
        kwargs[name] = value
    return kwargs


def _refuse_bad_input(caller: Caller, spec: ToolSpec, kwargs: dict[str, Any]) -> None:
    """What the tool's service would refuse of its arguments without looking at a sandbox,
    refused before the chat's sandbox is opened for the call: bad input opens nothing."""
    body: Any = kwargs.get("body")  # the shape of the tool's call (ExecIn, WriteIn, LinkIn...)
    query: Any = kwargs.get("query")
    if spec.name == "sandbox_exec":
        execs.clean_exec(caller.pipeline, body)
    elif spec.name == "sandbox_fs_write":
        services.workspace_path(body.path)
        services.decoded_contents(body.contents, body.contents_b64)
        services.clean_mode(body.mode)
    elif spec.name == "sandbox_fs_link":
        services.clean_link(body.path, body.method, body.expires_in_seconds)
    elif query is not None:
        services.workspace_path(query.path)


def chat_sandbox(caller: Caller, *, open_it: bool = True) -> str:
    """The sandbox of the connection's chat: its scope key's running sandbox, or (`open_it`)
    opened now."""
    pipeline = caller.pipeline
    if scope.generates(pipeline.scope_template, caller.variables):
        remembered = _session_sandboxes.get(caller.session_id or "")
        if remembered is not None:
            return remembered
        if caller.session_id is None:
            raise InvalidInput(
                "sandbox_id",
                "this pipeline's sandbox scope gives every open a sandbox of its own: call "
                "sandbox_open and pass the sandbox_id it returns",
            )
    else:
        key = scope.resolve(pipeline.scope_template, caller.variables)
        running = selectors.running_sandbox_id(caller.principal, key)
        if running is not None:
            return str(running)
    if not open_it:
        raise NotFound("this chat has no open sandbox: run a command or call sandbox_open first")
    opened = services.open_sandbox(pipeline, caller.variables, caller.principal.actor)
    _remember(caller, str(opened.sandbox.pk))
    return str(opened.sandbox.pk)


def forget_session(session_id: str) -> None:
    """A session ended: the sandbox it opened is no longer its own."""
    _session_sandboxes.pop(session_id, None)


def _remember(caller: Caller, sandbox_id: str) -> None:
    if caller.session_id is not None:
        if len(_session_sandboxes) >= _SESSIONS_KEPT:
            _session_sandboxes.clear()
        _session_sandboxes[caller.session_id] = sandbox_id


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


async def _exec(
    ctx: ServerRequestContext[Any, Any], caller: Caller, spec: ToolSpec, arguments: dict[str, Any]
) -> dict[str, Any]:
    follower = _Follower(asyncio.get_running_loop())
    running = asyncio.ensure_future(_command(caller, spec, arguments, follower))
    running.add_done_callback(lambda _: follower.end())
    pump = asyncio.ensure_future(_report(ctx, follower))
    try:
        answer = await asyncio.shield(running)
        with anyio.move_on_after(5):
            await asyncio.shield(pump)  # what came before the end, reported before the result
        return _shown(spec, answer)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _kill(caller, follower, running)
        raise
    finally:
        pump.cancel()


async def _command(
    caller: Caller, spec: ToolSpec, arguments: dict[str, Any], follower: _Follower
) -> dict[str, Any]:
    """The command started in a thread, its end waited for with none."""
    started = await in_pool(_run_command, caller, spec, arguments, follower)
    return await started.outcome()


def _run_command(
    caller: Caller, spec: ToolSpec, arguments: dict[str, Any], follower: _Follower
) -> Awaited[dict[str, Any]]:
    kwargs = _route_arguments(caller, spec, arguments)
    body: ExecIn = kwargs["body"]
    return execs.run_command(caller.principal, kwargs["sandbox_id"], body, follower)


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
    ctx: ServerRequestContext[Any, Any], caller: Caller, spec: ToolSpec, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Wait for a command, its output reported as progress as it comes."""
    kwargs = await in_pool(_route_arguments, caller, spec, arguments)
    body: WaitIn = kwargs["body"]
    sandbox = await in_pool(selectors.sandbox_for, caller.principal, kwargs["sandbox_id"])
    record = await in_pool(selectors.exec_for, caller.principal, sandbox, kwargs["exec_id"])
    events = services.exec_events(record, 0)
    reported = 0
    with long_call(sandbox.pipeline_id):
        with anyio.move_on_after(body.timeout_seconds):
            async for event in events:
                if event["event"] == "chunk":
                    reported += 1
                    await ctx.session.report_progress(reported, None, event["text"])
                elif event["event"] != "keepalive":
                    break
        await events.aclose()
    final = await in_pool(_call_route, caller, spec, {**kwargs, "body": WaitIn(timeout_seconds=0)})
    return await _settled(spec, final)
