"""File operations against the real engine, including escape attempts: each test runs with a
file's bytes over the agent's own socket (the default where Boxyard runs beside the engine)
and through the engine's execs (elsewhere, or with BOXYARD_AGENT_DIRECT off)."""

import base64
import hashlib
import os

import pytest

from boxyard.errors import Conflict, InvalidInput, LeaseBusy, NotFound
from hosts.engines import get_runtime
from sandboxes import services
from sandboxes.models import Event
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture(params=["agent socket", "engine exec"])
def sandbox(request, pipeline, bot, docker_engine, settings):
    settings.BOXYARD_AGENT_DIRECT = request.param == "agent socket"
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def sh(sandbox, bot, cmd):
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), bot)


def test_write_read_roundtrip_with_parents_and_mode(sandbox, bot) -> None:
    data = "print('hé')\n".encode()
    written = services.write_file(sandbox, "src/app/main.py", data, bot, mode="0755")
    assert written.path == "/workspace/src/app/main.py"
    assert (written.size_bytes, written.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    content = services.read_file(sandbox, "/workspace/src/app/main.py")
    assert (
        content.data == "print('hé')\n".encode()
        and content.size_bytes == 13
        and not content.truncated
    )
    assert sh(sandbox, bot, "stat -c %a src/app/main.py; id -u").stdout == "755\n10001\n"
    assert Event.objects.filter(action="file.written", detail__path=written.path).exists()


def test_binary_contents_and_base64(sandbox, bot) -> None:
    blob = bytes(range(256)) * 4
    data = services.files.decode_contents(None, base64.b64encode(blob).decode())
    services.write_file(sandbox, "blob.bin", data, bot)
    assert services.read_file(sandbox, "blob.bin").data == blob
    with pytest.raises(InvalidInput, match="contents_b64"):
        services.files.decode_contents(None, "not base64!!")


def test_read_with_max_bytes_reports_truncation(sandbox, bot) -> None:
    services.write_file(sandbox, "big.txt", b"x" * 5000, bot)
    content = services.read_file(sandbox, "big.txt", max_bytes=100)
    assert (len(content.data), content.size_bytes, content.truncated) == (100, 5000, True)


def test_overwrite_false_refuses_an_existing_file(sandbox, bot) -> None:
    services.write_file(sandbox, "a.txt", b"one", bot)
    with pytest.raises(Conflict, match="exists"):
        services.write_file(sandbox, "a.txt", b"two", bot, overwrite=False)
    services.write_file(sandbox, "a.txt", b"two", bot, overwrite=True)
    assert services.read_file(sandbox, "a.txt").data == b"two"


def test_list_plain_and_recursive(sandbox, bot) -> None:
    services.write_file(sandbox, "top.txt", b"12345", bot)
    services.write_file(sandbox, "dir/inner.txt", b"1", bot)
    sh(sandbox, bot, "ln -s top.txt link")
    entries, truncated = services.list_files(sandbox)
    assert not truncated
    by_path = {e.path: e for e in entries}
    assert set(by_path) == {"/workspace/top.txt", "/workspace/dir", "/workspace/link"}
    assert (by_path["/workspace/top.txt"].type, by_path["/workspace/top.txt"].size) == ("file", 5)
    assert by_path["/workspace/dir"].type == "dir"
    assert by_path["/workspace/link"].type == "symlink"
    assert (
        by_path["/workspace/top.txt"].mode == "0644"
        and by_path["/workspace/top.txt"].mtime_unix > 0
    )
    recursive, _ = services.list_files(sandbox, "/workspace", recursive=True)
    assert "/workspace/dir/inner.txt" in {e.path for e in recursive}


def test_names_with_spaces_and_line_breaks_are_listed_whole(sandbox, bot) -> None:
    sh(sandbox, bot, "touch 'with space' \"$(printf 'line\\nbreak')\"")
    names = {e.name for e in services.list_files(sandbox)[0]}
    assert names == {"with space", "line\nbreak"}


def test_delete_file_and_directory(sandbox, bot) -> None:
    services.write_file(sandbox, "d/one.txt", b"1", bot)
    services.write_file(sandbox, "f.txt", b"1", bot)
    services.delete_file(sandbox, "f.txt", bot)
    with pytest.raises(InvalidInput, match="recursive"):
        services.delete_file(sandbox, "d", bot)
    services.delete_file(sandbox, "d", bot, recursive=True)
    assert services.list_files(sandbox)[0] == []
    with pytest.raises(NotFound, match="does not exist"):
        services.delete_file(sandbox, "d", bot)
    with pytest.raises(InvalidInput, match="workspace itself"):
        services.delete_file(sandbox, "/workspace", bot, recursive=True)


@pytest.mark.parametrize(
    "path",
    ["../etc/passwd", "/etc/passwd", "a/../../etc/shadow", "/workspace/../tmp/x", "/", "x\x00y"],
)
def test_paths_outside_the_workspace_are_refused(sandbox, bot, path) -> None:
    for operation in (
        lambda: services.read_file(sandbox, path),
        lambda: services.write_file(sandbox, path, b"pwned", bot),
        lambda: services.delete_file(sandbox, path, bot),
        lambda: services.list_files(sandbox, path),
    ):
        with pytest.raises(InvalidInput, match="path"):
            operation()


def test_symlinks_planted_by_sandbox_code_do_not_let_reads_or_writes_escape(sandbox, bot) -> None:
    sh(
        sandbox,
        bot,
        "ln -s /etc etc; ln -s /etc/passwd passwd; ln -s /tmp tmplink; ln -s ../.. up; echo secret > /tmp/secret",
    )
    with pytest.raises(InvalidInput, match="outside"):
        services.read_file(sandbox, "passwd")
    with pytest.raises(InvalidInput, match="outside"):
        services.read_file(sandbox, "tmplink/secret")
    with pytest.raises(InvalidInput, match="outside"):
        services.write_file(sandbox, "tmplink/planted", b"x", bot)
    with pytest.raises(InvalidInput, match="outside"):
        services.write_file(sandbox, "up/tmp/planted", b"x", bot)
    with pytest.raises(InvalidInput, match="outside"):
        services.list_files(sandbox, "etc")
    assert sh(sandbox, bot, "ls /tmp").stdout == "secret\n"
    # Writing onto the link itself replaces the link, never the file it points to.
    services.write_file(sandbox, "passwd", b"mine", bot)
    assert services.read_file(sandbox, "passwd").data == b"mine"
    assert sh(sandbox, bot, "head -c 5 /etc/passwd").stdout == "root:"
    # Deleting a link deletes the link only.
    services.delete_file(sandbox, "tmplink", bot)
    assert sh(sandbox, bot, "cat /tmp/secret").stdout == "secret\n"


def test_large_files_stream_both_ways(sandbox, bot) -> None:
    blob = os.urandom(1024 * 1024) * 8  # 8 MiB
    chunks = (blob[i : i + 65536] for i in range(0, len(blob), 65536))
    written = services.write_file(sandbox, "big.bin", chunks, bot, size=len(blob))
    assert written.sha256 == hashlib.sha256(blob).hexdigest()
    info, body = services.open_file_stream(sandbox, "big.bin")
    size = info.size_bytes
    digest = hashlib.sha256()
    received = 0
    for chunk in body:
        assert len(chunk) <= 1024 * 1024
        digest.update(chunk)
        received += len(chunk)
    assert (size, received) == (len(blob), len(blob))
    assert digest.hexdigest() == hashlib.sha256(blob).hexdigest()


def test_mutating_file_calls_respect_the_lease(sandbox, bot, alice_actor) -> None:
    services.takeover_lease(sandbox, alice_actor, holder="admin:alice")
    with pytest.raises(LeaseBusy):
        services.write_file(sandbox, "x.txt", b"x", bot, holder="intruder")
    services.write_file(sandbox, "x.txt", b"x", alice_actor, holder="admin:alice")
    # Reads are not mutations: anyone of the pipeline may read.
    assert services.read_file(sandbox, "x.txt").data == b"x"


def test_a_file_takes_the_agent_socket_or_the_engine_exec_as_configured(
    sandbox, bot, settings, monkeypatch
) -> None:
    """Over the agent's socket no engine exec is started for a file; through the engine, the
    agent's socket is not asked for. Either way the file is the sandbox user's."""
    runtime = get_runtime()
    if settings.BOXYARD_AGENT_DIRECT:
        blocked, used = ("exec", "exec_stream"), "agent_socket"
    else:
        blocked, used = ("agent_socket",), "exec"
    calls = []
    for name in blocked:
        monkeypatch.setattr(runtime, name, lambda *a, _name=name, **k: pytest.fail(_name))
    original = getattr(runtime, used)
    monkeypatch.setattr(runtime, used, lambda *a, **k: calls.append(used) or original(*a, **k))
    services.write_file(sandbox, "deep/er/f.bin", b"\0\1" * 70_000, bot, mode="0600")
    assert services.read_file(sandbox, "deep/er/f.bin", max_bytes=3).data == b"\0\1\0"
    info, body = services.open_file_stream(sandbox, "deep/er/f.bin", start=139_998)
    assert (info.size_bytes, b"".join(body)) == (140_000, b"\0\1")
    assert calls
    monkeypatch.undo()
    assert sh(sandbox, bot, "stat -c '%u %a' deep/er/f.bin").stdout == "10001 600\n"
    assert sh(sandbox, bot, "ls -A deep/er").stdout == "f.bin\n"  # no temporary left


def test_a_file_that_changes_under_a_range_read_is_refused(sandbox, bot) -> None:
    services.write_file(sandbox, "v.txt", b"version one", bot)
    info = services.stat_file(sandbox, "v.txt")
    services.write_file(sandbox, "v.txt", b"version two!", bot)
    with pytest.raises(Conflict, match="changed"):
        services.open_file_stream(sandbox, "v.txt", start=2, expect=info)


def test_a_file_where_a_parent_directory_should_be_is_a_400_either_way(sandbox, bot) -> None:
    services.write_file(sandbox, "f.txt", b"a file", bot)
    for path in ("f.txt/y.txt", "f.txt/x/y.txt"):
        with pytest.raises(InvalidInput, match="not a directory"):
            services.write_file(sandbox, path, b"x", bot)
    assert services.read_file(sandbox, "f.txt").data == b"a file"
