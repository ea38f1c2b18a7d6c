"""Listing a directory of the workspace, inside the sandbox as the sandbox user, in a
structured encoding (JSON lines from the agent's `list`), so that no file name, whatever
bytes it holds, can pose as another entry."""

import base64
import json
import posixpath
from dataclasses import dataclass
from typing import Any

from boxyard.errors import N_
from sandboxes.guard import require_running
from sandboxes.models import Sandbox
from sandboxes.runtime import AGENT_PATH, answers
from sandboxes.scripts import WORKSPACE
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


_AGENT_KINDS = {"file", "dir", "symlink", "other"}


def list_files(
    sandbox: Sandbox, path: str = WORKSPACE, recursive: bool = False
) -> tuple[list[FileEntry], bool]:
    """Entries under a directory, and whether the list was cut at MAX_LIST_ENTRIES.

    Listed inside the sandbox as the sandbox user by the agent's `list`, in JSON lines, so
    that no file name, whatever bytes it holds, can pose as another entry."""
    target = workspace_path(path)
    require_running(sandbox, N_("list files"))
    sandbox.record_activity()
    flag = "1" if recursive else "0"
    limit = MAX_LIST_ENTRIES * 1024
    result = run_inside(
        sandbox,
        [AGENT_PATH, "list", target, flag, str(MAX_LIST_ENTRIES)],
        reader(sandbox),
        output_limit=limit,
    )
    verdict(result, target, listing=True)
    entries = _parse_json_lines(result.stdout)
    truncated = result.stdout_truncated or len(entries) > MAX_LIST_ENTRIES
    entries.sort(key=lambda entry: entry.path)
    return entries[:MAX_LIST_ENTRIES], truncated


def _entry(path: str, item: dict[str, Any]) -> FileEntry:
    """An entry as the agent's JSON line says it; a value of the wrong shape reads as empty
    (the sandbox's code may have planted anything in a name or a line)."""
    mode = item.get("mode")
    return FileEntry(
        path=path,
        name=posixpath.basename(path),
        type=item["type"],
        size=answers.count(item.get("size")),
        mode=mode if isinstance(mode, str) and len(mode) <= 5 and mode.isdigit() else "0000",
        mtime_unix=answers.optional_int(item.get("mtime")) or 0,
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
            entries.append(_entry(path, item))
    return entries
