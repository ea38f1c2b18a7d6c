"""Files as byte streams: `PUT` and `GET`/`HEAD /api/v1/sandboxes/{id}/files/raw`.

Through the real server (uvicorn, `manage.py serve`) and the real engine: round trips of 0
bytes to 1 GiB checked by sha256, a download resumed with a Range, atomic replacement under a
reader, an upload cut short, the workspace filling up mid-stream, a body without its length.
Through Django's test client: the headers, conditional requests, ranges past the end, the
lease, another pipeline's token, and the event a write leaves.
"""

import asyncio
import hashlib
import io
import socket
import threading
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.utils import timezone

from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import Event, Sandbox
from tests.api.conftest import Bot
from tests.conftest import CHAT, wait_for
from tests.servers import Server

pytestmark = [
    pytest.mark.docker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("docker_engine"),  # each test's sandboxes are removed after it
]

MIB = 1024 * 1024


def pattern(size: int, seed: int = 0) -> Iterator[bytes]:
    """`size` bytes that differ from one MiB to the next, made as they are sent."""
    block = hashlib.sha256(str(seed).encode()).digest() * (MIB // 32)
    sent = 0
    while sent < size:
        piece = bytes([sent // MIB % 251]) + block[1 : min(MIB, size - sent)]
        sent += len(piece)
        yield piece


def digest(size: int, seed: int = 0) -> str:
    hashed = hashlib.sha256()
    for piece in pattern(size, seed):
        hashed.update(piece)
    return hashed.hexdigest()


@pytest.fixture
def api(server: Server, make_pipeline: Any) -> Iterator[tuple[httpx.Client, str]]:
    """A client of the served API with a pipeline's token, and its chat's sandbox."""
    pipeline = make_pipeline(slug="files", workspace_mb=2048)
    _, token = PipelineToken.issue(pipeline, name="tests")
    with httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    ) as client:
        opened = client.post("/sandboxes/open", json={"pipeline": "files", "variables": CHAT})
        assert opened.status_code == 200, opened.text
        yield client, opened.json()["sandbox_id"]


def upload(client: httpx.Client, sandbox_id: str, path: str, size: int, seed: int = 0) -> Any:
    return client.put(
        f"/sandboxes/{sandbox_id}/files/raw",
        params={"path": path},
        content=pattern(size, seed),
        headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
    )


def download(client: httpx.Client, sandbox_id: str, path: str, **headers: str) -> tuple[Any, str]:
    hashed = hashlib.sha256()
    with client.stream(
        "GET", f"/sandboxes/{sandbox_id}/files/raw", params={"path": path}, headers=headers
    ) as response:
        for piece in response.iter_bytes():
            hashed.update(piece)
    return response, hashed.hexdigest()


def test_round_trips_keep_every_byte_whatever_the_size(api: tuple[httpx.Client, str]) -> None:
    client, sandbox_id = api
    for size in (0, 1, 64 * MIB, 1024 * MIB):
        written = upload(client, sandbox_id, f"data/{size}.bin", size, seed=size)
        assert written.status_code == 201, written.text
        assert written.json() == {
            "ok": True,
            "path": f"/workspace/data/{size}.bin",
            "size_bytes": size,
            "sha256": digest(size, seed=size),
        }
        response, sha = download(client, sandbox_id, f"data/{size}.bin")
        assert response.status_code == 200
        assert (int(response.headers["Content-Length"]), sha) == (size, digest(size, seed=size))
        assert response.headers["ETag"].startswith('"') and response.headers["Last-Modified"]
    # The type is guessed from the name; a page of the sandbox's never runs as Boxyard's.
    upload(client, sandbox_id, "report.csv", 10)
    head = client.head(f"/sandboxes/{sandbox_id}/files/raw", params={"path": "report.csv"})
    assert head.headers["Content-Type"].startswith("text/csv")
    assert head.headers["Content-Length"] == "10" and head.content == b""
    upload(client, sandbox_id, "page.html", 10)
    page = client.get(f"/sandboxes/{sandbox_id}/files/raw", params={"path": "page.html"})
    assert page.headers["Content-Type"].startswith("text/html")
    assert page.headers["Content-Security-Policy"].startswith("sandbox")
    assert page.headers["Content-Disposition"] == 'attachment; filename="page.html"'


def test_an_interrupted_download_resumes_with_a_range(api: tuple[httpx.Client, str]) -> None:
    client, sandbox_id = api
    size = 8 * MIB + 123
    upload(client, sandbox_id, "resume.bin", size)
    url = f"/sandboxes/{sandbox_id}/files/raw"
    got = bytearray()
    with client.stream("GET", url, params={"path": "resume.bin"}) as response:
        etag = response.headers["ETag"]
        for piece in response.iter_bytes():
            got += piece
            if len(got) >= 3 * MIB:
                break  # the connection drops here
    rest = client.get(
        url,
        params={"path": "resume.bin"},
        headers={"Range": f"bytes={len(got)}-", "If-Range": etag},
    )
    assert rest.status_code == 206
    assert rest.headers["Content-Range"] == f"bytes {len(got)}-{size - 1}/{size}"
    assert hashlib.sha256(bytes(got) + rest.content).hexdigest() == digest(size)
    # The file replaced since: the old ETag gets the whole new file, not a splice of two.
    upload(client, sandbox_id, "resume.bin", 1000, seed=7)
    whole = client.get(
        url, params={"path": "resume.bin"}, headers={"Range": "bytes=500-", "If-Range": etag}
    )
    assert whole.status_code == 200 and hashlib.sha256(whole.content).hexdigest() == digest(1000, 7)


def test_a_reader_sees_the_old_file_or_the_new_one(api: tuple[httpx.Client, str]) -> None:
    client, sandbox_id = api
    size = 16 * MIB
    versions = {digest(size, seed) for seed in (1, 2)}
    upload(client, sandbox_id, "swap.bin", size, seed=1)
    seen: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            response, sha = download(client, sandbox_id, "swap.bin")
            assert response.status_code == 200
            seen.append(sha)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for seed in (2, 1, 2, 1, 2):
            assert upload(client, sandbox_id, "swap.bin", size, seed=seed).status_code == 201
    finally:
        stop.set()
        reader.join()
    assert seen and set(seen) <= versions


def test_an_upload_cut_short_leaves_nothing(server: Server, api: tuple[httpx.Client, str]) -> None:
    client, sandbox_id = api
    upload(client, sandbox_id, "kept.bin", 1000)
    address = urlsplit(server.url)
    token = client.headers["Authorization"]

    def names() -> set[str]:
        listing = client.get(f"/sandboxes/{sandbox_id}/files/list", params={"path": "/workspace"})
        return {entry["name"] for entry in listing.json()["entries"]}

    def writing() -> bool:
        return any(name.startswith(".boxyard-write") for name in names())

    with socket.create_connection((address.hostname, address.port)) as raw:
        raw.sendall(
            f"PUT /api/v1/sandboxes/{sandbox_id}/files/raw?path=kept.bin HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: {token}\r\n"
            f"Content-Length: {32 * MIB}\r\n\r\n".encode()
        )
        raw.sendall(b"x" * (4 * MIB))
        wait_for(writing, 30, server.tail)  # the sandbox is writing it beside the old file
    # The client went away: the server sees it, the sandbox sees its input end short.
    wait_for(lambda: names() == {"kept.bin"}, 30, lambda: f"{names()}\n{server.tail()}")
    _, sha = download(client, sandbox_id, "kept.bin")
    assert sha == digest(1000)  # the file before the cut upload, whole


def test_the_workspace_filling_up_mid_stream_is_507_and_leaves_no_part(
    server: Server, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(slug="small", workspace_mb=64)
    _, token = PipelineToken.issue(pipeline, name="tests")
    with httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        opened = client.post("/sandboxes/open", json={"pipeline": "small", "variables": CHAT})
        sandbox_id = opened.json()["sandbox_id"]
        assert upload(client, sandbox_id, "first.bin", 40 * MIB).status_code == 201
        full = upload(client, sandbox_id, "first.bin", 40 * MIB, seed=3)  # room for one only
        assert full.status_code == 507, full.text
        assert full.json()["error"]["code"] == "workspace_full"
        _, sha = download(client, sandbox_id, "first.bin")
        assert sha == digest(40 * MIB)  # the old file stands
        too_big = upload(client, sandbox_id, "huge.bin", 100 * MIB)  # refused before a byte
        assert too_big.status_code == 507 and "do not fit" in too_big.json()["error"]["message"]
        listing = client.get(f"/sandboxes/{sandbox_id}/files/list", params={"path": "/workspace"})
        assert [entry["name"] for entry in listing.json()["entries"]] == ["first.bin"]
        # A body that does not say its length is refused before it is read.
        chunked = client.put(
            f"/sandboxes/{sandbox_id}/files/raw",
            params={"path": "chunked.bin"},
            content=iter([b"a", b"b"]),
        )
        assert chunked.status_code == 411 and "Content-Length" in chunked.json()["error"]["message"]


# --- through Django's test client ---------------------------------------------------------------


def raw(bot: Bot, sandbox_id: str, path: str) -> str:
    return f"/api/v1/sandboxes/{sandbox_id}/files/raw?path={path}"


def content(response: Any) -> bytes:
    """A streamed response's body, as the server sends it (from the event loop)."""

    async def collect() -> bytes:
        return b"".join([part async for part in response.streaming_content])

    return asyncio.run(collect())


def test_headers_conditions_and_ranges(support: Bot, bot: Any, docker_engine: Any) -> None:
    sandbox = services.open_sandbox(support.pipeline, CHAT, bot).sandbox
    sandbox_id = str(sandbox.pk)
    put = support.client.put(
        raw(support, sandbox_id, "notes.txt"), b"0123456789", content_type="text/plain"
    )
    assert put.status_code == 201 and put.json()["size_bytes"] == 10
    event = Event.objects.filter(sandbox=sandbox, action="file.written").latest("id")
    assert event.detail["sha256"] == hashlib.sha256(b"0123456789").hexdigest()
    url = raw(support, sandbox_id, "notes.txt")
    head = support.client.head(url)
    assert head.status_code == 200 and head["Content-Length"] == "10"
    assert head["Accept-Ranges"] == "bytes" and head["Content-Type"].startswith("text/plain")
    assert support.client.get(url, HTTP_IF_NONE_MATCH=head["ETag"]).status_code == 304
    part = support.client.get(url, HTTP_RANGE="bytes=2-4")
    assert part.status_code == 206 and content(part) == b"234"
    assert part["Content-Range"] == "bytes 2-4/10"
    tail = support.client.get(url, HTTP_RANGE="bytes=-3")
    assert content(tail) == b"789"
    past = support.client.get(url, HTTP_RANGE="bytes=10-")
    assert past.status_code == 416 and past["Content-Range"] == "bytes */10"
    # A read is activity: the idle deadline moves.
    long_ago = timezone.now() - timedelta(hours=1)
    Sandbox.objects.filter(pk=sandbox.pk).update(last_activity_at=long_ago)
    assert content(support.client.get(url)) == b"0123456789"
    assert Sandbox.objects.get(pk=sandbox.pk).last_activity_at > long_ago
    assert support.client.get(raw(support, sandbox_id, "missing")).status_code == 404
    assert support.client.get(raw(support, sandbox_id, "/etc/passwd")).status_code == 400
    assert support.client.get(raw(support, sandbox_id, "/workspace")).status_code == 400


def test_the_lease_and_the_pipeline_guard_the_streams(
    support: Bot, billing: Bot, bot: Any, alice_actor: Any, docker_engine: Any
) -> None:
    sandbox = services.open_sandbox(support.pipeline, CHAT, bot).sandbox
    url = raw(support, str(sandbox.pk), "mine.txt")
    assert support.client.put(url, b"ours", content_type="text/plain").status_code == 201
    # Another pipeline's token finds no such sandbox, on every method.
    assert billing.client.put(url, b"theirs", content_type="text/plain").status_code == 404
    assert billing.client.get(url).status_code == 404
    assert billing.client.head(url).status_code == 404
    # An admin holds the lease: the bot's write is refused and changes nothing.
    services.takeover_lease(sandbox, alice_actor, holder="admin:alice")
    refused = support.client.put(url, b"late", content_type="text/plain")
    assert refused.status_code == 423
    assert content(support.client.get(url)) == b"ours"
    bad_mode = support.client.put(url + "&mode=999", b"x", content_type="text/plain")
    assert bad_mode.status_code == 400 and bad_mode.json()["error"]["field"] == "mode"


# --- the client ---------------------------------------------------------------------------------


def test_the_client_streams_files_and_archives_with_progress(
    server: Server, api: tuple[httpx.Client, str], tmp_path: Path
) -> None:
    from boxyard_client import AsyncBoxyardClient, BadRequest, BoxyardClient, NotFound

    client, sandbox_id = api
    token = client.headers["Authorization"].removeprefix("Bearer ")
    source = tmp_path / "model.bin"
    with source.open("wb") as out:
        for piece in pattern(20 * MIB, seed=5):
            out.write(piece)
    seen: list[tuple[int, int | None]] = []
    with BoxyardClient(server.url, token) as boxyard:
        uploaded = boxyard.upload_file(
            sandbox_id, "models/model.bin", source, progress=lambda *p: seen.append(p)
        )
        assert (uploaded.size_bytes, uploaded.sha256) == (20 * MIB, digest(20 * MIB, seed=5))
        assert seen[0] == (0, 20 * MIB) and seen[-1] == (20 * MIB, 20 * MIB) and len(seen) > 10
        info = boxyard.file_info(sandbox_id, "models/model.bin")
        assert info.size_bytes == 20 * MIB and info.etag.startswith('"')
        seen.clear()
        target = tmp_path / "back.bin"
        got = boxyard.download_file(
            sandbox_id, "models/model.bin", target, progress=lambda *p: seen.append(p)
        )
        assert got.size_bytes == 20 * MIB and seen[-1] == (20 * MIB, 20 * MIB)
        assert hashlib.sha256(target.read_bytes()).hexdigest() == digest(20 * MIB, seed=5)
        archive = io.BytesIO()
        boxyard.download_archive(sandbox_id, "models", archive, format="zip")
        assert zipfile.ZipFile(archive).read("model.bin")[:MIB] == next(pattern(MIB, seed=5))
        archive.seek(0)
        extracted = boxyard.upload_archive(sandbox_id, "copy", archive, format="zip")
        assert (extracted.entries, extracted.size_bytes) == (1, 20 * MIB)
        with pytest.raises(BadRequest) as refused:
            boxyard.upload_archive(sandbox_id, "copy", b"not an archive", format="tar")
        assert "truncated or not a tar" in str(refused.value)
        # An exec's output, far beyond what its answer carries, whole.
        ran = client.post(
            f"/sandboxes/{sandbox_id}/exec", json={"cmd": "seq 1 1000000; echo done >&2"}
        ).json()
        assert ran["stdout_truncated"]
        whole = io.BytesIO()
        got_output = boxyard.download_exec_output(sandbox_id, ran["exec_id"], whole)
        expected = "".join(f"{n}\n" for n in range(1, 1_000_001)).encode()
        assert got_output.size_bytes == len(expected) and whole.getvalue() == expected
        errors = io.BytesIO()
        boxyard.download_exec_output(sandbox_id, ran["exec_id"], errors, stream="stderr")
        assert errors.getvalue() == b"done\n"
        wrong = client.get(
            f"/sandboxes/{sandbox_id}/execs/{ran['exec_id']}/output/raw", params={"stream": "both"}
        )
        assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "stream"
        # A link for a chat's user: no token needed, this one file only.
        link = boxyard.create_link(sandbox_id, "models/model.bin", expires_in_seconds=60)
        assert link.url.startswith(server.url + "/links/") and link.method == "GET"
        head = httpx.head(link.url)
        assert head.status_code == 200 and head.headers["Content-Length"] == str(20 * MIB)
        # A download that fails leaves the local file as it was.
        target.write_bytes(b"mine")
        with pytest.raises(NotFound, match="does not exist"):
            boxyard.download_file(sandbox_id, "missing.bin", target)
        assert target.read_bytes() == b"mine"

    async def in_asyncio() -> tuple[int, int]:
        async with AsyncBoxyardClient(server.url, token) as boxyard:
            sent = await boxyard.upload_file(sandbox_id, "async.bin", b"a" * (3 * MIB))
            back = io.BytesIO()
            received = await boxyard.download_file(sandbox_id, "async.bin", back)
            return sent.size_bytes, len(back.getvalue()) + received.size_bytes

    assert asyncio.run(in_asyncio()) == (3 * MIB, 6 * MIB)
