"""The one error mapping of the bot API: every failure is `{"error": {"code", "message", ...}}`
with the right status, and a 400 names the field the caller got wrong.

These run on the fake engine (the errors are decided before any engine call), except the 503s:
the runtime points at a Docker socket where nothing listens, and then, for the retry after a
503, at the same socket once the real engine answers there.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from pipelines.models import PipelineToken
from sandboxes.models import Sandbox
from sandboxes.runtime import LABEL_SANDBOX, agent, set_runtime
from sandboxes.runtime.docker import DockerRuntime
from tests.conftest import CHAT, wait_for
from tests.forwarding import Forwarder

pytestmark = pytest.mark.django_db

PREFIX = "/api/v1"


def send(
    client: Client, method: str, path: str, body: Any = None, *, raw: str | None = None
) -> Any:
    """`body` is sent as JSON; `raw` is sent as it is (for bodies that are not JSON)."""
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    if data is None:
        return getattr(client, method)(PREFIX + path)
    return getattr(client, method)(PREFIX + path, data=data, content_type="application/json")


def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    """The error object of a response, after checking its status and its shape."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict), body
    assert error["code"] == code, body
    assert isinstance(error["message"], str) and error["message"].strip(), body
    return error


@pytest.fixture
def sandbox_id(support: Any, fake_runtime: Any) -> str:
    opened = send(
        support.client, "post", "/sandboxes/open", {"pipeline": "support", "variables": CHAT}
    )
    assert opened.status_code == 200, opened.content
    return opened.json()["sandbox_id"]


# --- 400: bad input, naming the field ---------------------------------------------------------

BAD_INPUT = [
    # (case, method, path, JSON body, the field the answer must name)
    (
        "wrong type: pipeline",
        "post",
        "/sandboxes/open",
        {"pipeline": 5, "variables": CHAT},
        "pipeline",
    ),
    (
        "wrong type: variables",
        "post",
        "/sandboxes/open",
        {"pipeline": "support", "variables": [1]},
        "variables",
    ),
    ("missing: pipeline", "post", "/sandboxes/open", {"variables": CHAT}, "pipeline"),
    (
        "missing scope variable",
        "post",
        "/sandboxes/open",
        {"pipeline": "support", "variables": {"launcher_type": "group"}},
        "variables.launcher_id",
    ),
    ("wrong type: cmd", "post", "/sandboxes/{id}/exec", {"cmd": 123}, "cmd"),
    ("wrong type: cmd item", "post", "/sandboxes/{id}/exec", {"cmd": ["echo", 1]}, "cmd"),
    ("missing: cmd", "post", "/sandboxes/{id}/exec", {}, "cmd"),
    (
        "wrong type: timeout_seconds",
        "post",
        "/sandboxes/{id}/exec",
        {"cmd": ["true"], "timeout_seconds": "soon"},
        "timeout_seconds",
    ),
    (
        "wrong type: env value",
        "post",
        "/sandboxes/{id}/exec",
        {"cmd": ["true"], "env": {"A": 1}},
        "env.A",
    ),
    ("wrong type: cmd object", "post", "/sandboxes/{id}/exec", {"cmd": {"x": 1}}, "cmd"),
    (
        "wrong type: timeout_seconds as text",
        "post",
        "/sandboxes/{id}/exec",
        {"cmd": ["true"], "timeout_seconds": "5"},
        "timeout_seconds",
    ),
    (
        "wrong type: background",
        "post",
        "/sandboxes/{id}/exec",
        {"cmd": ["true"], "background": "yes"},
        "background",
    ),
    ("wrong type: cwd", "post", "/sandboxes/{id}/exec", {"cmd": ["true"], "cwd": 5}, "cwd"),
    (
        "wrong type: a session's variable",
        "post",
        "/sandboxes/{id}/sessions",
        {"name": "build", "env": {"A": 1}},
        "env.A",
    ),
    ("negative epoch", "post", "/sandboxes/{id}/exec", {"cmd": ["true"], "epoch": -1}, "epoch"),
    (
        "absolute path outside /workspace",
        "put",
        "/sandboxes/{id}/files",
        {"path": "/etc/passwd", "contents": "x"},
        "path",
    ),
    (
        "relative path escaping /workspace",
        "put",
        "/sandboxes/{id}/files",
        {"path": "../../etc/passwd", "contents": "x"},
        "path",
    ),
    (
        "wrong type: overwrite",
        "put",
        "/sandboxes/{id}/files",
        {"path": "a", "contents": "x", "overwrite": "maybe"},
        "overwrite",
    ),
    (
        "wrong type: contents",
        "put",
        "/sandboxes/{id}/files",
        {"path": "a", "contents": 5},
        "contents",
    ),
    (
        "wrong type: contents_b64",
        "put",
        "/sandboxes/{id}/files",
        {"path": "a", "contents_b64": ["AA=="]},
        "contents_b64",
    ),
    (
        "wrong type: mode",
        "put",
        "/sandboxes/{id}/files",
        {"path": "a", "contents": "x", "mode": 420},
        "mode",
    ),
    (
        "unknown link method",
        "post",
        "/sandboxes/{id}/files/links",
        {"path": "a", "method": "DELETE"},
        "method",
    ),
    (
        "wrong type: expires_in_seconds",
        "post",
        "/sandboxes/{id}/files/links",
        {"path": "a", "expires_in_seconds": "soon"},
        "expires_in_seconds",
    ),
    (
        "wrong type: stdin text",
        "post",
        "/sandboxes/{id}/processes/echo/stdin",
        {"text": 5},
        "text",
    ),
    ("wrong type: reset reason", "post", "/sandboxes/{id}/reset", {"reason": 5}, "reason"),
    ("wrong type: epoch", "post", "/sandboxes/{id}/lease/renew", {"epoch": "one"}, "epoch"),
    (
        "unknown language",
        "post",
        "/run",
        {"pipeline": "support", "language": "cobol", "code": "x"},
        "language",
    ),
    (
        "wrong type: code",
        "post",
        "/run",
        {"pipeline": "support", "language": "sh", "code": 5},
        "code",
    ),
    (
        "wrong type: run args",
        "post",
        "/run",
        {"pipeline": "support", "language": "sh", "code": "x", "args": "a b"},
        "args",
    ),
    (
        "run args: too many",
        "post",
        "/run",
        {"pipeline": "support", "language": "sh", "code": "x", "args": ["a"] * 101},
        "args",
    ),
    (
        "run args: NUL",
        "post",
        "/run",
        {"pipeline": "support", "language": "sh", "code": "x", "args": ["a", "a\x00b"]},
        "args.1",
    ),
    (
        "run args: too large in all",
        "post",
        "/run",
        {"pipeline": "support", "language": "sh", "code": "x", "args": ["a" * 40_000] * 2},
        "args",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_400_names_the_field(
    support: Any, sandbox_id: str, method: str, path: str, body: Any, field: str
) -> None:
    error = error_of(
        send(support.client, method, path.format(id=sandbox_id), body), 400, "invalid_input"
    )
    assert error["field"] == field, error
    assert error["message"].startswith(f"{field}:"), error


def test_400_for_a_path_outside_the_workspace_in_a_query(support: Any, sandbox_id: str) -> None:
    for route in ("files", "files/list"):
        response = support.client.get(f"{PREFIX}/sandboxes/{sandbox_id}/{route}?path=/etc")
        assert error_of(response, 400, "invalid_input")["field"] == "path"
    response = support.client.delete(f"{PREFIX}/sandboxes/{sandbox_id}/files?path=/etc/passwd")
    assert error_of(response, 400, "invalid_input")["field"] == "path"


@pytest.mark.parametrize("where", ["query", "body"])
def test_400_names_a_field_called_path_when_its_type_is_wrong(
    support: Any, sandbox_id: str, where: str
) -> None:
    if where == "query":
        response = support.client.get(f"{PREFIX}/sandboxes/{sandbox_id}/files?path=")
    else:
        body = {"path": "", "contents": "x"}
        response = send(support.client, "put", f"/sandboxes/{sandbox_id}/files", body)
    assert error_of(response, 400, "invalid_input")["field"] == "path"


def test_400_for_a_wrongly_typed_query_parameter(support: Any, sandbox_id: str) -> None:
    response = support.client.get(f"{PREFIX}/sandboxes/{sandbox_id}/files?path=a&max_bytes=lots")
    assert error_of(response, 400, "invalid_input")["field"] == "max_bytes"


@pytest.mark.parametrize("raw", ["{not json", '{"pipeline": "support",', "\x00"])
def test_400_for_a_body_that_is_not_json(support: Any, fake_runtime: Any, raw: str) -> None:
    error_of(send(support.client, "post", "/sandboxes/open", raw=raw), 400, "invalid_input")


def test_400_for_a_body_that_is_not_json_names_the_body(support: Any, fake_runtime: Any) -> None:
    error = error_of(
        send(support.client, "post", "/sandboxes/open", raw="{not json"), 400, "invalid_input"
    )
    assert error.get("field") == "body", error


def test_400_for_a_missing_body(support: Any, fake_runtime: Any) -> None:
    error = error_of(send(support.client, "post", "/sandboxes/open", raw=""), 400, "invalid_input")
    assert error["field"] == "body", error


# A JSON string may hold a lone surrogate escape ("\ud800"): valid JSON, not encodable UTF-8.
# Found by hand (Schemathesis only generates encodable text). Sent as raw JSON text.
LONE_SURROGATE = [
    # (case, method, path, raw JSON body)
    ("exec: argv", "post", "/sandboxes/{id}/exec", '{"cmd": ["echo", "\\ud800"]}'),
    ("exec: shell string", "post", "/sandboxes/{id}/exec", '{"cmd": "echo \\ud800"}'),
    ("exec: cwd", "post", "/sandboxes/{id}/exec", '{"cmd": ["true"], "cwd": "\\ud800"}'),
    (
        "open: scope variable",
        "post",
        "/sandboxes/open",
        '{"pipeline": "support", "variables": {"launcher_type": "\\ud800", "launcher_id": "1"}}',
    ),
    (
        "run: code",
        "post",
        "/run",
        '{"pipeline": "support", "language": "sh", "code": "echo \\ud800"}',
    ),
    (
        "run: file contents",
        "post",
        "/run",
        '{"pipeline": "support", "language": "sh", "code": "true", "files": {"a.txt": "\\ud800"}}',
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "raw"),
    [case[1:] for case in LONE_SURROGATE],
    ids=[case[0] for case in LONE_SURROGATE],
)
def test_400_not_500_for_a_lone_surrogate_in_a_string(
    support: Any, sandbox_id: str, method: str, path: str, raw: str
) -> None:
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {support.token}")
    response = send(client, method, path.format(id=sandbox_id), raw=raw)
    error_of(response, 400, "invalid_input")


# --- 401 and 404 ----------------------------------------------------------------------------------


def test_401_without_a_token(fake_runtime: Any, sandbox_id: str) -> None:
    response = Client().get(f"{PREFIX}/sandboxes/{sandbox_id}")
    error_of(response, 401, "unauthorized")
    assert response["WWW-Authenticate"] == "Bearer"


def test_401_with_an_unknown_token(fake_runtime: Any, sandbox_id: str) -> None:
    stranger = Client(HTTP_AUTHORIZATION="Bearer byd_not-a-real-token")
    response = stranger.get(f"{PREFIX}/sandboxes/{sandbox_id}")
    error_of(response, 401, "unauthorized")


@pytest.mark.parametrize(
    "path",
    [
        "/sandboxes/00000000-0000-4000-8000-000000000000",
        "/sandboxes/not-a-uuid",
        "/sandboxes/{id}/execs/00000000-0000-4000-8000-000000000000",
        "/sandboxes/{id}/execs/not-a-uuid/output",
        "/pipelines/no-such-pipeline/tools",
    ],
)
def test_404_for_what_does_not_exist(support: Any, sandbox_id: str, path: str) -> None:
    error_of(support.client.get(PREFIX + path.format(id=sandbox_id)), 404, "not_found")


def test_404_for_an_unknown_pipeline(support: Any, fake_runtime: Any) -> None:
    body = {"pipeline": "no-such-pipeline", "variables": CHAT}
    error_of(send(support.client, "post", "/sandboxes/open", body), 404, "not_found")


# --- 409, 423: leases -----------------------------------------------------------------------------


def test_409_lease_busy_names_the_holder_and_the_expiry(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    # The open took the lease for the scope key: alice has to wait.
    error = error_of(
        send(support.client, "post", f"{base}/lease/renew", {"holder": "alice"}), 409, "lease_busy"
    )
    assert error["holder"] == "group_123456"
    assert send(support.client, "post", f"{base}/lease/release", {}).status_code == 200

    assert (
        send(support.client, "post", f"{base}/lease/renew", {"holder": "alice"}).status_code == 200
    )
    response = send(support.client, "post", f"{base}/exec", {"cmd": ["true"], "holder": "bob"})
    error = error_of(response, 409, "lease_busy")
    assert error["holder"] == "alice"
    assert isinstance(error["expires_at"], str) and error["expires_at"] > "2000", error


def test_409_stale_epoch(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    lease = send(support.client, "post", f"{base}/lease/renew", {}).json()
    for epoch in (lease["epoch"] - 1, lease["epoch"] + 1):
        response = send(support.client, "post", f"{base}/exec", {"cmd": ["true"], "epoch": epoch})
        error_of(response, 409, "stale_epoch")


def test_423_after_a_takeover_names_the_new_holder(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    assert send(support.client, "post", f"{base}/lease/release", {}).status_code == 200
    assert (
        send(support.client, "post", f"{base}/lease/renew", {"holder": "alice"}).status_code == 200
    )
    taken = send(
        support.client, "post", f"{base}/lease/takeover", {"holder": "bob", "reason": "stuck"}
    )
    assert taken.status_code == 200 and taken.json()["holder"] == "bob", taken.content
    response = send(support.client, "post", f"{base}/exec", {"cmd": ["true"], "holder": "alice"})
    error = error_of(response, 423, "taken_over")
    assert error["holder"] == "bob"


# --- 429: quota ----------------------------------------------------------------------------------


def test_429_when_the_pipeline_has_its_maximum_of_live_sandboxes(
    make_pipeline: Any, fake_runtime: Any
) -> None:
    pipeline = make_pipeline(slug="tiny", max_live_sandboxes=1)
    _, token = PipelineToken.issue(pipeline, name="tests")
    bot = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    first = send(bot, "post", "/sandboxes/open", {"pipeline": "tiny", "variables": CHAT})
    assert first.status_code == 200, first.content
    again = send(bot, "post", "/sandboxes/open", {"pipeline": "tiny", "variables": CHAT})
    assert again.status_code == 200, "the same key is the same sandbox, not a second one"
    second = send(
        bot,
        "post",
        "/sandboxes/open",
        {"pipeline": "tiny", "variables": {**CHAT, "launcher_id": "2"}},
    )
    error = error_of(second, 429, "quota_exceeded")
    assert error["limit"] == 1


# --- 413: too large ------------------------------------------------------------------------------


def test_413_for_a_body_over_the_upload_limit(support: Any, sandbox_id: str, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    path = f"/sandboxes/{sandbox_id}/files"
    small = send(support.client, "put", path, {"path": "a.txt", "contents": "x" * 1000})
    assert small.status_code == 200, small.content
    big = send(support.client, "put", path, {"path": "a.txt", "contents": "x" * 4000})
    error_of(big, 413, "too_large")


# --- 503: the engine cannot be reached -------------------------------------------------------------


@pytest.fixture
def unreachable_engine(sandbox_id: str) -> Any:
    """Every host's engine swapped for one that does not answer, once the sandbox's agent
    channel (opened in the background after its start) is open and let go: a channel rides its
    engine's attach stream, so an engine that does not answer has none open."""
    container = Sandbox.objects.get(pk=sandbox_id).container_id
    wait_for(lambda: agent.is_open(container), 10, lambda: "the agent's channel never opened")
    agent.forget(container)
    set_runtime(DockerRuntime(base_url="unix:///nonexistent/docker.sock"))
    yield
    set_runtime(None)


def test_503_with_retry_after_when_the_engine_is_unreachable(
    support: Any, sandbox_id: str, unreachable_engine: None
) -> None:
    calls = [
        (
            "post",
            "/sandboxes/open",
            {"pipeline": "support", "variables": {**CHAT, "launcher_id": "2"}},
        ),
        ("post", f"/sandboxes/{sandbox_id}/exec", {"cmd": ["true"]}),
        ("put", f"/sandboxes/{sandbox_id}/files", {"path": "a.txt", "contents": "x"}),
        ("post", "/run", {"pipeline": "support", "language": "sh", "code": "true"}),
    ]
    for method, path, body in calls:
        response = send(support.client, method, path, body)
        error = error_of(response, 503, "runtime_unavailable")
        assert int(response["Retry-After"]) > 0, path
        assert error["retry_after"] == int(response["Retry-After"])


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_after_a_503_the_same_open_succeeds_once_the_engine_is_back(
    support: Any, docker_engine: Any, tmp_path: Path
) -> None:
    """A 503 tells the bot to try the same call again later, so nothing of the failed call
    may stand in the way of the retry. One runtime with one address throughout: first nothing
    listens there; then the real engine answers there (a forwarder to its socket), and the
    retry opens a real sandbox with a running container."""
    address = tmp_path / "docker.sock"
    body = {"pipeline": "support", "variables": {**CHAT, "launcher_id": "2"}}
    set_runtime(DockerRuntime(base_url=f"unix://{address}"))
    try:
        refused = send(support.client, "post", "/sandboxes/open", body)
        error = error_of(refused, 503, "runtime_unavailable")
        assert int(refused["Retry-After"]) > 0 and error["retry_after"] == int(
            refused["Retry-After"]
        )

        with Forwarder(address) as engine_back:
            retried = send(support.client, "post", "/sandboxes/open", body)
            assert retried.status_code == 200, retried.content
            assert retried.json()["status"] == "running", retried.json()
            assert engine_back.connections > 0, "the retry reached the engine at the same address"
    finally:
        set_runtime(None)
    sandbox = Sandbox.objects.get(pk=retried.json()["sandbox_id"])
    container = docker_engine.inspect_container(sandbox.container_id)
    assert container is not None and container.running, "the container runs on the real engine"
    assert container.labels[LABEL_SANDBOX] == str(sandbox.pk)


# --- outside the routes: still the error shape ---------------------------------------------------


def test_404_for_an_unknown_route_has_the_error_shape(support: Any) -> None:
    error_of(support.client.get(f"{PREFIX}/no-such-route"), 404, "not_found")


def test_405_for_a_method_a_route_does_not_have_has_the_error_shape(
    support: Any, sandbox_id: str
) -> None:
    response = support.client.patch(f"{PREFIX}/sandboxes/{sandbox_id}")
    assert response.status_code == 405
    assert set(response.json()) == {"error"}
