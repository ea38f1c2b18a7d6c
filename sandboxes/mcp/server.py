"""The MCP server of the sandbox tools (`/mcp`): the tools, and the pipeline's system prompt
offered as a prompt."""

from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from boxyard.threads import in_pool
from pipelines.tools import system_prompt
from sandboxes.mcp import tools
from sandboxes.mcp.connection import caller_of

PROMPT = "sandbox_system_prompt"
INSTRUCTIONS = (
    "Sandbox tools of a Boxyard pipeline: a persistent Linux container per chat, with its files "
    "under /workspace. The tools act on this chat's sandbox unless given a sandbox_id; get the "
    f"prompt {PROMPT} for what this bot's sandbox allows."
)


async def list_prompts(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(
        prompts=[
            types.Prompt(
                name=PROMPT,
                title="How to use this bot's sandbox",
                description="The pipeline's system prompt, with the facts of its sandbox "
                "(network, timeouts, output limits, retention, skills).",
            )
        ]
    )


async def get_prompt(
    ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
) -> types.GetPromptResult:
    if params.name != PROMPT:
        raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
    pipeline = caller_of(ctx.request).pipeline
    text = await in_pool(system_prompt, pipeline)
    return types.GetPromptResult(
        description=f"The system prompt of pipeline {pipeline.slug}",
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))],
    )


def sandbox_server() -> Server[Any]:
    server: Server[Any] = Server(
        "boxyard",
        version="1",
        title="Boxyard sandboxes",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=tools.input_schema,
        on_list_tools=tools.list_tools,
        on_call_tool=tools.call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    server.middleware = []  # no tracing span per message: Boxyard exports no traces
    return server
