"""A stdio MCP server written with the official `mcp` package, run inside a sandbox as a
pipeline's managed process by the gateway's tests (tests/api/test_mcp_servers.py)."""

import os

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

server = MCPServer("notes")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def note(text: str) -> str:
    """Keep a note in /workspace/notes.txt and say how many there are."""
    with open("/workspace/notes.txt", "a") as notes:
        notes.write(text + "\n")
    with open("/workspace/notes.txt") as notes:
        return f"{len(notes.readlines())} notes"


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Count to `steps`, a step every 0.2 s, reporting each as progress."""
    for step in range(1, steps + 1):
        await anyio.sleep(0.2)
        await ctx.report_progress(step, steps, f"step {step}")
    return "done"


@server.tool()
def crash() -> str:
    """End the server's process at once."""
    os._exit(3)


@server.resource("notes://all")
def all_notes() -> str:
    """Every note kept so far."""
    with open("/workspace/notes.txt") as notes:
        return notes.read()


@server.prompt()
def review(topic: str) -> str:
    """Ask for a review of a topic."""
    return f"Please review {topic}."


if __name__ == "__main__":
    server.run()
