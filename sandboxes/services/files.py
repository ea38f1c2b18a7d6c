"""File operations under /workspace, done inside the sandbox as the sandbox user.

Paths are checked twice: lexically here (`..` and absolute paths elsewhere are refused
before anything runs), and inside the sandbox after resolving symlinks (`scripts.py`), so a
link planted by sandbox code cannot carry a read or a write outside /workspace. Nothing is
ever read or written through the engine's archive API or on the host.
"""

import base64
import binascii
import json
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import (
    BoxyardError,
    Conflict,
    InvalidInput,
    InvalidState,
    NotFound,
    RuntimeFailure,
)
from sandboxes import scripts
from sandboxes.models import Sandbox
from sandboxes.runtime import AGENT_PATH, ContainerGone, ExecResult, get_runtime
from sandboxes.scripts import WORKSPACE, sh
from sandboxes.services import containers, events, leases
from sandboxes.services.execs import require_running

MAX_PATH_LENGTH = 4096
MAX_LIST_ENTRIES = 10_000
_FILE_OP_DEADLINE = 300


class WorkspaceFull(BoxyardError):
    code = "workspace_full"
    status = 507


@dataclass(frozen=True)
class FileContent:
    data: bytes
    size_bytes: int

    @property
    def truncated(self) -> bool:
        return len(self.data) < self.size_bytes


@dataclass(frozen=True)
class FileEntry:
    path: str
    name: str
    type: str  # file, dir, symlink, other
    size: int
    mode: str
    mtime_unix: int


# The kernel's limits, in bytes of the UTF-8 the sandbox sees: one name (NAME_MAX) and a whole
# path with its terminating NUL (PATH_MAX). Past them the sandbox's own tools fail with "File
# name too long"; checked here, the caller learns which field was wrong before anything runs.
NAME_MAX = 255
PATH_MAX = 4096


def workspace_path(path: object, field: str = "path") -> str:
    """The absolute, normalized path for `path`, refusing anything outside /workspace and
    any name or path the kernel would refuse as too long."""
    if not isinstance(path, str) or not path:
        raise InvalidInput(field, "must be a non-empty path")
    if "\x00" in path or len(path) > MAX_PATH_LENGTH:
        raise InvalidInput(field, f"must be at most {MAX_PATH_LENGTH} characters, without NUL")
    normalized = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if normalized != WORKSPACE and not normalized.startswith(WORKSPACE + "/"):
        raise InvalidInput(field, f"{path!r} is outside /workspace")
    try:
        size = len(normalized.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(field, "holds a lone surrogate escape; send valid Unicode") from None
    if size >= PATH_MAX:
        raise InvalidInput(
            field, f"is {size} bytes long as an absolute path; at most {PATH_MAX - 1} bytes (PATH_MAX)"
        )
    for name in normalized.split("/"):
        if len(name.encode("utf-8")) > NAME_MAX:
            raise InvalidInput(
                field,
                f"the name {name[:40]!r}… is {len(name.encode('utf-8'))} bytes; a name may be at "
                f"most {NAME_MAX} bytes (NAME_MAX)",
            )
    return normalized


def clean_mode(mode: object) -> str:
    if mode is None or mode == "":
        return "644"
    if isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode <= 0o7777:
        return format(mode, "o")
    if isinstance(mode, str) and mode.isdigit() and all(ch in "01234567" for ch in mode):
        value = int(mode, 8)
        if value <= 0o777:
            return format(value, "o")
    raise InvalidInput("mode", "must be an octal permission string such as '0644' (at most 0777)")


def decode_contents(contents: object, contents_b64: object) -> bytes:
    if contents is not None and contents_b64 is not None:
        raise InvalidInput("contents", "give contents or contents_b64, not both")
    if contents_b64 is not None:
        if not isinstance(contents_b64, str):
            raise InvalidInput("contents_b64", "must be a base64 string")
        try:
            return base64.b64decode(contents_b64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("contents_b64", "is not valid base64") from None
    if contents is None:
        return b""
    if not isinstance(contents, str):
        raise InvalidInput("contents", "must be a string")
    return contents.encode("utf-8", errors="surrogatepass")


# Base64 is decoded this many characters at a time (a multiple of 4): a file written from
# contents_b64 is never held decoded as a whole beside its text.
_B64_SLICE = 1024 * 1024


def decoded_contents(contents: object, contents_b64: object) -> tuple[int, Iterable[bytes]]:
    """What decode_contents gives, as (size, chunks) decoded as they are written; bad input
    is refused here, before anything is written."""
    if contents is not None or not isinstance(contents_b64, str):
        data = decode_contents(contents, contents_b64)
        return len(data), [data]
    try:
        size = sum(len(chunk) for chunk in _b64_chunks(contents_b64))
    except (binascii.Error, ValueError):
        raise InvalidInput("contents_b64", "is not valid base64") from None
    return size, _b64_chunks(contents_b64)


def _b64_chunks(text: str) -> Iterator[bytes]:
    for start in range(0, len(text), _B64_SLICE):
        piece = text[start : start + _B64_SLICE]
        if start + _B64_SLICE < len(text) and piece.endswith("="):
            raise binascii.Error("padding before the end")
        yield base64.b64decode(piece, validate=True)


def _verdict(result: ExecResult, path: str, *, listing: bool = False) -> None:
    """Turn a file script's exit code into the error it stands for."""
    not_a_directory = path if listing else f"a parent of {path}"
    code = result.exit_code
    if code == 0:
        return
    detail = result.stderr.decode(errors="replace").strip()
    if code == scripts.NOT_FOUND:
        raise NotFound(f"{path} does not exist", field="path")
    if code == scripts.OUTSIDE:
        raise InvalidInput("path", f"{path} resolves outside /workspace (through a symlink)")
    if code == scripts.NOT_REGULAR:
        raise InvalidInput("path", f"{path} is not a regular file")
    if code == scripts.EXISTS:
        raise Conflict(f"{path} exists and overwrite is false", code_detail="exists")
    if code == scripts.IS_DIRECTORY:
        raise InvalidInput("path", f"{path} is a directory")
    if code == scripts.NOT_DIRECTORY:
        raise InvalidInput("path", f"{not_a_directory} is not a directory")
    if code == scripts.NOT_EMPTY:
        raise InvalidInput("recursive", f"{path} is a directory that is not empty; pass recursive")
    if "No space left" in detail or "Disk quota" in detail:
        raise WorkspaceFull(f"no space left writing {path}")
    if "Read-only file system" in detail:
        raise InvalidInput("path", f"{path} is on a read-only mount (a skill?)")
    if "Permission denied" in detail:
        raise InvalidInput("path", f"permission denied on {path}")
    raise RuntimeFailure(f"file operation on {path} failed ({code}): {detail[:500]}")


def _run(sandbox: Sandbox, argv: list[str], actor: Actor, *, stdin: Iterable[bytes] | None = None,
         output_limit: int = 64 * 1024) -> ExecResult:
    try:
        return get_runtime().exec(
            sandbox.container_id,
            argv,
            stdin=stdin,
            output_limit=output_limit,
            deadline_seconds=_FILE_OP_DEADLINE,
        )
    except ContainerGone as error:
        containers.mark_gone(sandbox, error, actor)
        raise _gone(sandbox) from error


def _gone(sandbox: Sandbox) -> InvalidState:
    return InvalidState(
        "the sandbox's container is gone; open the sandbox again to recreate it",
        state=sandbox.state,
    )


def _authorize_change(sandbox: Sandbox, holder: str | None, epoch: int | None, actor: Actor) -> Sandbox:
    """Lock, check state and lease for a mutating file operation; returns the fresh row."""
    sandbox = Sandbox.objects.locked().get(pk=sandbox.pk)
    require_running(sandbox, "change files")
    leases.authorize(sandbox, leases.clean_holder(holder, sandbox), leases.clean_epoch(epoch), actor)
    sandbox.record_activity()
    return sandbox


def _touch(sandbox: Sandbox, operation: str) -> None:
    require_running(sandbox, operation)
    sandbox.record_activity()


def write_file(
    sandbox: Sandbox,
    path: object,
    data: bytes | Iterable[bytes],
    actor: Actor,
    *,
    mode: object = None,
    overwrite: bool = True,
    holder: str | None = None,
    epoch: int | None = None,
) -> str:
    """Write a file (parents created, atomically replaced); returns its absolute path."""
    target = workspace_path(path)
    if target == WORKSPACE:
        raise InvalidInput("path", "names /workspace itself, not a file in it")
    permissions = clean_mode(mode)
    with transaction.atomic():
        sandbox = _authorize_change(sandbox, holder, epoch, actor)
    chunks = [data] if isinstance(data, bytes) else data
    counted = _Counter(chunks)
    argv = sh(scripts.WRITE, "boxyard-write", target, permissions, "1" if overwrite else "0")
    _verdict(_run(sandbox, argv, actor, stdin=counted), target)
    with transaction.atomic():
        events.record(actor, "file.written", sandbox=sandbox, path=target, size=counted.total)
    return target


class _Counter:
    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.total += len(chunk)
            yield chunk


def read_file(sandbox: Sandbox, path: object, max_bytes: object = None) -> FileContent:
    target = workspace_path(path)
    limit = _clean_max_bytes(max_bytes)
    _touch(sandbox, "read files")
    result = _run(
        sandbox, sh(scripts.READ, "boxyard-read", target, str(limit)), _reader(sandbox),
        output_limit=limit + 32,
    )
    _verdict(result, target)
    header, _, data = result.stdout.partition(b"\n")
    try:
        size = int(header)
    except ValueError:
        raise RuntimeFailure(f"reading {target} gave no size line") from None
    return FileContent(data=data[:limit], size_bytes=size)


def _clean_max_bytes(max_bytes: object) -> int:
    if max_bytes is None or max_bytes == "":
        return settings.BOXYARD_FILE_READ_BYTES
    if isinstance(max_bytes, str) and max_bytes.isdigit():
        max_bytes = int(max_bytes)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise InvalidInput("max_bytes", "must be a non-negative integer")
    ceiling = settings.BOXYARD_MAX_OUTPUT_BYTES
    if max_bytes > ceiling:
        raise InvalidInput("max_bytes", f"must be at most {ceiling} (BOXYARD_MAX_OUTPUT_BYTES)")
    return max_bytes


def _reader(sandbox: Sandbox) -> Actor:
    return Actor("system", f"reader:{sandbox.pk}")


_SIZE_LINE_BYTES = 32


def open_file_stream(sandbox: Sandbox, path: object) -> tuple[int, Iterator[bytes]]:
    """(size, chunks) of a whole file, streamed from the sandbox without holding it in memory."""
    target = workspace_path(path)
    _touch(sandbox, "read files")
    try:
        stream = get_runtime().exec_stream(
            sandbox.container_id, sh(scripts.READ, "boxyard-read", target, "-1")
        )
    except ContainerGone as error:
        containers.mark_gone(sandbox, error, _reader(sandbox))
        raise _gone(sandbox) from error
    chunks = iter(stream)
    head = b""
    for chunk in chunks:
        head += chunk
        if b"\n" in head or len(head) > _SIZE_LINE_BYTES:  # the size line is short: stop looking
            break
    if b"\n" not in head:
        stream.close()
        code = stream.exit_code()
        _verdict(ExecResult(code, b"", stream.stderr, 0, len(stream.stderr), 0), target)
        raise RuntimeFailure(f"reading {target} gave no size line")
    size_line, _, first = head.partition(b"\n")

    def body() -> Iterator[bytes]:
        if first:
            yield first
        yield from chunks

    return int(size_line), body()


_TYPES = {
    "regular file": "file",
    "regular empty file": "file",
    "directory": "dir",
    "symbolic link": "symlink",
}
_KINDS = set(_TYPES) | {"fifo", "socket", "character special file", "block special file"}
_AGENT_KINDS = {"file", "dir", "symlink", "other"}
_UNKNOWN_COMMAND = 2  # what an agent older than `list` answers


def list_files(sandbox: Sandbox, path: object = None, recursive: object = False) -> tuple[list[FileEntry], bool]:
    """Entries under a directory, and whether the list was cut at MAX_LIST_ENTRIES.

    Listed inside the sandbox as the sandbox user, in a structured encoding (JSON from the
    agent, NUL-separated records from the shell), so that no file name, whatever bytes it
    holds, can pose as another entry."""
    target = workspace_path(path or WORKSPACE)
    if not isinstance(recursive, bool):
        raise InvalidInput("recursive", "must be true or false")
    _touch(sandbox, "list files")
    flag = "1" if recursive else "0"
    limit = MAX_LIST_ENTRIES * 1024
    result = None
    if sandbox.agent:
        result = _run(
            sandbox, [AGENT_PATH, "list", target, flag, str(MAX_LIST_ENTRIES)], _reader(sandbox),
            output_limit=limit,
        )
        if result.exit_code == _UNKNOWN_COMMAND:
            result = None
    if result is None:
        result = _run(sandbox, sh(scripts.LIST, "boxyard-list", target, flag), _reader(sandbox),
                      output_limit=limit)
        _verdict(result, target, listing=True)
        entries = _parse_records(result.stdout)
    else:
        _verdict(result, target, listing=True)
        entries = _parse_json_lines(result.stdout)
    truncated = result.stdout_truncated or len(entries) > MAX_LIST_ENTRIES
    entries.sort(key=lambda entry: entry.path)
    return entries[:MAX_LIST_ENTRIES], truncated


def _entry(path: str, kind: str, size: object, mode: object, mtime: object) -> FileEntry:
    return FileEntry(
        path=path,
        name=posixpath.basename(path),
        type=kind,
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
        mode=mode if isinstance(mode, str) and len(mode) <= 5 and mode.isdigit() else "0000",
        mtime_unix=mtime if isinstance(mtime, int) and not isinstance(mtime, bool) else 0,
    )


def _inside(path: str) -> bool:
    return path.startswith(WORKSPACE + "/")


def _parse_json_lines(data: bytes) -> list[FileEntry]:
    """`boxyard-agent list`: one JSON object per entry. A line cut by the output limit, or
    anything that is not an entry, is left out."""
    entries: list[FileEntry] = []
    for line in data.split(b"\n"):
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict) or item.get("type") not in _AGENT_KINDS:
            continue
        path = item.get("path")
        if path is None and isinstance(item.get("path_b64"), str):
            try:
                path = base64.b64decode(item["path_b64"]).decode("utf-8", errors="surrogateescape")
            except ValueError:
                continue
        if isinstance(path, str) and _inside(path):
            entries.append(_entry(path, item["type"], item.get("size"), item.get("mode"), item.get("mtime")))
    return entries


def _parse_records(data: bytes) -> list[FileEntry]:
    """The shell's listing: per entry "type|size|mode|mtime|", a line break, the path, a NUL.
    The last record, cut by the output limit, has no NUL and is left out."""
    entries: list[FileEntry] = []
    for record in data.split(b"\0")[:-1]:
        header, newline, raw_path = record.partition(b"\n")
        fields = header.decode("utf-8", errors="replace").split("|")
        path = raw_path.decode("utf-8", errors="surrogateescape")
        if not newline or len(fields) != 5 or fields[0] not in _KINDS or not _inside(path):
            continue
        kind, size, mode, mtime, _ = fields
        entries.append(
            _entry(
                path, _TYPES.get(kind, "other"), int(size) if size.isdigit() else 0, mode.zfill(4),
                int(mtime) if mtime.lstrip("-").isdigit() else 0,
            )
        )
    return entries


def delete_file(
    sandbox: Sandbox,
    path: object,
    actor: Actor,
    *,
    recursive: object = False,
    holder: str | None = None,
    epoch: int | None = None,
) -> str:
    target = workspace_path(path)
    if target == WORKSPACE:
        raise InvalidInput("path", "cannot delete /workspace itself")
    if not isinstance(recursive, bool):
        raise InvalidInput("recursive", "must be true or false")
    with transaction.atomic():
        sandbox = _authorize_change(sandbox, holder, epoch, actor)
    result = _run(sandbox, sh(scripts.DELETE, "boxyard-delete", target, "1" if recursive else "0"), actor)
    _verdict(result, target)
    with transaction.atomic():
        events.record(actor, "file.deleted", sandbox=sandbox, path=target, recursive=recursive)
    return target
