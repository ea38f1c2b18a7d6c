"""`filesystem.Filesystem`: the workspace's files as envd shows them, each call the matching
file service (`list_files`, `make_dir`, `move_file`, `delete_file`), paths under `/home/user`
(see `paths.py`).

A stat is a listing of the entry's directory. A watch compares listings of the watched
directory, a second apart: what appeared is CREATE, what changed size or time WRITE, what went
REMOVE (a rename is a REMOVE and a CREATE). `WatchDir` streams them, one of the pipeline's
long calls while it is open; the polling watchers (`CreateWatcher`, `GetWatcherEvents`,
`RemoveWatcher`) keep the last listing in this process between calls, so a watcher is found
only by the web process that made it (another says so: FAILED_PRECONDITION). One pipeline
holds at most BOXYARD_E2B_WATCHERS_PER_PIPELINE of them here (429 past it), and a watcher
nobody has read for WATCHER_IDLE_SECONDS lapses.
"""

import asyncio
import posixpath
import secrets
import stat
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from django.conf import settings

from boxyard.slots import Held, Slots
from boxyard.threads import in_pool
from sandboxes import services
from sandboxes.e2b.envd import paths
from sandboxes.e2b.envd.calls import Call, until_gone
from sandboxes.e2b.envd.connect import (
    ConnectError,
    Message,
    Stream,
    invalid,
    read_request,
    send_unary,
)
from sandboxes.scripts import WORKSPACE
from sandboxes.services.files import FileEntry
from sandboxes.services.shares import long_call

WATCH_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
WATCHER_IDLE_SECONDS = 600.0
# The polling watchers one pipeline may hold in this web process.
WATCHERS = Slots(
    "directory watchers", lambda: settings.BOXYARD_E2B_WATCHERS_PER_PIPELINE, retry_after=5
)
_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}
_KINDS = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}


def _path(request: Message, field: str = "path") -> str:
    value = request.get(field)
    if not isinstance(value, str) or not value:
        raise invalid(field, "must be a non-empty path")
    return paths.to_workspace(value)


def entry_info(entry: FileEntry) -> Message:
    mode = int(entry.mode, 8) if entry.mode.isdigit() else 0
    info: Message = {
        "name": entry.name,
        "type": _TYPES.get(entry.type, "FILE_TYPE_UNSPECIFIED"),
        "path": paths.to_home(entry.path),
        "size": str(entry.size),
        "mode": mode,
        "permissions": stat.filemode(_KINDS.get(entry.type, 0) | mode),
        "owner": paths.USER,
        "group": paths.USER,
        "modifiedTime": datetime.fromtimestamp(entry.mtime_unix, UTC)
        .isoformat()
        .replace("+00:00", "Z"),
    }
    if entry.type == "symlink":
        info["isSymlink"] = True
    return info


def _home_entry() -> FileEntry:
    return FileEntry(WORKSPACE, "user", "dir", 0, "755", 0)


def stat_entry(call: Call, target: str) -> FileEntry:
    """The entry at `target` (NOT_FOUND when nothing is there)."""
    services.workspace_path(target)
    if target == WORKSPACE:
        return _home_entry()
    entries, _ = services.list_files(call.sandbox, posixpath.dirname(target))
    for entry in entries:
        if entry.path == target:
            return entry
    raise ConnectError("not_found", f"{paths.to_home(target)} does not exist")


async def stat_call(call: Call) -> None:
    target = _path(await read_request(call.scope, call.receive))
    entry = await in_pool(stat_entry, call, target)
    await send_unary(call.send, {"entry": entry_info(entry)})


def _listing(call: Call, target: str, depth: int) -> list[FileEntry]:
    entries, _ = services.list_files(call.sandbox, target, depth > 1)
    return [entry for entry in entries if _depth(target, entry.path) <= depth]


def _depth(top: str, path: str) -> int:
    return posixpath.relpath(path, top).count("/") + 1


async def list_dir(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    target = _path(request)
    depth = request.get("depth") or 1
    if not isinstance(depth, int) or depth < 1:
        raise invalid("depth", "must be a number of levels, at least 1")
    entries = await in_pool(_listing, call, target, depth)
    await send_unary(call.send, {"entries": [entry_info(entry) for entry in entries]})


def _make_dir(call: Call, target: str) -> FileEntry:
    if not services.make_dir(call.sandbox, target, call.actor):
        raise ConnectError("already_exists", f"{paths.to_home(target)} exists already")
    return stat_entry(call, target)


async def make_dir(call: Call) -> None:
    target = _path(await read_request(call.scope, call.receive))
    entry = await in_pool(_make_dir, call, target)
    await send_unary(call.send, {"entry": entry_info(entry)})


def _move(call: Call, source: str, destination: str) -> FileEntry:
    moved = services.move_file(call.sandbox, source, destination, call.actor)
    return stat_entry(call, moved)


async def move(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    source, destination = _path(request, "source"), _path(request, "destination")
    entry = await in_pool(_move, call, source, destination)
    await send_unary(call.send, {"entry": entry_info(entry)})


async def remove(call: Call) -> None:
    target = _path(await read_request(call.scope, call.receive))
    await in_pool(services.delete_file, call.sandbox, target, call.actor, recursive=True)
    await send_unary(call.send, {})


# --- watching ---------------------------------------------------------------------------------

Snapshot = dict[str, tuple[int, int, str]]


def _snapshot(call: Call, target: str, recursive: bool) -> Snapshot:
    entries, _ = services.list_files(call.sandbox, target, recursive)
    return {entry.path: (entry.size, entry.mtime_unix, entry.type) for entry in entries}


def _changes(top: str, before: Snapshot, after: Snapshot) -> list[Message]:
    events = []
    for path in sorted(after.keys() - before.keys()):
        events.append(_fs_event(top, path, "EVENT_TYPE_CREATE"))
    for path in sorted(after.keys() & before.keys()):
        if after[path] != before[path] and after[path][2] != "dir":
            events.append(_fs_event(top, path, "EVENT_TYPE_WRITE"))
    for path in sorted(before.keys() - after.keys()):
        events.append(_fs_event(top, path, "EVENT_TYPE_REMOVE"))
    return events


def _fs_event(top: str, path: str, kind: str) -> Message:
    return {"name": posixpath.relpath(path, top), "type": kind}


def _watched(request: Message) -> tuple[str, bool]:
    recursive = request.get("recursive", False)
    if not isinstance(recursive, bool):
        raise invalid("recursive", "must be true or false")
    return _path(request), recursive


async def watch_dir(call: Call) -> None:
    target, recursive = _watched(await read_request(call.scope, call.receive))
    with long_call(call.sandbox.pipeline_id):
        await _watch_dir(call, target, recursive)


async def _watch_dir(call: Call, target: str, recursive: bool) -> None:
    before = await in_pool(_snapshot, call, target, recursive)
    stream = Stream(call.send)
    await stream.message({"start": {}})

    async def watch() -> None:
        nonlocal before
        quiet = 0.0
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            after = await in_pool(_snapshot, call, target, recursive)
            events = _changes(target, before, after)
            before = after
            for event in events:
                await stream.message({"filesystem": event})
            quiet = 0.0 if events else quiet + WATCH_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                await stream.message({"keepalive": {}})
                quiet = 0.0

    await stream.run(until_gone(call, watch()))


@dataclass
class _Watcher:
    sandbox: UUID
    target: str
    recursive: bool
    seen: Snapshot
    held: Held
    read_at: float


_WATCHERS: dict[str, _Watcher] = {}
_watchers_lock = threading.Lock()


def _drop(watcher_id: str) -> None:
    with _watchers_lock:
        watcher = _WATCHERS.pop(watcher_id, None)
    if watcher is not None:
        watcher.held.release()


def _lapse() -> None:
    """Drop the watchers nobody has read for WATCHER_IDLE_SECONDS."""
    now = time.monotonic()
    with _watchers_lock:
        idle = [key for key, w in _WATCHERS.items() if now - w.read_at > WATCHER_IDLE_SECONDS]
    for key in idle:
        _drop(key)


def _create_watcher(call: Call, target: str, recursive: bool) -> str:
    _lapse()
    held = WATCHERS.take(f"pipeline:{call.sandbox.pipeline_id}")
    try:
        seen = _snapshot(call, target, recursive)
    except BaseException:
        held.release()
        raise
    watcher_id = secrets.token_hex(12)
    with _watchers_lock:
        _WATCHERS[watcher_id] = _Watcher(
            call.sandbox.pk, target, recursive, seen, held, time.monotonic()
        )
    return watcher_id


async def create_watcher(call: Call) -> None:
    target, recursive = _watched(await read_request(call.scope, call.receive))
    watcher_id = await in_pool(_create_watcher, call, target, recursive)
    await send_unary(call.send, {"watcherId": watcher_id})


def _watcher(call: Call, request: Message) -> tuple[str, _Watcher]:
    watcher_id = request.get("watcherId", request.get("watcher_id"))
    if not isinstance(watcher_id, str) or not watcher_id:
        raise invalid("watcherId", "name the watcher CreateWatcher gave")
    with _watchers_lock:
        watcher = _WATCHERS.get(watcher_id)
    if watcher is None or watcher.sandbox != call.sandbox.pk:
        raise ConnectError(
            "failed_precondition",
            f"no watcher {watcher_id} in this web process: a watcher lives in the web process "
            "that made it (route a sandbox's calls to one web process, by its E2b-Sandbox-Id), "
            f"was removed, or lapsed after {WATCHER_IDLE_SECONDS:.0f} s unread",
        )
    return watcher_id, watcher


def _watcher_events(call: Call, request: Message) -> list[Message]:
    _, watcher = _watcher(call, request)
    after = _snapshot(call, watcher.target, watcher.recursive)
    events = _changes(watcher.target, watcher.seen, after)
    watcher.seen, watcher.read_at = after, time.monotonic()
    return events


async def get_watcher_events(call: Call) -> None:
    request = await read_request(call.scope, call.receive)
    events = await in_pool(_watcher_events, call, request)
    await send_unary(call.send, {"events": events})


async def remove_watcher(call: Call) -> None:
    watcher_id, _ = _watcher(call, await read_request(call.scope, call.receive))
    _drop(watcher_id)
    await send_unary(call.send, {})


METHODS = {
    "Stat": stat_call,
    "ListDir": list_dir,
    "MakeDir": make_dir,
    "Move": move,
    "Remove": remove,
    "WatchDir": watch_dir,
    "CreateWatcher": create_watcher,
    "GetWatcherEvents": get_watcher_events,
    "RemoveWatcher": remove_watcher,
}
