"""One record per operation (`record.Operation`), for every protocol: the bot API's routes
(`sandboxes.api`), the MCP tools (`sandboxes.mcp.tools`) and the tool definitions an LLM is
given (`sandboxes.schemas.tools`) are all made from these records, so an operation is written
once: its input and output shapes, the service it runs, its presenter and its hints.

`OPERATIONS` are every record; `TOOLS` those offered to a model, in the order it meets them.
"""

from typing import Any

from sandboxes.operations import code, execs, files, sandboxes, shells
from sandboxes.operations.record import (
    HIDDEN,
    Answer,
    Call,
    Context,
    Hints,
    Operation,
    Streams,
    field_name,
    require_unicode,
)

TOOLS: tuple[Operation[Any, Any], ...] = (
    sandboxes.OPEN,
    execs.EXEC,
    execs.EXEC_OUTPUT,
    execs.EXEC_WAIT,
    execs.EXEC_KILL,
    code.RUN_CODE,
    files.WRITE,
    files.READ,
    files.LIST,
    files.DELETE,
    files.LINK,
    sandboxes.CLOSE,
    sandboxes.RUN,
)

OPERATIONS: tuple[Operation[Any, Any], ...] = (
    *TOOLS,
    sandboxes.GET,
    sandboxes.RESET,
    sandboxes.KEEP_ALIVE,
    sandboxes.RENEW_LEASE,
    sandboxes.RELEASE_LEASE,
    sandboxes.TAKEOVER_LEASE,
    execs.GET_EXEC,
    shells.LIST_SESSIONS,
    shells.CREATE_SESSION,
    shells.DELETE_SESSION,
    shells.LIST_PROCESSES,
    shells.PROCESS_STDIN,
    shells.PROCESS_OUTPUT,
    shells.PROCESS_RESTART,
    code.LIST_CONTEXTS,
    code.CREATE_CONTEXT,
    code.RESTART_CONTEXT,
    code.DELETE_CONTEXT,
)

__all__ = [
    "HIDDEN",
    "OPERATIONS",
    "TOOLS",
    "Answer",
    "Call",
    "Context",
    "Hints",
    "Operation",
    "Streams",
    "execs",
    "field_name",
    "files",
    "require_unicode",
    "sandboxes",
    "shells",
]
