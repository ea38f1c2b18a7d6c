"""The dashboard's upload, `PUT /sandboxes/{id}/files/upload?path=`: the file is the request's
body, read as it arrives and written as the admin, under the admin's lease.

Through Django's test client: who may upload, the CSRF token the page gives its script, the
lease (the bot's, and an admin's taken over by another), the exact bytes and the event they
leave. Through the served server (`manage.py serve`): a body without its length, one too big
for the workspace, 64 MiB, and a write that starts in the sandbox before the body has arrived.
(In a real browser, with its progress bar and a 1 GiB file: tests/test_browser.py.)
"""

import hashlib
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from django.test import Client

from boxyard.errors import NotFound
from sandboxes import services
from sandboxes.models import Event, Sandbox
from sandboxes.services import Actor
from tests.conftest import CHAT, wait_for
from tests.servers import Server, served

pytestmark = [pytest.mark.docker]

MIB = 1024 * 1024
PASSWORD = "a-long-test-password"


@pytest.fixture
def admin_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD, is_staff=True)


@pytest.fixture
def admin_client(admin_user: Any) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


@pytest.fixture
def sandbox(pipeline: Any, bot: Actor, docker_engine: Any) -> Sandbox:
    """The chat's sandbox, opened by the bot, which holds its lease."""
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def put(client: Client, sandbox: Sandbox, path: str, body: bytes, **headers: str) -> Any:
    return client.put(
        f"/sandboxes/{sandbox.pk}/files/upload?path={quote(path)}",
        body,
        content_type="application/octet-stream",
        headers=headers,
    )


def page_token(html: str) -> str:
    """The CSRF token a page gives htmx, which the page's script sends with an upload too."""
    found = re.search(r"hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'", html)
    assert found, html[:800]
    return found[1]


def written(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return services.read_file(sandbox, path, 4 * MIB).data
    except NotFound:
        return None


def writes(sandbox: Sandbox) -> int:
    return Event.objects.filter(sandbox=sandbox, action="file.written").count()


# --- through Django's test client ---------------------------------------------------------------


@pytest.mark.django_db
def test_an_admin_uploads_the_exact_bytes_and_the_history_says_so(
    admin_client: Client, sandbox: Sandbox, alice_actor: Actor
) -> None:
    services.takeover_lease(sandbox, alice_actor)
    body = bytes(range(256)) * 4096 + b"\x00\xff the end"
    sent = put(admin_client, sandbox, "/workspace/data/blob.bin", body)
    assert sent.status_code == 201, sent.content
    sha = hashlib.sha256(body).hexdigest()
    answer = sent.json()
    assert {key: answer[key] for key in ("ok", "path", "size_bytes", "sha256")} == {
        "ok": True,
        "path": "/workspace/data/blob.bin",
        "size_bytes": len(body),
        "sha256": sha,
    }
    assert answer["message"] == "/workspace/data/blob.bin uploaded (1.0\xa0MB)."
    assert written(sandbox, "/workspace/data/blob.bin") == body
    event = Event.objects.filter(sandbox=sandbox, action="file.written").latest("id")
    assert event.actor == "admin:alice"
    assert (event.detail["path"], event.detail["size"], event.detail["sha256"]) == (
        "/workspace/data/blob.bin",
        len(body),
        sha,
    )
    # The same name again replaces the file; an empty file is a file too.
    assert put(admin_client, sandbox, "data/blob.bin", b"second").status_code == 201
    assert written(sandbox, "/workspace/data/blob.bin") == b"second"
    empty = admin_client.put(  # (the test client says no length for an empty body; a browser does)
        f"/sandboxes/{sandbox.pk}/files/upload?path=empty.txt",
        b"",
        content_type="application/octet-stream",
        CONTENT_LENGTH="0",
    )
    assert empty.status_code == 201 and empty.json()["size_bytes"] == 0
    assert written(sandbox, "/workspace/empty.txt") == b""


@pytest.mark.django_db
def test_only_an_admin_uploads(
    django_user_model: Any, admin_client: Client, sandbox: Sandbox, alice_actor: Actor
) -> None:
    services.takeover_lease(sandbox, alice_actor)
    anonymous = put(Client(), sandbox, "/workspace/x.txt", b"anyone")
    assert anonymous.status_code == 302 and anonymous.url.startswith("/login/")
    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("mallory", password="x"))
    assert put(visitor, sandbox, "/workspace/x.txt", b"mallory").status_code == 403
    # The old multipart form, or any other method, is not an upload.
    form = admin_client.post(f"/sandboxes/{sandbox.pk}/files/upload", {"path": "/workspace"})
    assert form.status_code == 405
    assert written(sandbox, "/workspace/x.txt") is None and writes(sandbox) == 0


@pytest.mark.django_db
def test_an_upload_needs_the_csrf_token_the_page_gives(
    admin_user: Any, sandbox: Sandbox, alice_actor: Actor
) -> None:
    services.takeover_lease(sandbox, alice_actor)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    page = strict.get(f"/sandboxes/{sandbox.pk}/")
    assert put(strict, sandbox, "/workspace/x.txt", b"forged").status_code == 403
    assert (
        put(strict, sandbox, "/workspace/x.txt", b"forged", **{"X-CSRFToken": "nope"}).status_code
        == 403
    )
    assert written(sandbox, "/workspace/x.txt") is None and writes(sandbox) == 0
    token = page_token(page.content.decode())
    allowed = put(strict, sandbox, "/workspace/x.txt", b"mine", **{"X-CSRFToken": token})
    assert allowed.status_code == 201, allowed.content
    assert written(sandbox, "/workspace/x.txt") == b"mine"


@pytest.mark.django_db
def test_the_lease_decides_and_a_refused_upload_changes_nothing(
    admin_client: Client, sandbox: Sandbox, alice_actor: Actor
) -> None:
    # The bot holds the lease (as its chat): the admin is told whose it is.
    busy = put(admin_client, sandbox, "/workspace/notes.txt", b"too early")
    assert busy.status_code == 409, busy.content
    assert busy.json()["error"]["code"] == "lease_busy"
    assert "leased to group_123456" in busy.json()["error"]["message"]  # the chat's bot
    assert written(sandbox, "/workspace/notes.txt") is None
    services.takeover_lease(sandbox, alice_actor)
    assert put(admin_client, sandbox, "/workspace/notes.txt", b"alice's").status_code == 201
    # Another admin takes it over from alice: her upload is refused until it is released.
    services.takeover_lease(sandbox, Actor("admin", "bob"))
    taken = put(admin_client, sandbox, "/workspace/notes.txt", b"alice again")
    assert taken.status_code == 423, taken.content
    assert taken.json()["error"]["code"] == "taken_over"
    assert "admin:bob" in taken.json()["error"]["message"]
    assert written(sandbox, "/workspace/notes.txt") == b"alice's" and writes(sandbox) == 1


# --- through the served server ------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path, docker_engine: Any) -> Iterator[Server]:
    with served(tmp_path) as running:
        yield running


def pattern(size: int) -> Iterator[bytes]:
    """`size` bytes, a MiB at a time, each MiB different, made as they are sent."""
    for start in range(0, size, MIB):
        yield bytes([start // MIB % 251]) * min(MIB, size - start)


def digest(size: int) -> str:
    hashed = hashlib.sha256()
    for piece in pattern(size):
        hashed.update(piece)
    return hashed.hexdigest()


@contextmanager
def logged_in(url: str) -> Iterator[httpx.Client]:
    """A client of the served dashboard with alice's session, as a browser has it."""
    with httpx.Client(base_url=url, timeout=120) as client:
        form = client.get("/login/")
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert found, form.text[:800]
        done = client.post(
            "/login/",
            data={"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": found[1]},
        )
        assert done.status_code == 302, done.text[:800]
        yield client


@pytest.mark.django_db(transaction=True)
def test_the_served_upload_streams_into_the_sandbox(
    admin_user: Any, make_pipeline: Any, bot: Actor, alice_actor: Actor, server: Server
) -> None:
    pipeline = make_pipeline(slug="uploads", workspace_mb=128)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.takeover_lease(sandbox, alice_actor)
    url = f"/sandboxes/{sandbox.pk}/files/upload"

    def names() -> set[str]:
        return {entry.name for entry in services.list_files(sandbox, "/workspace")[0]}

    with logged_in(server.url) as client:
        token = page_token(client.get(f"/sandboxes/{sandbox.pk}/").text)
        headers = {"X-CSRFToken": token, "Content-Type": "application/octet-stream"}
        # 64 MiB, twice what the server would read whole into a request.
        sent = client.put(
            url,
            params={"path": "/workspace/big.bin"},
            content=pattern(64 * MIB),
            headers={**headers, "Content-Length": str(64 * MIB)},
        )
        assert sent.status_code == 201, sent.text
        assert (sent.json()["size_bytes"], sent.json()["sha256"]) == (64 * MIB, digest(64 * MIB))
        # A body that does not say its length is refused before it is read.
        chunked = client.put(
            url,
            params={"path": "/workspace/chunked.bin"},
            content=iter([b"a", b"b"]),
            headers=headers,
        )
        assert chunked.status_code == 411, chunked.text
        assert "Content-Length" in chunked.json()["error"]["message"]
        # One that cannot fit the workspace is refused before its first byte.
        too_big = client.put(
            url,
            params={"path": "/workspace/huge.bin"},
            content=pattern(200 * MIB),
            headers={**headers, "Content-Length": str(200 * MIB)},
        )
        assert too_big.status_code == 507, too_big.text
        assert too_big.json()["error"]["code"] == "workspace_full"
        assert names() == {"big.bin"}

        # The sandbox writes the file while the body is still arriving: a quarter of it sent,
        # the write has begun beside the old file; the browser goes away, nothing is left.
        address = urlsplit(server.url)
        cookies = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
        with socket.create_connection((address.hostname, address.port)) as raw:
            raw.sendall(
                f"PUT {url}?path=/workspace/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Cookie: {cookies}\r\nX-CSRFToken: {token}\r\n"
                f"Content-Length: {32 * MIB}\r\n\r\n".encode()
            )
            raw.sendall(b"x" * (8 * MIB))
            wait_for(
                lambda: any(name.startswith(".boxyard-write") for name in names()),
                30,
                server.tail,
            )
        wait_for(lambda: names() == {"big.bin"}, 30, lambda: f"{names()}\n{server.tail()}")
        download = client.get(f"/sandboxes/{sandbox.pk}/files/download", params={"path": "big.bin"})
        assert hashlib.sha256(download.content).hexdigest() == digest(64 * MIB)
