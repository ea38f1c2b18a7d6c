"""One tenant cannot starve or fill what the others share, tried on the served Boxyard as a
hostile caller would: bodies refused from their headers before a byte is read, a client that
stops sending, the request pool shared out per caller, long calls that hold no thread and
their cap per pipeline, and the operator's rate limit."""

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pipelines.models import PipelineToken
from sandboxes.models import Sandbox
from sandboxes.runtime import ROOT
from tests.conftest import wait_for
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHAT = {"launcher_type": "group", "launcher_id": "7"}
BOUND = 64 * 1024
THREADS = 6
PER_CALLER = 2
LONG_CALLS = 4


@pytest.fixture(autouse=True)
def _no_container_left(docker_engine: Any) -> None:
    """Each test's sandboxes are removed after it (`docker_engine`)."""


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    with served(
        tmp_path_factory.mktemp("gate"),
        BOXYARD_API_THREADS=str(THREADS),
        BOXYARD_THREADS_PER_CALLER=str(PER_CALLER),
        BOXYARD_QUEUED_PER_CALLER="3",
        BOXYARD_LONG_CALLS_PER_PIPELINE=str(LONG_CALLS),
        BOXYARD_MAX_REQUEST_BYTES=str(BOUND),
        BOXYARD_BODY_IDLE_SECONDS="2",
    ) as running:
        yield running


def token_of(make_pipeline: Any, slug: str) -> str:
    _, token = PipelineToken.issue(make_pipeline(slug=slug), name="gate")
    return token


def sleeping(server: Server, auth: dict[str, str], slug: str) -> tuple[str, str]:
    """(sandbox, exec) of the pipeline's chat sandbox with a background `sleep 120`."""
    sandbox = httpx.post(
        f"{server.url}/api/v1/sandboxes/open",
        headers=auth,
        json={"pipeline": slug, "variables": CHAT},
        timeout=120,
    ).json()["sandbox_id"]
    started = httpx.post(
        f"{server.url}/api/v1/sandboxes/{sandbox}/exec",
        headers=auth,
        json={"cmd": "sleep 120", "background": True},
        timeout=30,
    ).json()
    return str(sandbox), str(started["exec_id"])


def raw(server: Server, head: str, body: bytes = b"", wait: float = 10) -> tuple[str, float]:
    """Send a request's head (and the start of its body) on a bare socket and read the answer
    without sending more: (status line and headers, seconds it took)."""
    host, port = server.url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                piece = sock.recv(65536)
                if not piece:
                    break
                answer += piece
        except TimeoutError:
            return "", time.monotonic() - started
    return answer.decode("latin1"), time.monotonic() - started


def test_a_body_without_a_token_is_refused_from_its_headers(server: Server) -> None:
    # 2 GiB announced, none sent: answered at once, the body never read.
    head, seconds = raw(
        server,
        "POST /api/v1/sandboxes/open HTTP/1.1\nHost: 127.0.0.1\n"
        "Content-Type: application/json\nContent-Length: 2147483648\n",
        wait=5,
    )
    assert head.startswith("HTTP/1.1 401"), head
    assert "connection: close" in head.lower()
    assert seconds < 3
    # And at MCP's door.
    head, _ = raw(
        server, "POST /mcp HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 1073741824\n", wait=5
    )
    assert head.startswith("HTTP/1.1 401"), head


def test_a_body_over_the_bound_is_refused_from_its_headers(
    server: Server, make_pipeline: Any
) -> None:
    token = token_of(make_pipeline, "big")
    head, seconds = raw(
        server,
        f"POST /api/v1/sandboxes/open HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer {token}\n"
        f"Content-Type: application/json\nContent-Length: {BOUND + 1}\n",
        wait=5,
    )
    assert head.startswith("HTTP/1.1 413"), head
    assert seconds < 3
    # Chunked, it is cut off as soon as it passes the bound.
    answer = httpx.post(
        f"{server.url}/api/v1/sandboxes/open",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        content=iter([b"x" * 16384] * 8),
        timeout=10,
    )
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "too_large"
    # A caller without a credential may send the login form, and no more than a small bound.
    head, _ = raw(
        server, "POST /login/ HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 10000000\n", wait=5
    )
    assert head.startswith("HTTP/1.1 413"), head


def test_a_client_that_stops_sending_gets_408(server: Server, make_pipeline: Any) -> None:
    token = token_of(make_pipeline, "slow")
    head, seconds = raw(
        server,
        f"POST /api/v1/sandboxes/open HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer {token}\n"
        "Content-Type: application/json\nContent-Length: 100\n",
        body=b'{"pipe',
        wait=10,
    )
    assert head.startswith("HTTP/1.1 408"), head
    assert 1.5 < seconds < 6
    sandbox = httpx.post(
        f"{server.url}/api/v1/sandboxes/open",
        headers={"Authorization": f"Bearer {token}"},
        json={"pipeline": "slow", "variables": CHAT},
        timeout=120,
    ).json()
    # An upload that stops sending ends too.
    head, seconds = raw(
        server,
        f"PUT /api/v1/sandboxes/{sandbox['sandbox_id']}/files/raw?path=slow.bin HTTP/1.1\n"
        f"Host: 127.0.0.1\nAuthorization: Bearer {token}\nContent-Length: 100000\n",
        body=b"x" * 1000,
        wait=10,
    )
    assert head.startswith("HTTP/1.1 408"), head
    assert seconds < 6


def test_waiting_calls_hold_no_thread_and_are_capped_per_pipeline(
    server: Server, make_pipeline: Any
) -> None:
    attacker = token_of(make_pipeline, "attacker")
    other = token_of(make_pipeline, "other")
    auth = {"Authorization": f"Bearer {attacker}"}
    sandbox, exec_id = sleeping(server, auth, "attacker")
    wait_url = f"{server.url}/api/v1/sandboxes/{sandbox}/execs/{exec_id}/wait"
    answers: list[int] = []

    def call(method: str, url: str, body: dict[str, Any]) -> None:
        try:
            answer = httpx.request(method, url, headers=auth, json=body, timeout=90)
            answers.append(answer.status_code)
        except httpx.HTTPError:
            answers.append(0)

    # A stream of the exec's output and a command in the foreground are long calls too.
    stream = httpx.Client(headers=auth, timeout=90)
    events = stream.stream("GET", f"{server.url}/api/v1/sandboxes/{sandbox}/execs/{exec_id}/stream")
    assert events.__enter__().status_code == 200
    foreground = threading.Thread(
        target=call,
        args=("POST", f"{server.url}/api/v1/sandboxes/{sandbox}/exec", {"cmd": "sleep 30"}),
        daemon=True,
    )
    foreground.start()
    # More waits than the whole request pool has threads.
    waiting = [
        threading.Thread(target=call, args=("POST", wait_url, {"timeout_seconds": 60}), daemon=True)
        for _ in range(THREADS + 2)
    ]
    for thread in waiting:
        thread.start()
    # Past the pipeline's cap, a wait is refused with Retry-After.
    wait_for(lambda: answers.count(429) == len(waiting) - (LONG_CALLS - 2), 20)
    refused = httpx.post(wait_url, headers=auth, json={"timeout_seconds": 60}, timeout=30)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert int(refused.headers["Retry-After"]) >= 1
    # Another pipeline is served at once: the waits hold no thread.
    other_started = time.monotonic()
    listed = httpx.get(
        f"{server.url}/api/v1/sandboxes",
        headers={"Authorization": f"Bearer {other}"},
        timeout=30,
    )
    assert listed.status_code == 200
    assert time.monotonic() - other_started < 2
    # The attacker's own short calls still run too.
    assert httpx.get(f"{server.url}/api/v1/sandboxes", headers=auth, timeout=10).is_success
    events.__exit__(None, None, None)
    stream.close()


def test_a_wait_whose_client_went_away_gives_its_long_call_back(
    server: Server, make_pipeline: Any
) -> None:
    token = token_of(make_pipeline, "leaver")
    auth = {"Authorization": f"Bearer {token}"}
    sandbox, exec_id = sleeping(server, auth, "leaver")
    wait_url = f"{server.url}/api/v1/sandboxes/{sandbox}/execs/{exec_id}/wait"
    for _ in range(3 * LONG_CALLS):  # fire and forget: each client goes away after 0.5 s
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(wait_url, headers=auth, json={"timeout_seconds": 600}, timeout=0.5)

    def served_again() -> bool:
        answer = httpx.post(wait_url, headers=auth, json={"timeout_seconds": 0}, timeout=10)
        return answer.status_code == 200

    wait_for(served_again, 10)


def test_one_callers_bodies_in_memory_are_capped(server: Server, make_pipeline: Any) -> None:
    """Bodies on their way are held against the caller's share (8 bounds by default): one
    more, while those are still coming, is refused at once."""
    token = token_of(make_pipeline, "hoarder")
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        f"POST /api/v1/sandboxes/open HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {BOUND}\r\n\r\n"
    ).encode()
    coming = []
    try:
        for _ in range(8):  # each announces a whole bound and sends a little of it
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(head + b"{")
            coming.append(sock)
        time.sleep(0.3)
        answer, seconds = raw(
            server,
            f"POST /api/v1/sandboxes/open HTTP/1.1\nHost: 127.0.0.1\n"
            f"Authorization: Bearer {token}\nContent-Type: application/json\n"
            f"Content-Length: {BOUND}\n",
            wait=5,
        )
        assert answer.startswith("HTTP/1.1 429"), answer
        assert "retry-after" in answer.lower()
        assert seconds < 1.5
    finally:
        for sock in coming:
            sock.close()


def workspace(engine: Any, sandbox: str) -> str:
    """The names in the sandbox's /workspace, hidden ones too, as root sees them."""
    container = Sandbox.objects.get(pk=sandbox).container_id
    return engine.exec(container, ["ls", "-a", "/workspace"], user=ROOT).stdout.decode()


def test_a_call_waiting_on_its_client_lets_its_callers_other_calls_run(
    server: Server, make_pipeline: Any, docker_engine: Any
) -> None:
    """A caller's threads run one at a time (BOXYARD_RUNNING_PER_CALLER, 1 by default): an
    upload whose client is slow to send lets go of its turn while it waits for the body, and
    the caller's other calls are answered meanwhile."""
    token = token_of(make_pipeline, "uploader")
    auth = {"Authorization": f"Bearer {token}"}
    sandbox = httpx.post(
        f"{server.url}/api/v1/sandboxes/open",
        headers=auth,
        json={"pipeline": "uploader", "variables": CHAT},
        timeout=120,
    ).json()["sandbox_id"]
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as upload:
        upload.sendall(
            f"PUT /api/v1/sandboxes/{sandbox}/files/raw?path=slow.bin HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Content-Length: 100000\r\n\r\n".encode()
            + b"x" * 1000
        )
        # The upload is under way, waiting for the rest of its body: its file is begun.
        wait_for(lambda: ".boxyard-write." in workspace(docker_engine, sandbox), 10)
        for _ in range(3):
            listed = httpx.get(f"{server.url}/api/v1/sandboxes", headers=auth, timeout=10)
            assert listed.status_code == 200
        # All answered while the upload still waited (it ends with 408 after 2 s of silence).
        upload.setblocking(False)
        with pytest.raises(BlockingIOError):
            upload.recv(1)
        upload.setblocking(True)
        assert upload.recv(65536).startswith(b"HTTP/1.1 408")
