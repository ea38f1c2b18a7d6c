"""What the bot API answers, as small frozen dataclasses.

`from_json` builds any of them from a decoded JSON object: it reads the fields the dataclass
declares (by their type hints), ignores fields it does not know (the server may add some) and
leaves a missing field at its default.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, Union

T = TypeVar("T")


@dataclass(frozen=True)
class Lease:
    """Who controls a sandbox: `holder` ("" when free) and the fencing `epoch`."""

    holder: str
    epoch: int
    expires_at: datetime | None = None


@dataclass(frozen=True)
class Workspace:
    """A workspace's disk: its size (None: made before disks, no limit) and what is used of it
    (None when the sandbox is not running)."""

    limit_bytes: int | None = None
    used_bytes: int | None = None
    enforced: bool = False


@dataclass(frozen=True)
class Sandbox:
    sandbox_id: str
    pipeline: str
    scope_key: str
    status: str
    image: str
    workdir: str
    lease: Lease
    stop_reason: str = ""
    status_detail: str = ""
    generation: int = 0
    created_at: datetime | None = None
    last_activity_at: datetime | None = None
    idle_deadline: datetime | None = None
    expires_at: datetime | None = None
    workspace: Workspace | None = None  # in `get_sandbox`'s answer only


@dataclass(frozen=True)
class OpenedSandbox(Sandbox):
    """`open`'s answer: the sandbox, whether this call gave the scope key a new one, and
    where it came from: "existing", "pool" (the warm pool) or "cold"."""

    created: bool = False
    source: str = ""


@dataclass(frozen=True)
class KeptAlive:
    """`keep_alive`'s answer: the sandbox's new idle deadline, and its time to live."""

    ok: bool
    idle_deadline: datetime | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class ExecResult:
    exec_id: str
    status: str
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: int | None = None
    session: str = ""
    background: bool = False
    session_restarted: bool = False  # the command ended its shell; the session started anew
    oom_killed: bool = False  # the kernel killed it: the sandbox ran out of memory
    error: str = ""

    @property
    def ok(self) -> bool:
        """The command ran to its end and exited 0."""
        return self.status == "completed" and self.exit_code == 0


@dataclass(frozen=True)
class OutputChunk:
    seq: int
    stream: str
    text: str


class _Chunked:
    """Output as numbered chunks (`chunks`), read page by page."""

    chunks: tuple[OutputChunk, ...]

    @property
    def last_seq(self) -> int | None:
        """Pass it as `since_seq` to get what comes next (None: no new chunk)."""
        return self.chunks[-1].seq if self.chunks else None

    def text(self, stream: str = "stdout") -> str:
        return "".join(chunk.text for chunk in self.chunks if chunk.stream == stream)


@dataclass(frozen=True)
class ExecOutput(_Chunked):
    chunks: tuple[OutputChunk, ...]
    done: bool
    status: str = ""
    exit_code: int | None = None
    # Bytes of the output no longer kept (chunk numbers skip them).
    dropped_bytes: int = 0


@dataclass(frozen=True)
class WaitResult:
    done: bool
    status: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class ExecEvent:
    """One event of an exec's stream: a `chunk` of output, then its `exit`."""

    event: str
    seq: int | None = None
    stream: str = ""
    text: str = ""
    exit_code: int | None = None
    timed_out: bool | None = None
    killed: bool | None = None


def parse_events(text: str) -> list[ExecEvent]:
    """Server-sent events as the stream route sends them (comments are skipped)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        kind, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append(from_json(ExecEvent, {**json.loads("\n".join(data)), "event": kind}))
    return events


@dataclass(frozen=True)
class StatusResult:
    """`close` and `exec_kill`: done, and the state the sandbox or exec is in now."""

    ok: bool
    status: str


@dataclass(frozen=True)
class WriteResult:
    ok: bool
    path: str
    size_bytes: int
    sha256: str = ""  # the bytes' SHA-256 in hex (empty from a server that does not say it)


@dataclass(frozen=True)
class Uploaded:
    """A file written from a stream: its path, size and sha256."""

    ok: bool
    path: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class FileInfo:
    """A file as a download describes it (HEAD, or what a download wrote)."""

    size_bytes: int
    etag: str
    content_type: str
    last_modified: str

    @classmethod
    def from_response(cls, response: Any) -> FileInfo:
        headers = response.headers
        return cls(
            size_bytes=int(headers.get("Content-Length") or 0),
            etag=headers.get("ETag", ""),
            content_type=headers.get("Content-Type", ""),
            last_modified=headers.get("Last-Modified", ""),
        )


@dataclass(frozen=True)
class Downloaded:
    """What a download wrote: its bytes, and how the server described the file."""

    size_bytes: int
    etag: str
    content_type: str

    @classmethod
    def from_received(cls, received: Any) -> Downloaded:
        headers = received.response.headers
        return cls(
            size_bytes=received.size,
            etag=headers.get("ETag", ""),
            content_type=headers.get("Content-Type", ""),
        )


@dataclass(frozen=True)
class FileLink:
    """A signed link: anyone with `url` may use `method` on `path` until `expires_at`."""

    url: str
    path: str
    method: str
    expires_at: datetime


@dataclass(frozen=True)
class Extracted:
    """An archive extracted into a directory: how many entries and bytes it made."""

    ok: bool
    path: str
    entries: int
    size_bytes: int


@dataclass(frozen=True)
class FileContents:
    """A file read back: `data` always holds the bytes, `text` decodes them as UTF-8."""

    path: str
    data: bytes
    size_bytes: int
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> FileContents:
        if body.get("contents_b64") is not None:
            data = base64.b64decode(body["contents_b64"])
        else:
            data = (body.get("contents") or "").encode("utf-8")
        return cls(
            path=body["path"],
            data=data,
            size_bytes=body["size_bytes"],
            truncated=body.get("truncated", False),
        )


@dataclass(frozen=True)
class FileEntry:
    path: str
    name: str
    type: str
    size: int
    mode: str
    mtime_unix: int


@dataclass(frozen=True)
class FileList:
    entries: tuple[FileEntry, ...]
    truncated: bool = False

    @property
    def paths(self) -> list[str]:
        return [entry.path for entry in self.entries]


@dataclass(frozen=True)
class DeleteResult:
    ok: bool
    deleted: str


@dataclass(frozen=True)
class Session:
    name: str
    cwd: str
    env: dict[str, str]
    busy: bool = False
    started: bool = False


@dataclass(frozen=True)
class Process:
    """A managed process: `state` running, backoff (restarting soon), exited or stopped."""

    name: str
    state: str
    generation: int = 0
    restarts: int = 0
    pid: int | None = None
    last_exit_code: int | None = None
    backoff_ms: int = 0


@dataclass(frozen=True)
class StdinResult:
    ok: bool
    generation: int


@dataclass(frozen=True)
class ProcessOutput(_Chunked):
    name: str
    generation: int
    running: bool
    chunks: tuple[OutputChunk, ...] = ()
    exit_code: int | None = None


@dataclass(frozen=True)
class RunResult:
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: int
    truncated: bool = False
    status: str = ""
    oom_killed: bool = False
    error: str = ""


@dataclass(frozen=True)
class ResetDone:
    """`reset`'s answer: how many processes it ended, and how long it took."""

    ok: bool
    killed: int = 0
    duration_ms: int = 0


@dataclass(frozen=True)
class Tools:
    """A pipeline's tool definitions for an LLM (OpenAI and Anthropic formats) and its prompt."""

    pipeline: str
    system_prompt: str
    openai: tuple[dict[str, Any], ...] = ()
    anthropic: tuple[dict[str, Any], ...] = ()
    calls: tuple[dict[str, Any], ...] = ()


def from_json(cls: type[T], body: Any) -> T:
    """Build dataclass `cls` from a JSON object, converting nested values by the type hints."""
    hints = typing.get_type_hints(cls)
    values = {
        field.name: _convert(hints[field.name], body[field.name])
        for field in dataclasses.fields(cls)  # type: ignore[arg-type]  # a dataclass, which T cannot say
        if field.name in body
    }
    return cls(**values)


def _convert(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _convert(members[0], value) if len(members) == 1 else value
    if origin is tuple:
        return tuple(_convert(typing.get_args(hint)[0], item) for item in value)
    if hint is datetime:
        return datetime.fromisoformat(value)
    if hint is str:
        return str(value)  # ids come as UUID strings; keep them strings
    if dataclasses.is_dataclass(hint):
        return from_json(typing.cast(type, hint), value)
    return value
