"""The gateway (`/mcp/servers/{name}`): a pipeline's managed process that speaks MCP over stdio,
served as a Streamable HTTP MCP server.

Each request of the client (tools, prompts, resources) is passed to the process of the chat's
sandbox (found or opened as the sandbox tools do, or named by `?sandbox_id=`) and its answer
passed back as it is, the process's progress reports too. The process's own errors reach the
client as they are; Boxyard's (the lease taken over, the sandbox closed, the process exited
before it answered) as tool errors of a call, or as JSON-RPC errors of the other methods.
"""

import re
from typing import Any
from urllib.parse import parse_qsl

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from boxyard.errors import BoxyardError
from boxyard.threads import in_pool
from sandboxes import selectors, services
from sandboxes.mcp.connection import Caller, caller_of
from sandboxes.mcp.stdio import PeerError, peer
from sandboxes.mcp.tools import error_result
from sandboxes.models import Sandbox

SERVED = re.compile(r"/mcp/servers/(?P<name>[^/]+)/?")
# What each method answers: the process's answer is read as that (absent fields defaulted for
# the client's revision, a malformed answer refused).
RESULTS: dict[str, type[BaseModel]] = {
    "tools/list": types.ListToolsResult,
    "tools/call": types.CallToolResult,
    "prompts/list": types.ListPromptsResult,
    "prompts/get": types.GetPromptResult,
    "resources/list": types.ListResourcesResult,
    "resources/templates/list": types.ListResourceTemplatesResult,
    "resources/read": types.ReadResourceResult,
    "completion/complete": types.CompleteResult,
}


def served_name(path: str) -> str | None:
    match = SERVED.fullmatch(path)
    return match["name"] if match else None


def _sandbox(caller: Caller) -> Sandbox:
    query = dict(parse_qsl(caller.asgi.get("query_string", b"").decode("utf-8", "replace")))
    sandbox_id = query.get("sandbox_id") or services.chat_sandbox(
        caller.pipeline, caller.variables, caller.principal.actor, session=caller.session
    )
    return selectors.sandbox_for(caller.principal, sandbox_id)


async def _forward(
    ctx: ServerRequestContext[Any, Any], method: str, params: BaseModel | None
) -> Any:
    caller = caller_of(ctx.request)
    name = served_name(caller.asgi["path"])
    assert name is not None  # the application routes nothing else here
    sent = params.model_dump(by_alias=True, exclude_none=True, mode="json") if params else {}
    meta = sent.pop("_meta", None) or {}
    wants_progress = meta.get("progressToken") is not None
    sandbox = await in_pool(_sandbox, caller)
    process = await peer(sandbox, name, caller.principal.actor)
    try:
        answer = await process.request(
            method,
            sent,
            on_progress=ctx.session.report_progress if wants_progress else None,
            actor=caller.principal.actor,
        )
    except PeerError as error:
        raise MCPError(error.code, error.message, error.data) from None
    try:
        return RESULTS[method].model_validate(answer)
    except ValidationError as error:
        raise MCPError(
            types.INTERNAL_ERROR,
            f"the MCP server {name} answered {method} with what is not a result of it: "
            f"{error.errors()[0]['msg']}",
        ) from None


def _method(method: str) -> Any:
    async def forward(ctx: ServerRequestContext[Any, Any], params: BaseModel | None) -> Any:
        try:
            return await _forward(ctx, method, params)
        except BoxyardError as error:
            raise MCPError(
                types.INTERNAL_ERROR if error.status >= 500 else types.INVALID_REQUEST,
                f"{error.status} {error.code}: {error.message}",
                {"status": error.status, "error": error.as_dict()},
            ) from None

    return forward


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> Any:
    try:
        return await _forward(ctx, "tools/call", params)
    except BoxyardError as error:
        return error_result(error)


def gateway_server() -> Server[Any]:
    server: Server[Any] = Server(
        "boxyard-gateway",
        version="1",
        title="Boxyard gateway to a pipeline's MCP server",
        get_tool_input_schema=lambda name: None,  # the process checks its own arguments
        on_list_tools=_method("tools/list"),
        on_call_tool=_call_tool,
        on_list_prompts=_method("prompts/list"),
        on_get_prompt=_method("prompts/get"),
        on_list_resources=_method("resources/list"),
        on_list_resource_templates=_method("resources/templates/list"),
        on_read_resource=_method("resources/read"),
        on_completion=_method("completion/complete"),
    )
    server.middleware = []  # no tracing span per message: Boxyard exports no traces
    return server
