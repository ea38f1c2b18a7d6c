"""Commands as the bot API takes and shows them: an exec, its output as numbered chunks, its
end; compute mode's one run. With the presenters that turn rows into them."""

from typing import Annotated, Any, Literal
from uuid import UUID

from django.conf import settings
from ninja import Field, Schema
from pydantic import ConfigDict, StringConstraints, WithJsonSchema

from sandboxes.models import SESSION_NAME, Exec, ExecState
from sandboxes.schemas.common import (
    COUNT_MAX,
    NO_NUL,
    WHOLE,
    Fencing,
    Input,
    present,
    together,
)
from sandboxes.services import RunResult
from sandboxes.services.compute import MAX_ARGS, MAX_FILES
from sandboxes.services.execs.requests import MAX_COMMAND_BYTES, MAX_ENV_VARS

Text = Annotated[str, StringConstraints(pattern=NO_NUL)]
# A shell command: not blank, no NUL.
ShellCommand = Annotated[
    str, StringConstraints(pattern=r"^[^\x00]*\S[^\x00]*$", max_length=MAX_COMMAND_BYTES)
]
# An argv: a program name first, then its arguments (the service refuses an empty name).
Argv = Annotated[
    list[Text],
    Field(min_length=1),
    WithJsonSchema(
        {
            "type": "array",
            "minItems": 1,
            "prefixItems": [{"type": "string", "minLength": 1, "pattern": NO_NUL}],
            "items": {"type": "string", "pattern": NO_NUL},
        }
    ),
]
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
Env = Annotated[
    dict[Annotated[str, StringConstraints(pattern=ENV_NAME)], Text],
    Field(max_length=MAX_ENV_VARS),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_ENV_VARS,
            "propertyNames": {"pattern": ENV_NAME},
            "additionalProperties": {"type": "string", "pattern": NO_NUL},
        }
    ),
]
SessionName = Annotated[str, StringConstraints(pattern=f"^(?:{SESSION_NAME})?$")]
Cwd = Annotated[str, StringConstraints(pattern=NO_NUL, max_length=4096)]
Files = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=NO_NUL)], str],
    Field(max_length=MAX_FILES),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_FILES,
            "propertyNames": {"minLength": 1, "maxLength": 4096, "pattern": NO_NUL},
            "additionalProperties": {"type": "string"},
        }
    ),
]
Timeout = Annotated[int, Field(ge=1, le=settings.BOXYARD_MAX_EXEC_TIMEOUT), WHOLE]
# A program's arguments (their total size is the service's to bound).
Args = Annotated[list[Text], Field(max_length=MAX_ARGS)]


FRESH = present("fresh", {"const": True})
A_SESSION = {"type": "string", "minLength": 1, "not": {"const": "default"}}


class ExecIn(Fencing):
    # A fresh exec runs in the foreground, outside any session (the service refuses both).
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {"not": together(FRESH, present("background", {"const": True}))},
                {"not": together(FRESH, present("session", A_SESSION))},
            ]
        }
    )

    cmd: Argv | ShellCommand = Field(
        ...,
        description='A shell command such as "python main.py > out.txt" (run by the session\'s '
        "shell, so pipes, && and redirections work, and cd, export and functions carry over to "
        'the next command), or an argv array such as ["python", "main.py"] (run as is).',
    )
    cwd: Cwd | None = Field(
        None,
        description="Working directory for this command only, relative to /workspace "
        "(default: the session's current directory).",
    )
    env: Env | None = Field(
        None, description="Extra environment variables for this command only, name to value."
    )
    session: SessionName | None = Field(
        None,
        description='Shell session to run in (default "default"); sessions keep separate '
        "directories and variables and run side by side.",
    )
    timeout_seconds: Timeout | None = Field(
        None,
        description="Kill the command after this many seconds (default: the pipeline's exec "
        "timeout; a background command has none unless given; at most "
        "BOXYARD_MAX_EXEC_TIMEOUT).",
    )
    background: bool = Field(
        False,
        description="Start it and return at once with an exec_id instead of waiting for it; "
        "read its output, wait for it or kill it by that id.",
    )
    fresh: bool = Field(
        False,
        description="Run in a new process outside any session, in /workspace (or cwd) with "
        "the sandbox's environment: no session state is read or kept. Not with background.",
    )


class ExecOut(Schema):
    exec_id: UUID
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int | None
    session: str
    background: bool
    session_restarted: bool = Field(
        description="The command ended its shell (exit, exec, set -e, a kill): the session was "
        "started again from its last cwd and environment."
    )
    oom_killed: bool = Field(
        description="The kernel killed it (exit code 137): the sandbox ran out of memory."
    )
    error: str


class Chunk(Schema):
    seq: int
    stream: Literal["stdout", "stderr"]
    text: str


class ExecOutputOut(Schema):
    chunks: list[Chunk]
    done: bool
    status: str
    exit_code: int | None
    dropped_bytes: int = Field(
        description="Bytes of the command's output no longer kept, which no chunk will carry: "
        "past what the sandbox keeps of one command (BOXYARD_EXEC_KEEP_BYTES), dropped oldest "
        "first when what it keeps of all its commands is full (BOXYARD_AGENT_OUTPUT_BYTES), "
        "or, once the sandbox has stopped, past the start its record holds. Chunk numbers "
        "skip what was dropped."
    )


class WaitIn(Input):
    timeout_seconds: float = Field(
        30, ge=0, le=900, description="How long to wait at most (default 30; 0 only checks)."
    )


class WaitOut(Schema):
    done: bool
    status: str
    exit_code: int | None


class KillOut(Schema):
    ok: bool
    status: str


class OutputQuery(Schema):
    since_seq: int = Field(
        0,
        ge=0,
        le=COUNT_MAX,
        description="The seq of the last chunk already read: only chunks after it are returned "
        "(0, the default: from the start).",
    )
    max_bytes: int | None = Field(
        None, ge=1, le=16 * 1024 * 1024, description="About how much output to return at most."
    )


class StreamQuery(Schema):
    since_seq: int = Field(
        0, ge=0, le=COUNT_MAX, description="The last sequence number already seen (0: none)."
    )


class RunIn(Input):
    pipeline: str = Field(..., min_length=1, max_length=50, description="The pipeline's slug.")
    language: Literal["python", "javascript", "bash", "sh"] = Field(
        ..., description="python (python3), javascript (node), bash or sh"
    )
    code: str = Field(..., description="The program to run, as text.")
    args: Args | None = Field(
        None,
        description="Arguments passed to the program (sys.argv[1:], process.argv.slice(2), $@).",
    )
    files: Files | None = Field(
        None, description="More files to write first: path (relative to /workspace) to text."
    )
    env: Env | None = Field(None, description="Environment variables, name to value.")
    timeout_seconds: Timeout | None = Field(
        None, description="Kill it after this many seconds (default: the pipeline's)."
    )


class RunOut(Schema):
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    duration_ms: int
    status: str
    oom_killed: bool = Field(description="The kernel killed it: the sandbox ran out of memory.")
    error: str


# One server-sent event of an exec's stream (its `data` is a JSON object).
SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["chunk", "exit", "gone"]},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"type": "object"},
        },
    },
}


def exec_out(record: Exec) -> dict[str, Any]:
    return {
        "exec_id": record.id,
        "status": record.state,
        "exit_code": record.exit_code,
        "stdout": record.stdout,
        "stderr": record.stderr,
        "truncated": record.truncated,
        "stdout_truncated": record.stdout_truncated,
        "stderr_truncated": record.stderr_truncated,
        "duration_ms": record.duration_ms,
        "session": record.session,
        "background": record.background,
        "session_restarted": record.session_restarted,
        "oom_killed": record.oom_killed,
        "error": record.error,
    }


def progress_out(record: Exec) -> dict[str, Any]:
    return {
        "done": record.state != ExecState.RUNNING,
        "status": record.state,
        "exit_code": record.exit_code,
    }


def run_out(result: RunResult) -> dict[str, Any]:
    record = result.exec
    return {
        "ok": result.ok,
        "exit_code": record.exit_code,
        "stdout": record.stdout,
        "stderr": record.stderr,
        "truncated": record.truncated,
        "duration_ms": result.duration_ms,
        "status": record.state,
        "oom_killed": record.oom_killed,
        "error": record.error,
    }
