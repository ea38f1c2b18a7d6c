"""Writing, reading and deleting files under /workspace, inside the sandbox as the sandbox
user. A change needs the lease (the guard); every call is activity; a change is an event."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import ContainerGone, InvalidInput, RuntimeFailure
from sandboxes import events, scripts
from sandboxes.guard import acting_on, require_running
from sandboxes.models import Sandbox
from sandboxes.runtime import ExecResult, get_runtime
from sandboxes.scripts import WORKSPACE, sh
from sandboxes.services import containers
from sandboxes.services.files.inside import reader, run_inside, verdict
from sandboxes.services.files.paths import clean_mode, workspace_path

_SIZE_LINE_BYTES = 32


@dataclass(frozen=True)
class FileContent:
    data: bytes
    size_bytes: int

    @property
    def truncated(self) -> bool:
        return len(self.data) < self.size_bytes


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
    with acting_on(
        sandbox, actor, "change files", holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    counted = _Counter([data] if isinstance(data, bytes) else data)
    argv = sh(scripts.WRITE, "boxyard-write", target, permissions, "1" if overwrite else "0")
    verdict(run_inside(sandbox, argv, actor, stdin=counted), target)
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
    _reading(sandbox)
    result = run_inside(
        sandbox,
        sh(scripts.READ, "boxyard-read", target, str(limit)),
        reader(sandbox),
        output_limit=limit + 32,
    )
    verdict(result, target)
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


def _reading(sandbox: Sandbox) -> None:
    """A read needs a running sandbox, and is activity."""
    require_running(sandbox, "read files")
    sandbox.record_activity()


def open_file_stream(sandbox: Sandbox, path: object) -> tuple[int, Iterator[bytes]]:
    """(size, chunks) of a whole file, streamed from the sandbox without holding it in memory."""
    target = workspace_path(path)
    _reading(sandbox)
    try:
        stream = get_runtime().exec_stream(
            sandbox.container_id, sh(scripts.READ, "boxyard-read", target, "-1")
        )
    except ContainerGone as error:
        raise containers.gone(sandbox, error, reader(sandbox)) from error
    chunks = iter(stream)
    head = b""
    for chunk in chunks:
        head += chunk
        if b"\n" in head or len(head) > _SIZE_LINE_BYTES:  # the size line is short: stop looking
            break
    if b"\n" not in head:
        stream.close()
        code = stream.exit_code()
        verdict(ExecResult(code, b"", stream.stderr, 0, len(stream.stderr), 0), target)
        raise RuntimeFailure(f"reading {target} gave no size line")
    size_line, _, first = head.partition(b"\n")

    def body() -> Iterator[bytes]:
        if first:
            yield first
        yield from chunks

    return int(size_line), body()


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
    with acting_on(
        sandbox, actor, "change files", holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    flag = "1" if recursive else "0"
    result = run_inside(sandbox, sh(scripts.DELETE, "boxyard-delete", target, flag), actor)
    verdict(result, target)
    with transaction.atomic():
        events.record(actor, "file.deleted", sandbox=sandbox, path=target, recursive=recursive)
    return target
