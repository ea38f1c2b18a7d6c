"""Function-calling tool definitions for the bot API, ready for an LLM runtime.

`openai_tools()` and `anthropic_tools()` give the same tools in the two providers' shapes;
`tool_specs()` also says which API call each tool is (method, path template, and which
arguments go in the JSON body and which in the query string), so a runtime can dispatch a
tool call without knowing the API. Path placeholders (`{sandbox_id}`, `{exec_id}`) are
filled from the tool's arguments of the same name.

The runtime adds what the model never gives: the pipeline slug and the chat variables of
`sandbox_open`, and, if it manages leases itself, `holder` and `epoch` on changing calls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.models import Pipeline

API_PREFIX = "/api/v1"

JsonSchema = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what the model sees (name, description, parameters) and the call it makes."""

    name: str
    description: str
    parameters: JsonSchema
    method: str
    path: str
    body: tuple[str, ...] = ()
    query: tuple[str, ...] = ()

    def call(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "body": list(self.body),
            "query": list(self.query),
        }


def _object(properties: dict[str, JsonSchema], required: tuple[str, ...] = ()) -> JsonSchema:
    schema: JsonSchema = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def _sandbox_id() -> JsonSchema:
    return {"type": "string", "description": "The sandbox_id returned by sandbox_open."}


def _exec_id() -> JsonSchema:
    return {"type": "string", "description": "The exec_id returned by sandbox_exec."}


def _path(description: str) -> JsonSchema:
    return {"type": "string", "minLength": 1, "maxLength": 4096, "description": description}


def _recursive(description: str) -> JsonSchema:
    return {"type": "boolean", "description": description}


_SANDBOX = API_PREFIX + "/sandboxes/{sandbox_id}"


def tool_specs() -> list[ToolSpec]:
    """The nine sandbox tools, built fresh on each call (callers may change what they get)."""
    return [
        ToolSpec(
            name="sandbox_open",
            description=(
                "Open this conversation's sandbox, or resume it if it already exists: a "
                "persistent Linux container whose working directory is /workspace. Takes no "
                "arguments: the bot runtime fills in the pipeline and this chat's variables, so "
                "every call in the same chat returns the same sandbox with the same files. "
                "Returns sandbox_id (needed by every other sandbox_* tool), workdir, image and "
                "created (false when an existing sandbox was resumed). Call it before the other "
                "sandbox tools, and again if one reports that the sandbox is unknown or closed."
            ),
            parameters=_object({}),
            method="POST",
            path=API_PREFIX + "/sandboxes/open",
        ),
        ToolSpec(
            name="sandbox_exec",
            description=(
                "Run a command in the sandbox and return exit_code, stdout and stderr. cmd is a "
                "shell string (run by a persistent shell, so pipes, && and redirections work, and "
                "cd, export and functions carry over to the next command) or an argv array. It "
                "starts in /workspace (or where an earlier cd went) as a non-root user, without "
                "network access unless this bot's pipeline enables it. Files under /workspace persist "
                "between calls and between messages. Output past the pipeline's limit is cut "
                "and truncated is true: send large output to a file and read parts of it. A "
                "command is killed at its timeout. For long jobs or servers set background: it "
                'returns at once with status "running" and an exec_id to use with '
                "sandbox_exec_read and sandbox_exec_wait."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "cmd": {
                        "description": (
                            'A shell command such as "python main.py > out.txt", or an argv '
                            'array such as ["python", "main.py"].'
                        ),
                        "anyOf": [
                            {"type": "string", "minLength": 1},
                            {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        ],
                    },
                    "cwd": {
                        "type": "string",
                        "description": "Working directory for this command only, relative to "
                        "/workspace (default: the session's current directory).",
                    },
                    "session": {
                        "type": "string",
                        "description": 'Shell session to run in (default "default"); sessions '
                        "keep separate directories and variables and run side by side.",
                    },
                    "env": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Extra environment variables, name to value.",
                    },
                    "timeout_seconds": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Kill the command after this many seconds "
                        "(default: the pipeline's exec timeout).",
                    },
                    "background": {
                        "type": "boolean",
                        "description": "Start it and return at once with an exec_id "
                        "instead of waiting for it (default false).",
                    },
                },
                required=("sandbox_id", "cmd"),
            ),
            method="POST",
            path=_SANDBOX + "/exec",
            body=("cmd", "cwd", "env", "session", "timeout_seconds", "background"),
        ),
        ToolSpec(
            name="sandbox_exec_read",
            description=(
                "Read the output of a command started by sandbox_exec, as numbered chunks "
                "{seq, stream, text}, with done and exit_code. To poll, pass the seq of the "
                "last chunk you already have as since_seq to get only what came after it. "
                "Returns at once; use sandbox_exec_wait to block until the command ends."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "exec_id": _exec_id(),
                    "since_seq": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Only chunks after this seq; omit to read from the start.",
                    },
                },
                required=("sandbox_id", "exec_id"),
            ),
            method="GET",
            path=_SANDBOX + "/execs/{exec_id}/output",
            query=("since_seq",),
        ),
        ToolSpec(
            name="sandbox_exec_wait",
            description=(
                "Wait until a command started by sandbox_exec ends, or until timeout_seconds "
                "pass. Returns done and exit_code (null while it still runs); read its output "
                "with sandbox_exec_read."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "exec_id": _exec_id(),
                    "timeout_seconds": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 900,
                        "description": "How long to wait at most (default 30; 0 only checks).",
                    },
                },
                required=("sandbox_id", "exec_id"),
            ),
            method="POST",
            path=_SANDBOX + "/execs/{exec_id}/wait",
            body=("timeout_seconds",),
        ),
        ToolSpec(
            name="sandbox_fs_write",
            description=(
                "Write a file in the sandbox's /workspace, creating parent directories. Give "
                "text in contents, or binary data base64-encoded in contents_b64 (not both). "
                "The file persists between calls and between messages of this conversation."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "path": _path("File path, relative to /workspace."),
                    "contents": {"type": "string", "description": "Text contents (UTF-8)."},
                    "contents_b64": {
                        "type": "string",
                        "description": "Binary contents, base64-encoded.",
                    },
                    "mode": {
                        "type": "string",
                        "pattern": "^0?[0-7]{3}$",
                        "description": 'Octal permissions such as "0644" (default) or "0755".',
                    },
                    "overwrite": {
                        "type": "boolean",
                        "description": "Replace an existing file (default true); "
                        "false fails if it exists.",
                    },
                },
                required=("sandbox_id", "path"),
            ),
            method="PUT",
            path=_SANDBOX + "/files",
            body=("path", "contents", "contents_b64", "mode", "overwrite"),
        ),
        ToolSpec(
            name="sandbox_fs_read",
            description=(
                "Read a file from the sandbox's /workspace. Returns contents (text) or "
                "contents_b64 (binary), size_bytes, and truncated when the file is longer "
                "than max_bytes or the read limit; read large files in parts with sandbox_exec "
                "(head, tail, sed -n) instead."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "path": _path("File path, relative to /workspace."),
                    "max_bytes": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Read at most this many bytes (default: the read limit).",
                    },
                },
                required=("sandbox_id", "path"),
            ),
            method="GET",
            path=_SANDBOX + "/files",
            query=("path", "max_bytes"),
        ),
        ToolSpec(
            name="sandbox_fs_list",
            description=(
                "List a directory of the sandbox's /workspace: entries with path, type (file, "
                "dir, symlink), size, mode and mtime_unix. Skills of this bot are under "
                ".skills/."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "path": _path("Directory, relative to /workspace (default: /workspace)."),
                    "recursive": _recursive("Also list everything below it (default false)."),
                },
                required=("sandbox_id",),
            ),
            method="GET",
            path=_SANDBOX + "/files/list",
            query=("path", "recursive"),
        ),
        ToolSpec(
            name="sandbox_fs_delete",
            description=(
                "Delete a file or directory in the sandbox's /workspace. A directory that is "
                "not empty needs recursive: true. Deleting cannot be undone."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "path": _path("Path to delete, relative to /workspace."),
                    "recursive": _recursive(
                        "Delete a directory with everything in it (default false)."
                    ),
                },
                required=("sandbox_id", "path"),
            ),
            method="DELETE",
            path=_SANDBOX + "/files",
            query=("path", "recursive"),
        ),
        ToolSpec(
            name="sandbox_fs_link",
            description=(
                "Make a link to one file of the sandbox's /workspace that works without any "
                "token until it expires: method GET lets the user download the file (give "
                "the url to the user to hand them a chart, a report or a zip), PUT lets the "
                "user upload to that path (e.g. curl -T file URL). Returns url and expires_at."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "path": _path("File path, relative to /workspace."),
                    "method": {
                        "type": "string",
                        "pattern": "^(GET|PUT)$",
                        "description": "GET: a download link (default); PUT: an upload link.",
                    },
                    "expires_in_seconds": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "How long the link works (default one hour).",
                    },
                },
                required=("sandbox_id", "path"),
            ),
            method="POST",
            path=_SANDBOX + "/files/links",
            body=("path", "method", "expires_in_seconds"),
        ),
        ToolSpec(
            name="sandbox_close",
            description=(
                "Close the sandbox when the work is finished: its container is stopped. The "
                "files in /workspace are kept for a later sandbox_open unless "
                "delete_workspace is true. Do not close it between steps of the same task."
            ),
            parameters=_object(
                {
                    "sandbox_id": _sandbox_id(),
                    "delete_workspace": {
                        "type": "boolean",
                        "description": "Also delete every file in /workspace (default false).",
                    },
                },
                required=("sandbox_id",),
            ),
            method="DELETE",
            path=_SANDBOX,
            query=("delete_workspace",),
        ),
    ]


def openai_tools() -> list[dict[str, Any]]:
    """Chat Completions `tools`."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": copy.deepcopy(spec.parameters),
            },
        }
        for spec in tool_specs()
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    """Messages API `tools`."""
    return [
        {
            "name": spec.name,
            "description": spec.description,
            "input_schema": copy.deepcopy(spec.parameters),
        }
        for spec in tool_specs()
    ]


def _kib(size: int) -> str:
    if size >= 1024 * 1024 and size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MiB"
    if size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size / 1024:.1f} KiB"


def _duration(seconds: int) -> str:
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= length and seconds % length == 0:
            count = seconds // length
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def system_prompt(pipeline: Pipeline) -> str:
    """The pipeline's prompt (or the default one), then the facts of its sandbox profile."""
    from pipelines.models import DEFAULT_SYSTEM_PROMPT, Retention

    base = (pipeline.system_prompt or "").strip() or DEFAULT_SYSTEM_PROMPT
    facts = ["", "Sandbox facts for this bot:"]
    if pipeline.network_enabled:
        facts.append("- Network: enabled; commands can reach the internet.")
    else:
        facts.append("- Network: disabled; downloads and package installs from the internet fail.")
    facts.append(
        f"- Commands time out after {pipeline.exec_timeout_seconds} s by default "
        "(set timeout_seconds for longer ones)."
    )
    facts.append(
        f"- Output beyond {_kib(pipeline.output_limit_bytes)} per stream is truncated; "
        "write large output to a file and read parts of it."
    )
    if pipeline.retention == Retention.PERSISTENT:
        facts.append(
            "- Files in /workspace are kept: after a pause the sandbox is restarted with the "
            "same files."
        )
    else:
        facts.append(
            "- Files in /workspace are kept while this chat is active; the sandbox and its files "
            f"are removed after {_duration(pipeline.idle_timeout_seconds)} without activity."
        )
    skills = list(pipeline.skills.all())
    if skills:
        facts.append("- Skills (read each one's README first):")
        for skill in skills:
            about = _first_line(skill.description)
            facts.append(f"  - /workspace/.skills/{skill.name}/" + (f" - {about}" if about else ""))
    else:
        facts.append("- No skills are installed for this bot.")
    return base + "\n" + "\n".join(facts)


def tools_document(pipeline: Pipeline) -> dict[str, Any]:
    """What `GET /pipelines/{slug}/tools` returns."""
    return {
        "pipeline": pipeline.slug,
        "system_prompt": system_prompt(pipeline),
        "openai": openai_tools(),
        "anthropic": anthropic_tools(),
        "calls": [spec.call() for spec in tool_specs()],
    }
