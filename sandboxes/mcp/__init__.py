"""Boxyard over the Model Context Protocol (Streamable HTTP), beside the bot API.

`/mcp` is an MCP server of the sandbox tools, each one an operation record
(`sandboxes.operations`) run as the bot API runs it, with no part of the API in between;
`/mcp/servers/{name}` is a gateway to a pipeline's managed process that speaks MCP over stdio. Both take the pipeline's token as a bearer token and the
chat's scope variables from the URL's query or from `Boxyard-Var-*` headers (`connection`),
so a client configured with one URL per chat gets that chat's sandbox without the model
passing any id. The protocol itself (JSON-RPC, sessions, server-sent events, every revision
the official SDK speaks) is the `mcp` package's; `app` mounts it beside Django.
"""
