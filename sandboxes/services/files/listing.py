"""Listing a directory of the workspace, inside the sandbox as the sandbox user, in a
structured encoding (JSON lines from the agent, NUL-separated records from the shell), so
that no file name, whatever bytes it holds, can pose as another entry."""

import base64
import json
import posixpath
from dataclasses import dataclass

from boxyard.errors import N_, InvalidInput
from sandboxes import scripts
from sandboxes.guard import require_running
from sandboxes.models import Sandbox
from sandboxes.runtime import AGENT_PATH
from sandboxes.scripts import WORKSPACE, sh
from sandboxes.services.files.inside import reader, run_inside, verdict
from sandboxes.services.files.paths import workspace_path

MAX_LIST_ENTRIES = 10_000


@dataclass(frozen=True)
class FileEntry:
    path: str
    name: str
    type: str  # file, dir, symlink, other
    size: int
    mode: str
    mtime_unix: int


_TYPES = {
    "regular file": "file",
    "regular empty file": "file",
    "directory": "dir",
    "symbolic link": "symlink",
}
_KINDS = set(_TYPES) | {"fifo", "socket", "character special file", "block special file"}
_AGENT_KINDS = {"file", "dir", "symlink", "other"}
_UNKNOWN_COMMAND = 2  # what an agent older than `list` answers


def list_files(
    sandbox: Sandbox, path: object = None, recursive: object = False
) -> tuple[list[FileEntry], bool]:
    """Entries under a directory, and whether the list was cut at MAX_LIST_ENTRIES.

    Listed inside the sandbox as the sandbox user, in a structured encoding (JSON from the
    agent, NUL-separated records from the shell), so that no file name, whatever bytes it
    holds, can pose as another entry."""
    target = workspace_path(path or WORKSPACE)
    if not isinstance(recursive, bool):
        raise InvalidInput("recursive", N_("must be true or false"))
    require_running(sandbox, N_("list files"))
    sandbox.record_activity()
    flag = "1" if recursive else "0"
    limit = MAX_LIST_ENTRIES * 1024
    result = None
    if sandbox.agent:
        result = run_inside(
            sandbox,
            [AGENT_PATH, "list", target, flag, str(MAX_LIST_ENTRIES)],
            reader(sandbox),
            output_limit=limit,
        )
        if result.exit_code == _UNKNOWN_COMMAND:
            result = None
    if result is None:
        result = run_inside(
            sandbox,
            sh(scripts.LIST, "boxyard-list", target, flag),
            reader(sandbox),
            output_limit=limit,
        )
        verdict(result, target, listing=True)
        entries = _parse_records(result.stdout)
    else:
        verdict(result, target, listing=True)
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
            entries.append(
                _entry(path, item["type"], item.get("size"), item.get("mode"), item.get("mtime"))
            )
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
                path,
                _TYPES.get(kind, "other"),
                int(size) if size.isdigit() else 0,
                mode.zfill(4),
                int(mtime) if mtime.lstrip("-").isdigit() else 0,
            )
        )
    return entries
