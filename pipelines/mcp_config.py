"""How an MCP client connects to a pipeline: the URL of `/mcp` with the chat's variables as
placeholders, and configurations ready to paste, shown on the pipeline's page.

- `mcp_json`: the `mcpServers` block that Claude Desktop and Claude Code, Cursor and fastmcp's
  `MCPConfig` read (`"type": "http"` is Streamable HTTP for all of them), with an entry for each
  managed process's gateway;
- `langbot`: the fields of LangBot's MCP server form (mode `http`, its `url`, `headers`, and a
  `timeout` in seconds that covers the pipeline's longest command);
- `astrbot`: AstrBot's MCP server configuration (`transport: streamable_http`, `url`,
  `headers`, and its `timeout`, `sse_read_timeout` and `session_read_timeout`, likewise).

Both bot platforms take one URL per MCP server, not per chat: the values put in place of the
placeholders pick one sandbox for everything they send through it.
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


@dataclass(frozen=True)
class McpConnection:
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
                "url": servers[name],
                "headers": headers,
                "timeout": read_seconds,
            }
        ),
        astrbot=_json(
            {
                name: {
                    "transport": "streamable_http",
                    "url": servers[name],
                    "headers": headers,
                    "timeout": 30,
                    "sse_read_timeout": read_seconds,
                    "session_read_timeout": read_seconds,
                }
            }
        ),
    )


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
