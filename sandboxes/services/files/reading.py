"""Reading files under /workspace, inside the sandbox as the sandbox user: a slice for the JSON
calls, or a stream of any size, whole or from a byte range. A read needs a running sandbox
and is activity (but for a signed link's: `activity=False`); it changes nothing, so it needs
no lease.

Every read starts with the file's identity (size, modification time, inode): a stream's
headers are made from it (Content-Length, ETag, Last-Modified), and a range read after a
look at the file is refused if the file is not the one looked at (replaced or written to
since), so a resumed download never splices two versions of a file.
"""

import mimetypes
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

from django.conf import settings

from boxyard.errors import N_, Conflict, ContainerGone, InvalidInput, RuntimeFailure
from hosts.engines import runtime_of
from sandboxes import scripts
from sandboxes.guard import require_running
from sandboxes.models import Sandbox
from sandboxes.runtime import ExecResult, agentfiles
from sandboxes.scripts import sh
from sandboxes.services import containers
from sandboxes.services.files.inside import direct, reader, verdict
from sandboxes.services.files.paths import workspace_path

_IDENTITY_LINE_BYTES = 64


@dataclass(frozen=True)
class FileInfo:
    path: str
    size_bytes: int
    modified: int  # seconds since the epoch
    inode: int

    @property
    def identity(self) -> str:
        return f"{self.size_bytes} {self.modified} {self.inode}"

    @property
    def etag(self) -> str:
        return f'"{self.size_bytes:x}-{self.modified:x}-{self.inode:x}"'

    @property
    def content_type(self) -> str:
        guessed, _encoding = mimetypes.guess_type(posixpath.basename(self.path), strict=False)
        return guessed or "application/octet-stream"


@dataclass(frozen=True)
class FileContent:
    data: bytes
    size_bytes: int

    @property
    def truncated(self) -> bool:
        return len(self.data) < self.size_bytes


def read_file(sandbox: Sandbox, path: str, max_bytes: int | None = None) -> FileContent:
    """The first `max_bytes` of a file (the JSON call's read)."""
    limit = _clean_max_bytes(max_bytes)
    info, stream = open_file_stream(sandbox, path, length=limit)
    data = b"".join(stream)
    return FileContent(data=data[:limit], size_bytes=info.size_bytes)


def stat_file(sandbox: Sandbox, path: str, *, activity: bool = True) -> FileInfo:
    """What a stream of the file would carry in its headers."""
    info, body = open_file_stream(sandbox, path, length=0, activity=activity)
    body.close()
    return info


def open_file_stream(
    sandbox: Sandbox,
    path: str,
    *,
    start: int = 0,
    length: int = -1,
    expect: FileInfo | None = None,
    activity: bool = True,
) -> tuple[FileInfo, "FileStream"]:
    """The file's identity and a stream of `length` of its bytes from `start` (-1: to the
    end), read from the sandbox as they are sent, never held whole. With `expect`, a file
    that is no longer that one is refused (409). `activity`: the read moves the sandbox's
    idle deadline."""
    target = workspace_path(path)
    require_running(sandbox, N_("read files"))
    if activity:
        sandbox.record_activity()
    identity = expect.identity if expect else None
    sandbox, connection = direct(sandbox, reader(sandbox))
    if connection is not None:
        header, body = agentfiles.get(connection, target, start, length, identity)
        if not header.get("ok"):
            _refused(agentfiles.refusal(header), target)
        identity = " ".join(str(header.get(key)) for key in ("size", "mtime", "inode"))
        info = _info(target, identity.encode())
        left = max(info.size_bytes - start, 0)
        if header.get("length") != (left if length < 0 else min(length, left)):
            body.close()  # the sandbox's answer, which must agree with itself
            raise RuntimeFailure(
                N_("reading %(path)s gave %(said)r, not its identity", path=target, said=header)
            )
        return info, FileStream(b"", iter(body), body.close)
    argv = [target, str(start), str(length), *([identity] if identity else [])]
    try:
        stream = runtime_of(sandbox).exec_stream(
            sandbox.container_id, sh(scripts.READ, "boxyard-read", *argv)
        )
    except ContainerGone as error:
        raise containers.gone(sandbox, error, reader(sandbox)) from error
    chunks = iter(stream)
    head = b""
    for chunk in chunks:
        head += chunk
        if b"\n" in head or len(head) > _IDENTITY_LINE_BYTES:  # the line is short
            break
    if b"\n" not in head:
        stream.close()
        _refused(
            ExecResult(stream.exit_code(), b"", stream.stderr, 0, len(stream.stderr), 0), target
        )
    line, _, first = head.partition(b"\n")
    return _info(target, line), FileStream(first, chunks, stream.close)


def _refused(result: ExecResult, target: str) -> NoReturn:
    if result.exit_code == scripts.CHANGED:
        raise Conflict(
            N_("%(path)s changed since it was looked at; read it again", path=target),
            code_detail="changed",
        )
    verdict(result, target)
    raise RuntimeFailure(N_("reading %(path)s gave no identity line", path=target))


class FileStream:
    """A file's bytes in the pieces they are read in from the sandbox (at most 256 KiB each,
    below the size from which a block is a fresh mapping of memory: `boxyard.heap`);
    `close()` ends the read early."""

    def __init__(self, first: bytes, chunks: Iterator[bytes], close: Callable[[], None]) -> None:
        self._first = first
        self._chunks = chunks
        self._close = close

    def __iter__(self) -> Iterator[bytes]:
        if self._first:
            yield self._first
        yield from self._chunks

    def close(self) -> None:
        self._close()


def _info(target: str, line: bytes) -> FileInfo:
    try:
        size, modified, inode = (int(field) for field in line.split())
    except ValueError:
        raise RuntimeFailure(
            N_("reading %(path)s gave %(said)r, not its identity", path=target, said=line[:80])
        ) from None
    return FileInfo(path=target, size_bytes=size, modified=modified, inode=inode)


def _clean_max_bytes(max_bytes: int | None) -> int:
    """How much a JSON read carries: the read limit by default, the operator's ceiling
    (BOXYARD_MAX_OUTPUT_BYTES) at most, for every caller."""
    if max_bytes is None:
        return settings.BOXYARD_FILE_READ_BYTES
    if max_bytes < 0:
        raise InvalidInput("max_bytes", N_("must be a non-negative integer"))
    ceiling = settings.BOXYARD_MAX_OUTPUT_BYTES
    if max_bytes > ceiling:
        raise InvalidInput(
            "max_bytes", N_("must be at most %(most)s (BOXYARD_MAX_OUTPUT_BYTES)", most=ceiling)
        )
    return max_bytes
