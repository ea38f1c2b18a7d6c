"""Directories as archives, both ways: a directory under /workspace streamed out as tar,
tar.gz or zip, and an uploaded archive extracted into one.

Both run in the sandbox as the sandbox user (`boxyard-agent archive` and `extract`), so a
hostile archive is parsed within the sandbox's own CPU, memory and disk limits, never in
Boxyard's process. An extraction happens in a directory of its own beside its destination and
moves into place only once every entry has passed; a refused archive (an absolute name, "..",
also with "\\" in a zip, a link out, a device, a FIFO, too many entries or bytes, a truncated
stream, a full disk) leaves nothing behind, not even the directory made for it, and the refusal
names the entry. The archive is read to its end and checked there: a tar without its end blocks
or with data after them, a gzip stream without its trailer, with a wrong CRC or with data after
it, a zip with data after it are refused as "(archive)".
"""

import json
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, ContainerGone, InvalidInput, RuntimeFailure, UploadIncomplete
from hosts.engines import runtime_of
from sandboxes import events, scripts
from sandboxes.guard import acting_on, require_running
from sandboxes.models import Sandbox
from sandboxes.runtime import AGENT_PATH, ExecResult
from sandboxes.scripts import WORKSPACE
from sandboxes.services import containers
from sandboxes.services.files.inside import Fed, deadline_for, reader, run_inside, verdict
from sandboxes.services.files.paths import workspace_path
from sandboxes.services.files.reading import FileStream

ArchiveFormat = Literal["tar", "tar.gz", "zip"]
# format: (content type, file name suffix)
FORMATS: dict[ArchiveFormat, tuple[str, str]] = {
    "tar": ("application/x-tar", ".tar"),
    "tar.gz": ("application/gzip", ".tar.gz"),
    "zip": ("application/zip", ".zip"),
}


@dataclass(frozen=True)
class Archive:
    """A directory on its way out: what to call it, its type, and its bytes."""

    filename: str
    content_type: str
    stream: FileStream


@dataclass(frozen=True)
class Extracted:
    path: str
    entries: int
    size_bytes: int


def open_archive(
    sandbox: Sandbox, path: str = WORKSPACE, format: ArchiveFormat = "tar.gz"
) -> Archive:
    """A directory as an archive, streamed from the sandbox as it is made."""
    target = workspace_path(path)
    require_running(sandbox, N_("read files"))
    sandbox.record_activity()
    try:
        stream = runtime_of(sandbox).exec_stream(
            sandbox.container_id, [AGENT_PATH, "archive", target, format]
        )
    except ContainerGone as error:
        raise containers.gone(sandbox, error, reader(sandbox)) from error
    chunks = iter(stream)
    first = next(chunks, b"")
    if not first:  # an archive has bytes even when empty: this one failed before its first
        stream.close()
        code = stream.exit_code()
        verdict(
            ExecResult(code, b"", stream.stderr, 0, len(stream.stderr), 0), target, listing=True
        )
        raise RuntimeFailure(
            N_(
                "archiving %(path)s gave nothing: %(said)r",
                path=target,
                said=stream.stderr[-300:],
            )
        )
    name = posixpath.basename(target) or "workspace"
    content_type, suffix = FORMATS[format]
    return Archive(name + suffix, content_type, FileStream(first, chunks, stream.close))


def extract_archive(
    sandbox: Sandbox,
    path: str,
    data: Iterable[bytes],
    actor: Actor,
    *,
    size: int,
    format: ArchiveFormat = "tar.gz",
    holder: str | None = None,
    epoch: int | None = None,
) -> Extracted:
    """Extract an archive of `size` bytes into the directory `path` (made if missing)."""
    target = workspace_path(path)
    with acting_on(
        sandbox, actor, N_("change files"), holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    most_bytes = settings.BOXYARD_ARCHIVE_MAX_BYTES
    if sandbox.workspace_limit_bytes is not None:
        most_bytes = min(most_bytes, sandbox.workspace_limit_bytes)
    argv = [
        AGENT_PATH,
        "extract",
        target,
        format,
        str(settings.BOXYARD_ARCHIVE_MAX_ENTRIES),
        str(most_bytes),
    ]
    fed = Fed(data, size)
    result = run_inside(sandbox, argv, actor, stdin=fed, deadline_seconds=deadline_for(size))
    if fed.ended_early:
        fed.complete()
        raise UploadIncomplete(
            N_("the body ended after %(count)s of %(size)s bytes", count=fed.total, size=size)
        )
    if result.exit_code == scripts.REFUSED:
        refused = _answer(result)
        entry = str(refused.get("entry", "?"))
        raise InvalidInput("archive", f"{entry} {refused.get('reason', 'is refused')}", entry=entry)
    verdict(result, target, listing=True)
    summary = _answer(result)
    extracted = Extracted(
        path=target, entries=int(summary.get("entries", 0)), size_bytes=int(summary.get("bytes", 0))
    )
    with transaction.atomic():
        events.record(
            actor,
            "files.extracted",
            sandbox=sandbox,
            path=target,
            format=format,
            entries=extracted.entries,
            size=extracted.size_bytes,
        )
    return extracted


def _answer(result: ExecResult) -> dict[str, Any]:
    try:
        answer = json.loads(result.stdout.decode(errors="replace").strip() or "{}")
    except ValueError:
        raise RuntimeFailure(
            N_("the archive's extraction answered %(said)r", said=result.stdout[:200])
        ) from None
    if not isinstance(answer, dict):
        raise RuntimeFailure(
            N_("the archive's extraction answered %(said)r", said=result.stdout[:200])
        )
    return answer
