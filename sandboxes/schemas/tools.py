"""The sandbox tools an LLM is given, in one place: what each one does, which call of the bot
API it is, and its input and output schemas, taken from that call's own request and response
shapes (never written a second time).

`GET /pipelines/{slug}/tools` renders them for function calling (OpenAI's and Anthropic's
shapes, with the call to dispatch each one to); the MCP server at `/mcp` lists the same tools
with their annotations and runs them.

A tool's arguments are the call's path placeholders (`sandbox_id`, `exec_id`) and the fields of
its body or query shape, less those the runtime fills in (`HIDDEN`: the lease's holder and
epoch, the pipeline, the chat's variables).
"""

from __future__ import annotations

import copy
import string
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ninja import Schema

from sandboxes.schemas.common import Fencing
from sandboxes.schemas.execs import (
    ExecIn,
    ExecOut,
    ExecOutputOut,
    KillOut,
    OutputQuery,
    RunIn,
    RunOut,
    WaitIn,
    WaitOut,
)
from sandboxes.schemas.files import (
    DeleteOut,
    DeleteQuery,
    LinkIn,
    LinkOut,
    ListOut,
    ListQuery,
    ReadOut,
    ReadQuery,
    WriteIn,
    WriteOut,
)
from sandboxes.schemas.sandboxes import CloseOut, CloseQuery, OpenIn, OpenOut

API_PREFIX = "/api/v1"
JsonSchema = dict[str, Any]

# Filled in by whoever runs the tool, never by the model.
HIDDEN = frozenset({"holder", "epoch", "pipeline", "variables", "async"})

PATH_ARGUMENTS: dict[str, JsonSchema] = {
    "sandbox_id": {"type": "string", "description": "The sandbox_id returned by sandbox_open."},
    "exec_id": {"type": "string", "description": "The exec_id returned by sandbox_exec."},
}


@dataclass(frozen=True)
class Hints:
    """What the tool does to the sandbox, as MCP's tool annotations say it."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what the model sees, the API call it is, and the shapes of both ends."""

    name: str
    title: str
    description: str
    method: str
    path: str
    output: type[Schema]
    body: type[Schema] | None = None
    query: type[Schema] | None = None
    hints: Hints = field(default_factory=Hints)

    @cached_property
    def path_arguments(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.path) if name)

    @cached_property
    def body_arguments(self) -> tuple[str, ...]:
        return _arguments(self.body)

    @cached_property
    def query_arguments(self) -> tuple[str, ...]:
        return _arguments(self.query)

    @property
    def parameters(self) -> JsonSchema:
        """The arguments as one JSON Schema object (a fresh copy on each call)."""
        return copy.deepcopy(self._parameters)

    @cached_property
    def _parameters(self) -> JsonSchema:
        properties: dict[str, JsonSchema] = {
            name: copy.deepcopy(PATH_ARGUMENTS[name]) for name in self.path_arguments
        }
        required = list(self.path_arguments)
        for shape in (self.body, self.query):
            if shape is None:
                continue
            schema = shape.model_json_schema(by_alias=True)
            defs = schema.get("$defs", {})
            for name, sub in schema.get("properties", {}).items():
                if name not in HIDDEN:
                    properties[name] = _argument(sub, defs)
            required += [name for name in schema.get("required", []) if name not in HIDDEN]
        parameters: JsonSchema = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            parameters["required"] = required
        return parameters

    @property
    def output_schema(self) -> JsonSchema:
        """What a successful call answers, as a JSON Schema object (a fresh copy)."""
        return copy.deepcopy(self._output_schema)

    @cached_property
    def _output_schema(self) -> JsonSchema:
        schema = self.output.model_json_schema(by_alias=True, mode="serialization")
        resolved: JsonSchema = _resolved(schema, schema.get("$defs", {}))
        return resolved

    def call(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "body": list(self.body_arguments),
            "query": list(self.query_arguments),
            "output_schema": self.output_schema,
        }


def _arguments(shape: type[Schema] | None) -> tuple[str, ...]:
    if shape is None:
        return ()
    names = shape.model_json_schema(by_alias=True).get("properties", {})
    return tuple(name for name in names if name not in HIDDEN)


def _resolved(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with every `$ref` replaced by the definition it names, and no titles."""
    if isinstance(schema, list):
        return [_resolved(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        return _resolved({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    plain: JsonSchema = {}
    for key, value in schema.items():
        if key == "properties":  # names of fields, not keywords
            plain[key] = {name: _resolved(sub, defs) for name, sub in value.items()}
        elif key not in ("title", "$defs"):
            plain[key] = _resolved(value, defs)
    return plain


# Keywords of the API's own schemas that the LLM providers' tool schemas do not take (the
# server still checks them, and names what a call got wrong).
_NOT_FOR_TOOLS = frozenset({"prefixItems", "maxProperties", "propertyNames"})


def _for_tools(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_for_tools(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: (
            {n: _for_tools(sub) for n, sub in value.items()}
            if key == "properties"
            else _for_tools(value)
        )
        for key, value in schema.items()
        if key == "properties" or key not in _NOT_FOR_TOOLS
    }


def _argument(schema: JsonSchema, defs: dict[str, Any]) -> JsonSchema:
    """An argument as a model should see it: an optional argument is left out rather than
    sent as null, so `X | None` reads as X; in the subset of JSON Schema the providers take."""
    plain: JsonSchema = _for_tools(_resolved(schema, defs))
    options = plain.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        del plain["anyOf"]
        plain = {**rest[0], **plain} if len(rest) == 1 else {"anyOf": rest, **plain}
    if plain.get("default", 0) is None:
        del plain["default"]
    return plain


_SANDBOX = API_PREFIX + "/sandboxes/{sandbox_id}"
_EXEC = _SANDBOX + "/execs/{exec_id}"

_READ = Hints(read_only=True, idempotent=True)


def tool_specs() -> list[ToolSpec]:
    """The sandbox tools, in the order a model meets them."""
    return list(_TOOLS)


_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="sandbox_open",
        title="Open the chat's sandbox",
        description=(
            "Open this conversation's sandbox, or resume it if it already exists: a persistent "
            "Linux container whose working directory is /workspace. Takes no arguments: the "
            "pipeline and this chat's variables come from the connection (the bot runtime, or "
            "the MCP URL), so every call in the same chat returns the same sandbox with the "
            "same files. Returns sandbox_id, workdir, image and created (false when an existing "
            "sandbox was resumed). Call it before the other sandbox tools, and again if one "
            "reports that the sandbox is unknown or closed."
        ),
        method="POST",
        path=API_PREFIX + "/sandboxes/open",
        body=OpenIn,
        output=OpenOut,
        hints=Hints(idempotent=True),
    ),
    ToolSpec(
        name="sandbox_exec",
        title="Run a command",
        description=(
            "Run a command in the sandbox and return exit_code, stdout and stderr. cmd is a "
            "shell string (run by a persistent shell, so pipes, && and redirections work, and "
            "cd, export and functions carry over to the next command) or an argv array. It "
            "starts in /workspace (or where an earlier cd went) as a non-root user, without "
            "network access unless this bot's pipeline enables it. Files under /workspace "
            "persist between calls and between messages. Output past the pipeline's limit is "
            "cut and truncated is true: send large output to a file and read parts of it. A "
            "command is killed at its timeout. For long jobs or servers set background: it "
            'returns at once with status "running" and an exec_id to use with '
            "sandbox_exec_read, sandbox_exec_wait and sandbox_exec_kill."
        ),
        method="POST",
        path=_SANDBOX + "/exec",
        body=ExecIn,
        output=ExecOut,
        hints=Hints(destructive=True),
    ),
    ToolSpec(
        name="sandbox_exec_read",
        title="Read a command's output",
        description=(
            "Read the output of a command started by sandbox_exec, as numbered chunks "
            "{seq, stream, text}, with done and exit_code. To poll, pass the seq of the last "
            "chunk you already have as since_seq to get only what came after it. Returns at "
            "once; use sandbox_exec_wait to block until the command ends."
        ),
        method="GET",
        path=_EXEC + "/output",
        query=OutputQuery,
        output=ExecOutputOut,
        hints=_READ,
    ),
    ToolSpec(
        name="sandbox_exec_wait",
        title="Wait for a command",
        description=(
            "Wait until a command started by sandbox_exec ends, or until timeout_seconds pass. "
            "Returns done and exit_code (null while it still runs); read its output with "
            "sandbox_exec_read."
        ),
        method="POST",
        path=_EXEC + "/wait",
        body=WaitIn,
        output=WaitOut,
        hints=_READ,
    ),
    ToolSpec(
        name="sandbox_exec_kill",
        title="Kill a command",
        description=(
            "Kill a command started by sandbox_exec and every process it started, also those "
            "it left running in the background. Returns once it has ended, with its status."
        ),
        method="POST",
        path=_EXEC + "/kill",
        body=Fencing,
        output=KillOut,
        hints=Hints(destructive=True, idempotent=True),
    ),
    ToolSpec(
        name="sandbox_fs_write",
        title="Write a file",
        description=(
            "Write a file in the sandbox's /workspace, creating parent directories. Give text "
            "in contents, or binary data base64-encoded in contents_b64 (not both). The file "
            "persists between calls and between messages of this conversation."
        ),
        method="PUT",
        path=_SANDBOX + "/files",
        body=WriteIn,
        output=WriteOut,
        hints=Hints(destructive=True, idempotent=True),
    ),
    ToolSpec(
        name="sandbox_fs_read",
        title="Read a file",
        description=(
            "Read a file from the sandbox's /workspace. Returns contents (text) or "
            "contents_b64 (binary), size_bytes, and truncated when the file is longer than "
            "max_bytes or the read limit; read large files in parts with sandbox_exec (head, "
            "tail, sed -n) instead, or hand them over with sandbox_fs_link."
        ),
        method="GET",
        path=_SANDBOX + "/files",
        query=ReadQuery,
        output=ReadOut,
        hints=_READ,
    ),
    ToolSpec(
        name="sandbox_fs_list",
        title="List a directory",
        description=(
            "List a directory of the sandbox's /workspace: entries with path, type (file, dir, "
            "symlink), size, mode and mtime_unix. Skills of this bot are under .skills/."
        ),
        method="GET",
        path=_SANDBOX + "/files/list",
        query=ListQuery,
        output=ListOut,
        hints=_READ,
    ),
    ToolSpec(
        name="sandbox_fs_delete",
        title="Delete a file",
        description=(
            "Delete a file or directory in the sandbox's /workspace. A directory that is not "
            "empty needs recursive: true. Deleting cannot be undone."
        ),
        method="DELETE",
        path=_SANDBOX + "/files",
        query=DeleteQuery,
        output=DeleteOut,
        hints=Hints(destructive=True, idempotent=True),
    ),
    ToolSpec(
        name="sandbox_fs_link",
        title="Link to a file",
        description=(
            "Make a link to one file of the sandbox's /workspace that works without any token "
            "until it expires: method GET lets the user download the file (give the url to the "
            "user to hand them a chart, a report or a zip), PUT lets the user upload to that "
            "path (e.g. curl -T file URL). Returns url and expires_at."
        ),
        method="POST",
        path=_SANDBOX + "/files/links",
        body=LinkIn,
        output=LinkOut,
    ),
    ToolSpec(
        name="sandbox_close",
        title="Close the sandbox",
        description=(
            "Close the sandbox when the work is finished: its container is stopped. The files "
            "in /workspace are kept for a later sandbox_open unless delete_workspace is true. "
            "Do not close it between steps of the same task."
        ),
        method="DELETE",
        path=_SANDBOX,
        query=CloseQuery,
        output=CloseOut,
        hints=Hints(destructive=True, idempotent=True),
    ),
    ToolSpec(
        name="sandbox_run",
        title="Run code once",
        description=(
            "Compute mode: run one program (language python, bash or sh) in a fresh sandbox "
            "that is destroyed afterwards, and return ok, exit_code, stdout and stderr. Nothing "
            "is kept: use it for a self-contained calculation, and sandbox_exec for work on "
            "the chat's files."
        ),
        method="POST",
        path=API_PREFIX + "/run",
        body=RunIn,
        output=RunOut,
    ),
)
