"""The server's own path: requests through `config.asgi.application` (what the server serves),
spoken to in ASGI messages in the test's process.

Each request runs start to end, middleware and view, in a thread of the request pool
(`config.handlers`); these tests check that what the middleware gives still holds there, and
that slow requests do not hold up others.
"""

import asyncio
import json
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from config.asgi import application
from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import Exec, ExecState
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db(
    transaction=True
)  # the pool's threads have their own connections


async def call(
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: Any = None,
    query: str = "",
) -> tuple[int, dict[str, str], bytes]:
    """One request to the ASGI application: (status, headers, body)."""
    raw = b"" if body is None else json.dumps(body).encode()
    sent = [(b"host", b"testserver")] + [
        (name.lower().encode(), value.encode()) for name, value in (headers or {}).items()
    ]
    if body is not None:
        sent.append((b"content-type", b"application/json"))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": sent,
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    delivered = asyncio.Event()
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if not delivered.is_set():
            delivered.set()
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        messages.append({**message, "at": time.monotonic()})

    await application(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    found = {name.decode().lower(): value.decode() for name, value in start["headers"]}
    found["x-test-body-times"] = ",".join(
        f"{m['at']:.3f}" for m in messages if m["type"] == "http.response.body" and m.get("body")
    )
    return start["status"], found, content


@pytest.fixture
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


@pytest.fixture
def token(pipeline: Any) -> str:
    return PipelineToken.issue(pipeline, name="asgi")[1]


def test_a_page_gets_what_the_middleware_adds(_hosts: None) -> None:
    status, headers, body = asyncio.run(call("GET", "/healthz"))
    assert status == 200 and json.loads(body)["ok"] is True
    assert headers["x-content-type-options"] == "nosniff"  # SecurityMiddleware
    assert headers["x-frame-options"] == "DENY"  # XFrameOptionsMiddleware


def test_an_unknown_host_is_refused(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["boxyard.example"]
    status, _, _ = asyncio.run(call("GET", "/healthz"))
    assert status == 400


def test_the_bot_api_authenticates_tokens(_hosts: None, token: str) -> None:
    ok, _, body = asyncio.run(
        call("GET", "/api/v1/sandboxes", headers={"Authorization": f"Bearer {token}"})
    )
    assert ok == 200 and json.loads(body) == {"sandboxes": []}
    refused, headers, body = asyncio.run(
        call("GET", "/api/v1/sandboxes", headers={"Authorization": "Bearer nope"})
    )
    assert refused == 401 and headers["www-authenticate"] == "Bearer"
    assert json.loads(body)["error"]["code"] == "unauthorized"


def test_an_admin_session_needs_its_csrf_token_to_change_anything(
    _hosts: None, pipeline: Any, django_user_model: Any
) -> None:
    admin = django_user_model.objects.create_user(username="alice", password="x", is_staff=True)
    browser = Client()
    browser.force_login(admin)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    listed, _, _ = asyncio.run(call("GET", "/api/v1/sandboxes", headers={"Cookie": cookie}))
    assert listed == 200
    forged, _, body = asyncio.run(
        call(
            "POST",
            "/api/v1/sandboxes/open",
            headers={"Cookie": cookie},
            body={"pipeline": pipeline.slug, "variables": CHAT},
        )
    )
    assert forged == 403, body


@pytest.mark.docker
def test_slow_requests_run_side_by_side(
    _hosts: None, pipeline: Any, token: str, bot: Any, docker_engine: Any
) -> None:
    """Four one-second commands in four sessions end together, and a quick call made
    meanwhile is not held up behind them."""
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    auth = {"Authorization": f"Bearer {token}"}
    base = f"/api/v1/sandboxes/{sandbox.pk}"
    for name in ("s1", "s2", "s3", "s4"):
        asyncio.run(call("POST", f"{base}/sessions", headers=auth, body={"name": name}))

    async def scenario() -> tuple[float, float, list[int]]:
        started = time.monotonic()
        sleeps = [
            asyncio.ensure_future(
                call("POST", f"{base}/exec", headers=auth, body={"cmd": "sleep 1", "session": name})
            )
            for name in ("s1", "s2", "s3", "s4")
        ]
        # The four are under way: each one's exec is recorded as it starts.
        running = database_sync_to_async(
            Exec.objects.filter(sandbox=sandbox, state=ExecState.RUNNING).count,
            thread_sensitive=False,
        )
        while await running() < 4:
            assert time.monotonic() - started < 10, "the four commands did not start"
            await asyncio.sleep(0.01)
        quick_started = time.monotonic()
        quick_status, _, _ = await call("GET", base, headers=auth)
        quick = time.monotonic() - quick_started
        statuses = [status for status, _, _ in await asyncio.gather(*sleeps)]
        return time.monotonic() - started, quick, [quick_status, *statuses]

    total, quick, statuses = asyncio.run(scenario())
    assert statuses == [200] * 5
    assert total < 1.9, f"four 1 s commands in four sessions took {total:.2f} s"
    assert quick < 0.5, f"a quick call waited {quick:.2f} s behind the slow ones"


@pytest.mark.docker
def test_server_sent_events_leave_as_the_output_comes(
    _hosts: None, pipeline: Any, token: str, bot: Any, docker_engine: Any
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    auth = {"Authorization": f"Bearer {token}"}
    base = f"/api/v1/sandboxes/{sandbox.pk}"
    _, _, body = asyncio.run(
        call(
            "POST",
            f"{base}/exec",
            headers=auth,
            body={"cmd": "for i in 1 2 3; do echo tick$i; sleep 0.4; done", "background": True},
        )
    )
    exec_id = json.loads(body)["exec_id"]
    status, headers, body = asyncio.run(call("GET", f"{base}/execs/{exec_id}/stream", headers=auth))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    events = [block for block in body.decode().split("\n\n") if block.startswith("event:")]
    texts = [
        json.loads(block.split("data: ", 1)[1])["text"]
        for block in events
        if block.startswith("event: chunk")
    ]
    assert "".join(texts) == "tick1\ntick2\ntick3\n"
    assert events[-1].startswith("event: exit")
    sent_at = [float(at) for at in headers["x-test-body-times"].split(",")]
    assert sent_at[-1] - sent_at[0] >= 0.6, "the events left all at once, not as produced"


def test_what_start_up_made_is_out_of_the_collectors_way() -> None:
    import gc

    # config.asgi (imported above, as the server imports it) froze the start-up heap: full
    # collections, which stall every request while they run, no longer walk it.
    assert gc.get_freeze_count() > 50_000
