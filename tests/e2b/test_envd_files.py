"""The E2B SDK's files, unchanged, on a Boxyard sandbox through `/e2b/sandbox`: `/home/user`
is the workspace, every call is Boxyard's file service, and a 64 MiB file streams both ways
within the workspace's quota."""

import asyncio
import hashlib
import io

import httpx
import pytest
from e2b import FileType
from e2b import Sandbox as E2BSandbox
from e2b.exceptions import NotEnoughSpaceException
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

from sandboxes.e2b.common import envd_token
from sandboxes.models import Event
from tests.conftest import until, wait_for
from tests.e2b.envd import async_envd
from tests.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

MIB = 1024 * 1024


def test_text_and_bytes_at_home_are_the_workspaces_files(sandbox: E2BSandbox) -> None:
    info = sandbox.files.write("/home/user/notes/a.txt", "hello")
    assert (info.name, info.path) == ("a.txt", "/home/user/notes/a.txt")
    assert sandbox.files.read("notes/a.txt") == "hello"
    sandbox.files.write("b.bin", b"\x00\xff\x10")
    assert bytes(sandbox.files.read("/home/user/b.bin", format="bytes")) == b"\x00\xff\x10"
    # The workspace's own file, as a command sees it, under either name.
    run = sandbox.commands.run("cat /workspace/notes/a.txt; cat notes/a.txt")
    assert run.stdout == "hellohello"
    written = Event.objects.filter(sandbox_id=sandbox.sandbox_id, action="file.written")
    assert {event.detail["path"] for event in written} >= {"/workspace/notes/a.txt"}


def test_several_files_at_once_listed_with_depth(sandbox: E2BSandbox) -> None:
    infos = sandbox.files.write_files(
        [
            {"path": "/home/user/src/a.py", "data": "print(1)"},
            {"path": "src/pkg/b.py", "data": b"print(2)"},
            {"path": "top.txt", "data": io.BytesIO(b"top")},
        ]
    )
    assert [info.path for info in infos] == [
        "/home/user/src/a.py",
        "/home/user/src/pkg/b.py",
        "/home/user/top.txt",
    ]
    shallow = {entry.path: entry for entry in sandbox.files.list("/home/user/src")}
    assert set(shallow) == {"/home/user/src/a.py", "/home/user/src/pkg"}
    assert shallow["/home/user/src/pkg"].type == FileType.DIR
    assert shallow["/home/user/src/a.py"].size == 8
    deep = {entry.path for entry in sandbox.files.list("/home/user/src", depth=2)}
    assert deep == {"/home/user/src/a.py", "/home/user/src/pkg", "/home/user/src/pkg/b.py"}
    info = sandbox.files.get_info("/home/user/top.txt")
    assert (info.type, info.size, info.path) == (FileType.FILE, 3, "/home/user/top.txt")


def test_make_dir_rename_remove_exists(sandbox: E2BSandbox) -> None:
    assert sandbox.files.make_dir("/home/user/d/e") is True
    assert sandbox.files.make_dir("d/e") is False  # there already: the SDK's False
    assert sandbox.files.get_info("d").type == FileType.DIR
    sandbox.files.write("d/e/f.txt", "x")
    moved = sandbox.files.rename("d/e/f.txt", "/home/user/g.txt")
    assert moved.path == "/home/user/g.txt"
    assert not sandbox.files.exists("d/e/f.txt")
    assert sandbox.files.exists("g.txt") and sandbox.files.read("g.txt") == "x"
    sandbox.files.remove("/home/user/d")
    assert not sandbox.files.exists("d")
    assert sandbox.commands.run("ls /workspace").stdout.split() == ["g.txt"]


def test_64_mib_stream_both_ways_and_the_quota_refuses(sandbox: E2BSandbox) -> None:
    block = hashlib.sha256(b"seed").digest() * (MIB // 32)
    data = block * 64
    sandbox.files.write("big.bin", io.BytesIO(data))
    hashed = hashlib.sha256()
    size = 0
    for piece in sandbox.files.read("big.bin", format="stream"):
        hashed.update(piece)
        size += len(piece)
    assert (size, hashed.hexdigest()) == (64 * MIB, hashlib.sha256(data).hexdigest())
    # Past the workspace's 256 MiB: refused before its first byte, nothing left behind.
    with pytest.raises(NotEnoughSpaceException):
        sandbox.files.write("huge.bin", io.BytesIO(block * 300))
    assert not sandbox.files.exists("huge.bin")


def test_watch_dir_sees_creates_writes_and_removes(sandbox: E2BSandbox) -> None:
    sandbox.files.make_dir("w")
    handle = sandbox.files.watch_dir("/home/user/w", recursive=True)
    try:
        sandbox.files.write("w/new.txt", "1")
        seen: list[tuple[str, FilesystemEventType]] = []

        def has(name: str, kind: FilesystemEventType) -> bool:
            seen.extend((event.name, event.type) for event in handle.get_new_events())
            return (name, kind) in seen

        wait_for(lambda: has("new.txt", FilesystemEventType.CREATE), 20, lambda: str(seen))
        sandbox.files.remove("w/new.txt")
        wait_for(lambda: has("new.txt", FilesystemEventType.REMOVE), 20, lambda: str(seen))
    finally:
        handle.stop()


def test_a_raw_body_is_one_file_and_a_body_without_its_size_is_refused(
    server: Server, sandbox: E2BSandbox
) -> None:
    headers = {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "X-Access-Token": envd_token(sandbox.sandbox_id),
        "Content-Type": "application/octet-stream",
    }
    url = f"{server.url}/e2b/sandbox/files"
    raw = httpx.post(url, params={"path": "raw/one.bin"}, content=b"abc", headers=headers)
    assert raw.status_code == 200, raw.text
    assert raw.json() == [{"name": "one.bin", "type": "file", "path": "/home/user/raw/one.bin"}]
    assert sandbox.files.read("raw/one.bin") == "abc"
    chunked = httpx.post(
        url, params={"path": "raw/two.bin"}, content=iter([b"a", b"b"]), headers=headers
    )
    assert chunked.status_code == 411 and chunked.json()["code"] == 411
    assert not sandbox.files.exists("raw/two.bin")
    nameless = httpx.post(url, content=b"abc", headers=headers)
    assert nameless.status_code == 400 and "path" in nameless.json()["message"]


def test_the_async_sdk_watches_by_a_stream_and_runs_commands(
    server: Server, sandbox: E2BSandbox
) -> None:
    async def scenario() -> None:
        sdk = async_envd(server, sandbox.sandbox_id)
        await sdk.files.make_dir("/home/user/live")
        seen: list[tuple[str, FilesystemEventType]] = []
        handle = await sdk.files.watch_dir(
            "/home/user/live", on_event=lambda e: seen.append((e.name, e.type))
        )
        try:
            await sdk.files.write("live/a.txt", "1")
            await until(lambda: ("a.txt", FilesystemEventType.CREATE) in seen, 20)
        finally:
            await handle.stop()
        result = await sdk.commands.run("cat live/a.txt; pwd")
        assert result.stdout == "1/home/user\n"

    asyncio.run(scenario())
