"""The Python client without a server: requests it builds, answers it parses, errors it raises.

Each test runs with the blocking client and with the asyncio one (through `asyncio.run`), both
on `httpx.MockTransport`.
"""

import asyncio
import base64
import inspect
import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from boxyard_client import (
    AsyncBoxyardClient,
    BadRequest,
    BoxyardAPIError,
    BoxyardClient,
    Conflict,
    InvalidState,
    LeaseBusy,
    NotFound,
    OpenedSandbox,
    PayloadTooLarge,
    QuotaExceeded,
    ServiceUnavailable,
    StaleEpoch,
    TakenOver,
    Unauthorized,
    WorkspaceFull,
)
from boxyard_client._calls import API_ROOT, endpoint
from boxyard_client._endpoints import Endpoints

SANDBOX_ID = "5f0c6b9e-0000-4000-8000-000000000001"
EXEC_ID = "7a1d2c3b-0000-4000-8000-000000000002"
Handler = Callable[[httpx.Request], httpx.Response]
Caller = Callable[..., Any]

SANDBOX = {
    "sandbox_id": SANDBOX_ID,
    "pipeline": "support",
    "scope_key": "group_42",
    "status": "running",
    "stop_reason": "",
    "status_detail": "",
    "image": "boxyard/busybox:1",
    "workdir": "/workspace",
    "generation": 1,
    "created_at": "2025-05-01T10:00:00Z",
    "last_activity_at": None,
    "expires_at": "2025-05-02T10:00:00Z",
    "lease": {"holder": "group_42", "epoch": 1, "expires_at": "2025-05-01T10:10:00Z"},
}


def call_sync(handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    transport = httpx.MockTransport(handler)
    with BoxyardClient("http://boxyard.test", "tok", transport=transport) as client:
        return getattr(client, method)(*args, **kwargs)


def call_async(handler: Handler, method: str, *args: Any, **kwargs: Any) -> Any:
    async def go() -> Any:
        transport = httpx.MockTransport(handler)
        async with AsyncBoxyardClient("http://boxyard.test", "tok", transport=transport) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(go())


@pytest.fixture(params=[call_sync, call_async], ids=["sync", "async"])
def call(request: pytest.FixtureRequest) -> Caller:
    """`call(handler, "open", ...)`: one API call through the client under test."""
    return request.param  # type: ignore[no-any-return]


class Recorder:
    """A MockTransport handler that answers `body` with `status` and keeps the requests."""

    def __init__(self, body: Any, status: int = 200, headers: dict[str, str] | None = None):
        self.body, self.status, self.headers = body, status, headers or {}
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.status, json=self.body, headers=self.headers)

    @property
    def request(self) -> httpx.Request:
        (only,) = self.requests
        return only

    @property
    def sent(self) -> Any:
        return json.loads(self.request.content)


def error(status: int, code: str, **extra: Any) -> Recorder:
    return Recorder({"error": {"code": code, "message": f"{code} happened", **extra}}, status)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "invalid_input", BadRequest),
        (400, "image_not_allowed", BadRequest),
        (401, "unauthorized", Unauthorized),
        (404, "not_found", NotFound),
        (409, "lease_busy", LeaseBusy),
        (409, "stale_epoch", StaleEpoch),
        (409, "invalid_state", InvalidState),
        (409, "conflict", Conflict),
        (413, "too_large", PayloadTooLarge),
        (423, "taken_over", TakenOver),
        (429, "quota_exceeded", QuotaExceeded),
        (502, "runtime_error", BoxyardAPIError),
        (503, "runtime_unavailable", ServiceUnavailable),
        (507, "workspace_full", WorkspaceFull),
    ],
)
def test_each_status_and_code_raises_its_error(
    call: Caller, status: int, code: str, expected: type[BoxyardAPIError]
) -> None:
    with pytest.raises(expected) as raised:
        call(error(status, code, limit=3), "get_sandbox", SANDBOX_ID)

    assert type(raised.value) is expected
    assert (raised.value.status, raised.value.code) == (status, code)
    assert raised.value.message == f"{code} happened"
    assert raised.value.details == {"limit": 3}
    assert f"{status} {code}" in str(raised.value)


def test_lease_errors_are_conflicts_and_name_the_holder(call: Caller) -> None:
    busy = error(409, "lease_busy", holder="worker-2", expires_at="2025-05-01T10:10:00Z")
    with pytest.raises(Conflict) as raised:
        call(busy, "exec", SANDBOX_ID, "ls")

    assert isinstance(raised.value, LeaseBusy)
    assert raised.value.holder == "worker-2"
    assert raised.value.expires_at == datetime(2025, 5, 1, 10, 10, tzinfo=UTC)

    with pytest.raises(TakenOver) as taken:
        call(error(423, "taken_over", holder="admin-x", expires_at=None), "exec", SANDBOX_ID, "ls")
    assert (taken.value.holder, taken.value.expires_at) == ("admin-x", None)


def test_bad_request_names_the_field(call: Caller) -> None:
    refused = error(400, "invalid_input", field="variables.launcher_id")
    with pytest.raises(BadRequest) as raised:
        call(refused, "open", "support", {})

    assert raised.value.field == "variables.launcher_id"


def test_service_unavailable_reads_retry_after_from_the_header(call: Caller) -> None:
    down = error(503, "runtime_unavailable", retry_after=5)
    down.headers = {"Retry-After": "7"}
    with pytest.raises(ServiceUnavailable) as raised:
        call(down, "list_sandboxes")
    assert raised.value.retry_after == 7

    down.headers = {}
    with pytest.raises(ServiceUnavailable) as from_body:
        call(down, "list_sandboxes")
    assert from_body.value.retry_after == 5


def test_an_answer_that_is_not_ours_is_still_a_typed_error(call: Caller) -> None:
    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>Bad Gateway</html>")

    with pytest.raises(BoxyardAPIError) as raised:
        call(proxy, "list_sandboxes")

    assert (raised.value.status, raised.value.code) == (502, "http_error")
    assert "Bad Gateway" in raised.value.message


def test_a_success_that_is_not_json_is_an_error(call: Caller) -> None:
    def login_page(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>Sign in</html>")

    with pytest.raises(BoxyardAPIError) as raised:
        call(login_page, "list_sandboxes")

    assert (raised.value.status, raised.value.code) == (200, "invalid_response")


# --- requests --------------------------------------------------------------------------------


def test_open_posts_the_chat_variables_with_the_token(call: Caller) -> None:
    server = Recorder({**SANDBOX, "created": True})
    call(server, "open", "support", {"launcher_type": "group", "launcher_id": 42})

    request = server.request
    assert (request.method, request.url.path) == ("POST", "/api/v1/sandboxes/open")
    assert request.headers["Authorization"] == "Bearer tok"
    assert server.sent == {
        "pipeline": "support",
        "variables": {"launcher_type": "group", "launcher_id": 42},
    }


def test_exec_sends_fencing_and_waits_longer_than_the_command(call: Caller) -> None:
    server = Recorder({"exec_id": EXEC_ID, "status": "completed", "exit_code": 0})
    call(
        server,
        "exec",
        SANDBOX_ID,
        ["ls", "-l"],
        cwd="src",
        env={"A": "1"},
        timeout_seconds=300,
        holder="worker-1",
        epoch=3,
    )

    assert server.request.url.path == f"/api/v1/sandboxes/{SANDBOX_ID}/exec"
    assert server.sent == {
        "cmd": ["ls", "-l"],
        "cwd": "src",
        "env": {"A": "1"},
        "timeout_seconds": 300,
        "holder": "worker-1",
        "epoch": 3,
    }
    assert server.request.extensions["timeout"]["read"] == 120 + 300


def test_write_file_sends_text_as_contents_and_bytes_as_base64(call: Caller) -> None:
    server = Recorder({"ok": True, "path": "/workspace/a", "size_bytes": 3})
    call(server, "write_file", SANDBOX_ID, "a.sh", "hi\n")
    call(server, "write_file", SANDBOX_ID, "b.bin", b"\x00\xff", mode=0o755, overwrite=False)

    text, binary = (json.loads(request.content) for request in server.requests)
    assert server.requests[0].method == "PUT"
    assert text == {"path": "a.sh", "contents": "hi\n", "overwrite": True}
    assert binary == {
        "path": "b.bin",
        "contents_b64": base64.b64encode(b"\x00\xff").decode(),
        "mode": "0755",
        "overwrite": False,
    }


def test_query_calls_send_lowercase_booleans_and_leave_out_what_was_not_given(call: Caller) -> None:
    server = Recorder({"ok": True, "status": "destroyed"})
    call(server, "close", SANDBOX_ID, delete_workspace=True, epoch=2)

    request = server.request
    assert (request.method, request.url.path) == ("DELETE", f"/api/v1/sandboxes/{SANDBOX_ID}")
    assert dict(request.url.params) == {"delete_workspace": "true", "epoch": "2"}

    listing = Recorder({"entries": [], "truncated": False})
    call(listing, "list_files", SANDBOX_ID)
    assert dict(listing.request.url.params) == {"recursive": "false"}


def test_ids_are_quoted_into_the_path(call: Caller) -> None:
    server = Recorder({"done": True, "exit_code": 0})
    call(server, "exec_wait", "a/b", "c d", timeout_seconds=5)

    assert server.request.url.raw_path == b"/api/v1/sandboxes/a%2Fb/execs/c%20d/wait"
    assert server.sent == {"timeout_seconds": 5}


def test_the_api_root_may_be_given_with_the_base_url() -> None:
    server = Recorder({"sandboxes": []})
    transport = httpx.MockTransport(server)
    with BoxyardClient("http://boxyard.test/api/v1/", "tok", transport=transport) as client:
        assert client.list_sandboxes(status="running") == []

    assert str(server.request.url) == "http://boxyard.test/api/v1/sandboxes?status=running"


# --- results ---------------------------------------------------------------------------------


def test_open_parses_the_sandbox_and_its_lease(call: Caller) -> None:
    box = call(Recorder({**SANDBOX, "created": True, "added_later": 1}), "open", "support", {})

    assert isinstance(box, OpenedSandbox)
    assert (box.sandbox_id, box.scope_key, box.created) == (SANDBOX_ID, "group_42", True)
    assert box.created_at == datetime(2025, 5, 1, 10, tzinfo=UTC)
    assert box.last_activity_at is None
    assert (box.lease.holder, box.lease.epoch) == ("group_42", 1)
    assert box.lease.expires_at == datetime(2025, 5, 1, 10, 10, tzinfo=UTC)
    with pytest.raises(AttributeError):
        box.status = "stopped"  # frozen


def test_read_file_gives_bytes_and_text_for_either_encoding(call: Caller) -> None:
    answer = {"path": "/workspace/a", "contents": "héllo", "truncated": False, "size_bytes": 6}
    text = call(Recorder(answer), "read_file", SANDBOX_ID, "a")
    assert (text.data, text.text, text.size_bytes) == ("héllo".encode(), "héllo", 6)

    raw = base64.b64encode(b"\x00\xff").decode()
    binary = call(
        Recorder({"path": "/workspace/b", "contents_b64": raw, "truncated": True, "size_bytes": 9}),
        "read_file",
        SANDBOX_ID,
        "b",
        max_bytes=2,
    )
    assert (binary.data, binary.truncated) == (b"\x00\xff", True)


def test_lists_parse_into_tuples_of_entries(call: Caller) -> None:
    entry = {
        "path": "/workspace/a",
        "name": "a",
        "type": "file",
        "size": 3,
        "mode": "0644",
        "mtime_unix": 1700000000,
    }
    listing = call(Recorder({"entries": [entry], "truncated": False}), "list_files", SANDBOX_ID)
    assert listing.paths == ["/workspace/a"]
    assert listing.entries[0].size == 3

    boxes = call(Recorder({"sandboxes": [SANDBOX, SANDBOX]}), "list_sandboxes")
    assert [box.sandbox_id for box in boxes] == [SANDBOX_ID, SANDBOX_ID]

    sessions = call(
        Recorder({"sessions": [{"name": "default", "cwd": "/workspace", "env": {}}]}),
        "sessions",
        SANDBOX_ID,
    )
    assert sessions[0].name == "default"


def test_exec_results_and_output(call: Caller) -> None:
    result = call(
        Recorder(
            {
                "exec_id": EXEC_ID,
                "status": "completed",
                "exit_code": 0,
                "stdout": "hi\n",
                "stderr": "",
                "truncated": False,
                "stdout_truncated": False,
                "stderr_truncated": False,
                "duration_ms": 12,
                "session": "default",
                "error": "",
            }
        ),
        "get_exec",
        SANDBOX_ID,
        EXEC_ID,
    )
    assert (result.ok, result.stdout, result.duration_ms) == (True, "hi\n", 12)

    output = call(
        Recorder(
            {
                "chunks": [
                    {"seq": 1, "stream": "stdout", "text": "hi\n"},
                    {"seq": 2, "stream": "stderr", "text": "oops\n"},
                ],
                "done": True,
                "exit_code": 1,
            }
        ),
        "exec_output",
        SANDBOX_ID,
        EXEC_ID,
        since_seq=0,
    )
    assert (output.text(), output.text("stderr"), output.done) == ("hi\n", "oops\n", True)


def test_background_exec_and_the_event_stream(call: Caller) -> None:
    started = Recorder(
        {
            "exec_id": EXEC_ID,
            "status": "running",
            "exit_code": None,
            "background": True,
            "session": "build",
        }
    )
    result = call(started, "exec", SANDBOX_ID, "make", session="build", background=True)
    assert started.sent == {"cmd": "make", "session": "build", "background": True}
    assert (result.status, result.background) == ("running", True)

    stream = (
        'event: chunk\ndata: {"seq":1,"stream":"stdout","text":"a\\n"}\n\n'
        ": keep-alive\n\n"
        'event: exit\ndata: {"exit_code":0,"timed_out":false,"killed":false}\n\n'
    )
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, text=stream, headers={"Content-Type": "text/event-stream"})

    events = call(handler, "exec_stream", SANDBOX_ID, EXEC_ID, since_seq=3)
    assert requests[0].url.params["since_seq"] == "3"
    assert [(e.event, e.seq, e.text, e.exit_code) for e in events] == [
        ("chunk", 1, "a\n", None),
        ("exit", None, "", 0),
    ]


def test_sessions_and_processes(call: Caller) -> None:
    created = Recorder(
        {"name": "build", "cwd": "/tmp", "env": {"A": "1"}, "busy": False, "started": True}
    )
    session = call(created, "create_session", SANDBOX_ID, "build", cwd="/tmp", env={"A": "1"})
    assert created.sent == {"name": "build", "cwd": "/tmp", "env": {"A": "1"}}
    assert (session.cwd, session.started) == ("/tmp", True)
    deleted = Recorder({"ok": True, "deleted": "build"})
    call(deleted, "delete_session", SANDBOX_ID, "build", epoch=2)
    assert deleted.request.method == "DELETE" and deleted.request.url.params["epoch"] == "2"

    wrote = Recorder({"ok": True, "generation": 1})
    call(wrote, "process_stdin", SANDBOX_ID, "mcp", b"\x00{}\n", eof=True)
    assert wrote.sent == {"data_b64": "AHt9Cg==", "eof": True}
    output = call(
        Recorder(
            {
                "name": "mcp",
                "generation": 1,
                "running": True,
                "exit_code": None,
                "chunks": [{"seq": 4, "stream": "stdout", "text": "{}\n"}],
            }
        ),
        "process_output",
        SANDBOX_ID,
        "mcp",
        since_seq=3,
        wait_seconds=5,
    )
    assert (output.text(), output.last_seq, output.running) == ("{}\n", 4, True)


def test_lease_calls_and_run(call: Caller) -> None:
    lease = Recorder({"holder": "admin-x", "epoch": 4, "expires_at": None})
    taken = call(lease, "takeover_lease", SANDBOX_ID, holder="admin-x", reason="stuck")
    assert (taken.holder, taken.epoch, taken.expires_at) == ("admin-x", 4, None)
    assert lease.request.url.path.endswith("/lease/takeover")
    assert lease.sent == {"holder": "admin-x", "reason": "stuck"}

    released = Recorder({"holder": "", "epoch": 4, "expires_at": None})
    call(released, "release_lease", SANDBOX_ID, epoch=4)
    assert released.request.url.path.endswith("/lease/release")
    assert released.sent == {"epoch": 4}

    ran = Recorder(
        {
            "ok": True,
            "exit_code": 0,
            "stdout": "42\n",
            "stderr": "",
            "truncated": False,
            "duration_ms": 300,
            "status": "completed",
            "error": "",
        }
    )
    result = call(ran, "run", "support", "sh", "echo $((6*7))", files={"a.txt": "x"})
    assert (result.ok, result.stdout) == (True, "42\n")
    assert ran.sent == {
        "pipeline": "support",
        "language": "sh",
        "code": "echo $((6*7))",
        "files": {"a.txt": "x"},
    }


# --- the client as a whole ------------------------------------------------------------------


def client_routes() -> set[tuple[str, str]]:
    """(method, path) of every client method, with `{}` for each path parameter."""
    routes = set()
    members = [member for cls in Endpoints.__mro__ for member in vars(cls).values()]
    for member in members:
        if isinstance(member, endpoint):
            required = [
                f"{{{name}}}"
                for name, parameter in member.signature.parameters.items()
                if parameter.default is inspect.Parameter.empty
            ]
            built = member.build(None, *required)
            routes.add((built.method, unquote(API_ROOT + built.path)))
    return {(method, re.sub(r"{\w+}", "{}", path)) for method, path in routes}


def test_the_client_has_a_method_for_every_route_of_the_openapi_document(client: Any) -> None:
    document = client.get("/api/v1/openapi.json").json()
    documented = {
        (method.upper(), re.sub(r"{\w+}", "{}", path))
        for path, operations in document["paths"].items()
        for method in operations
    }

    assert client_routes() == documented


def test_the_client_imports_without_django() -> None:
    code = "import sys, boxyard_client; assert 'django' not in sys.modules, 'django imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
