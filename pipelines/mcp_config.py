"""How an MCP client connects to a pipeline: the URL of `/mcp` with the chat's variables as
placeholders, and configurations ready to paste, shown on the pipeline's page.

- `mcp_json`: the `mcpServers` block that Claude Code, Cursor and fastmcp's `MCPConfig` read
  (`"type": "http"` is Streamable HTTP for Claude Code and Cursor; fastmcp ignores `type` and
  takes a URL without `/sse` as Streamable HTTP), with an entry for each managed process's
  gateway;
- `langbot`: an MCP server as LangBot stores it and its web UI saves it (`name`, `mode`,
  `enable`, `extra_args` with `url`, `headers` and `timeout` in seconds). Mode `http` is
  Streamable HTTP; LangBot's newer releases show it as their "Remote" mode and still read it;
- `astrbot`: the configuration AstrBot's dashboard takes for an MCP server (the server's name
  goes in its own field), the shape of an entry under `mcpServers` in `data/mcp_server.json`:
  `transport: streamable_http` (a `type: http` would make AstrBot use SSE), `url`, `headers`,
  and its `timeout`, `sse_read_timeout` and `session_read_timeout` in seconds.

The read timeouts cover the pipeline's longest command. Both bot platforms take one URL per MCP
server, not per chat: the values put in place of the placeholders pick one sandbox for
everything they send through it.
"""

import json
from dataclasses import dataclass
from typing import Any

from pipelines import scope
from pipelines.models import Pipeline

TOKEN_PLACEHOLDER = "<token>"
# Added to the pipeline's exec timeout for a client's read timeout: a command that runs to its
# end must not be cut off by the client first.
READ_MARGIN_SECONDS = 60
# AstrBot's own default for connecting and for its test request.
ASTRBOT_CONNECT_SECONDS = 30


@dataclass(frozen=True)
class McpConnection:
    name: str  # the name a client gives the pipeline's server
    url: str
    variables: list[str]
    servers: dict[str, str]  # a name for the client → the URL
    mcp_json: str
    langbot: str
    astrbot: str


def mcp_connection(pipeline: Pipeline, base_url: str, token: str | None = None) -> McpConnection:
    """The pipeline's MCP URL and configurations; `token` fills them in (else a placeholder)."""
    try:
        variables = scope.variables_in_order(pipeline.scope_template)
    except scope.TemplateError:
        variables = []
    query = "&".join(f"{name}={{{name}}}" for name in variables)
    root = base_url.rstrip("/")

    def url(path: str) -> str:
        return f"{root}{path}" + (f"?{query}" if query else "")

    name = f"boxyard-{pipeline.slug}"
    servers = {name: url("/mcp")}
    for process in pipeline.processes or []:
        servers[f"{name}-{process['name']}"] = url(f"/mcp/servers/{process['name']}")
    headers = {"Authorization": f"Bearer {token or TOKEN_PLACEHOLDER}"}
    read_seconds = pipeline.exec_timeout_seconds + READ_MARGIN_SECONDS
    return McpConnection(
        name=name,
        url=servers[name],
        variables=variables,
        servers=servers,
        mcp_json=_json(
            {
                "mcpServers": {
                    server: {"type": "http", "url": address, "headers": headers}
                    for server, address in servers.items()
                }
            }
        ),
        langbot=_json(
            {
                "name": name,
                "mode": "http",
                "enable": True,
                "extra_args": {"url": servers[name], "headers": headers, "timeout": read_seconds},
            }
        ),
        astrbot=_json(
            {
                "transport": "streamable_http",
                "url": servers[name],
                "headers": headers,
                "timeout": ASTRBOT_CONNECT_SECONDS,
                "sse_read_timeout": read_seconds,
                "session_read_timeout": read_seconds,
            }
        ),
    )


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
