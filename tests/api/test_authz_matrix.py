"""Who may call what: every route of the bot API against every kind of caller.

- Another pipeline's token gets 404 (never 403, never 2xx) on every route aimed at a sandbox,
  an exec or a pipeline that is not its own, and nothing at all changes: the sandbox row and its
  lease, its execs and events, the container and the workspace files stay exactly as they were.
- No token, a revoked token, a malformed one, or a logged-in user who is not staff: 401.
- A staff user logged in to the dashboard (session cookie) may act on every pipeline.

`ROUTES` lists every operation once; a test checks it equals the operations of the OpenAPI
document, so a new route cannot be added without joining this matrix.
"""

import base64
import io
import json
import tarfile
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from hosts.engines import get_runtime
from pipelines.models import Pipeline, PipelineToken
from sandboxes import services
from sandboxes.models import Event, Exec, Sandbox, ShellSession
from tests.conftest import CHAT

PREFIX = "/api/v1"
NOTES = "notes.txt"
NOTES_TEXT = "support's private notes\n"
SESSION = "work"


def _tar(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


PWNED_TAR = _tar(NOTES, b"pwned")


@dataclass(frozen=True)
class Route:
    """One operation: method, OpenAPI path template (without the prefix), a body or a query.

    Bodies and queries may use `{holder}` and `{epoch}`: the attacker presents the victim's
    own lease holder and current epoch, the strongest claim it could make.
    """

    method: str
    template: str
    body: dict[str, Any] | None = None
    query: dict[str, Any] = field(default_factory=dict)
    lists: bool = False  # a listing: answers 200 with the caller's own objects only
    raw: bytes | None = None  # a body of bytes (an upload), not JSON

    @property
    def label(self) -> str:
        return f"{self.method} {self.template}"


ROUTES: list[Route] = [
    Route("POST", "/sandboxes/open", {"pipeline": "support", "variables": CHAT}),
    Route("GET", "/sandboxes", lists=True),
    Route("GET", "/metrics", lists=True),
    Route("GET", "/sandboxes/{sandbox_id}"),
    Route("DELETE", "/sandboxes/{sandbox_id}", query={"delete_workspace": "true"}),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/exec",
        {
            "cmd": ["sh", "-c", f"echo pwned > /workspace/{NOTES}"],
            "holder": "{holder}",
            "epoch": "{epoch}",
        },
    ),
    Route("GET", "/sandboxes/{sandbox_id}/execs/{exec_id}"),
    Route("GET", "/sandboxes/{sandbox_id}/execs/{exec_id}/output", query={"since_seq": 0}),
    Route("GET", "/sandboxes/{sandbox_id}/execs/{exec_id}/stream", query={"since_seq": 0}),
    Route("GET", "/sandboxes/{sandbox_id}/execs/{exec_id}/output/raw", query={"stream": "stdout"}),
    Route("POST", "/sandboxes/{sandbox_id}/execs/{exec_id}/wait", {"timeout_seconds": 0}),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/execs/{exec_id}/kill",
        {"holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route(
        "PUT",
        "/sandboxes/{sandbox_id}/files",
        {
            "path": NOTES,
            "contents": "pwned",
            "overwrite": True,
            "holder": "{holder}",
            "epoch": "{epoch}",
        },
    ),
    Route("GET", "/sandboxes/{sandbox_id}/files", query={"path": NOTES}),
    Route(
        "DELETE",
        "/sandboxes/{sandbox_id}/files",
        query={"path": NOTES, "holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route("GET", "/sandboxes/{sandbox_id}/files/list", query={"path": "/workspace"}),
    Route(
        "PUT",
        "/sandboxes/{sandbox_id}/files/raw",
        query={"path": NOTES, "holder": "{holder}", "epoch": "{epoch}"},
        raw=b"pwned",
    ),
    Route("GET", "/sandboxes/{sandbox_id}/files/raw", query={"path": NOTES}),
    Route("HEAD", "/sandboxes/{sandbox_id}/files/raw", query={"path": NOTES}),
    Route(
        "PUT",
        "/sandboxes/{sandbox_id}/files/archive",
        query={"path": "/workspace", "format": "tar", "holder": "{holder}", "epoch": "{epoch}"},
        raw=PWNED_TAR,
    ),
    Route("GET", "/sandboxes/{sandbox_id}/files/archive", query={"path": "/workspace"}),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/files/links",
        {"path": NOTES, "method": "PUT", "holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route("GET", "/sandboxes/{sandbox_id}/sessions"),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/sessions",
        {"name": "evil", "cwd": "/tmp", "holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route(
        "DELETE",
        "/sandboxes/{sandbox_id}/sessions/{name}",
        query={"holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route("GET", "/sandboxes/{sandbox_id}/processes"),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/processes/{name}/stdin",
        {"text": "pwned\n", "holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route("GET", "/sandboxes/{sandbox_id}/processes/{name}/output", query={"since_seq": 0}),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/processes/{name}/restart",
        {"holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/code",
        {
            "code": f"open('/workspace/{NOTES}', 'w').write('pwned')",
            "holder": "{holder}",
            "epoch": "{epoch}",
        },
    ),
    Route("GET", "/sandboxes/{sandbox_id}/code/contexts"),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/code/contexts",
        {"language": "python", "holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/code/contexts/{name}/restart",
        query={"holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route(
        "DELETE",
        "/sandboxes/{sandbox_id}/code/contexts/{name}",
        query={"holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route("POST", "/sandboxes/{sandbox_id}/keepalive", {"holder": "{holder}", "epoch": "{epoch}"}),
    Route(
        "POST",
        "/sandboxes/{sandbox_id}/reset",
        {"reason": "pwned", "holder": "{holder}", "epoch": "{epoch}"},
    ),
    Route(
        "POST", "/sandboxes/{sandbox_id}/lease/renew", {"holder": "{holder}", "epoch": "{epoch}"}
    ),
    Route(
        "POST", "/sandboxes/{sandbox_id}/lease/release", {"holder": "{holder}", "epoch": "{epoch}"}
    ),
    Route(
        "POST", "/sandboxes/{sandbox_id}/lease/takeover", {"holder": "billing", "reason": "mine"}
    ),
    Route("POST", "/run", {"pipeline": "support", "language": "sh", "code": "echo pwned"}),
    Route("GET", "/pipelines/{slug}/tools"),
]


@dataclass(frozen=True)
class Target:
    """The victim: support's sandbox, one of its execs, its lease."""

    sandbox_id: str
    exec_id: str
    slug: str
    holder: str
    epoch: int


def _fill(value: Any, target: Target) -> Any:
    if value == "{holder}":
        return target.holder
    if value == "{epoch}":
        return target.epoch
    return value


def request(client: Client, route: Route, target: Target) -> Any:
    path = PREFIX + route.template.format(
        sandbox_id=target.sandbox_id, exec_id=target.exec_id, slug=target.slug, name=SESSION
    )
    query = {key: _fill(value, target) for key, value in route.query.items()}
    if query:
        path += "?" + urlencode(query)
    kwargs: dict[str, Any] = {}
    if route.raw is not None:
        kwargs = {"data": route.raw, "content_type": "application/octet-stream"}
    elif route.body is not None:
        body = {key: _fill(value, target) for key, value in route.body.items()}
        kwargs = {"data": json.dumps(body), "content_type": "application/json"}
    return getattr(client, route.method.lower())(path, **kwargs)


def call(
    client: Client, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None
) -> Any:
    url = PREFIX + path + ("?" + urlencode(query) if query else "")
    if body is None:
        return getattr(client, method)(url)
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json")


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:500])
    if response.request["REQUEST_METHOD"] == "HEAD":
        assert response.content == b""  # the status is all a HEAD answers
        return {}
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return body["error"]


# --- the route list is the API -----------------------------------------------------------------


def test_the_matrix_covers_every_operation_of_the_openapi_document(client: Client) -> None:
    document = client.get(f"{PREFIX}/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in ("get", "post", "put", "patch", "delete", "head", "options")
    }
    tested = {(route.method, PREFIX + route.template) for route in ROUTES}
    assert len(tested) == len(ROUTES), "a route is listed twice"
    assert tested == documented, {
        "in the API, not in the matrix": sorted(documented - tested),
        "in the matrix, not in the API": sorted(tested - documented),
    }


# --- another pipeline's token: 404 and nothing changes ---------------------------------------


def _open_support_sandbox(support: Any) -> Target:
    opened = call(
        support.client, "post", "/sandboxes/open", {"pipeline": "support", "variables": CHAT}
    )
    assert opened.status_code == 200, opened.content
    sandbox_id = opened.json()["sandbox_id"]
    written = call(
        support.client,
        "put",
        f"/sandboxes/{sandbox_id}/files",
        {"path": NOTES, "contents": NOTES_TEXT},
    )
    assert written.status_code == 200, written.content
    ran = call(support.client, "post", f"/sandboxes/{sandbox_id}/exec", {"cmd": ["cat", NOTES]})
    assert ran.status_code == 200 and ran.json()["stdout"] == NOTES_TEXT, ran.content
    session = call(support.client, "post", f"/sandboxes/{sandbox_id}/sessions", {"name": SESSION})
    assert session.status_code == 200, session.content
    lease = Sandbox.objects.select_related("lease").get(pk=sandbox_id).lease
    return Target(
        sandbox_id=sandbox_id,
        exec_id=ran.json()["exec_id"],
        slug="support",
        holder=lease.holder,
        epoch=lease.epoch,
    )


def _database_state(sandbox_id: str, pipeline: Pipeline) -> dict[str, Any]:
    sandbox = Sandbox.objects.select_related("lease").get(pk=sandbox_id)
    lease = sandbox.lease
    return {
        "sandbox": {
            name: getattr(sandbox, name)
            for name in (
                "state",
                "stop_reason",
                "status_detail",
                "generation",
                "container_id",
                "container_name",
                "volume_name",
                "image",
                "scope_key",
                "started_at",
                "last_activity_at",
                "stopped_at",
                "destroyed_at",
                "expires_at",
                "updated_at",
            )
        },
        "lease": {
            name: getattr(lease, name)
            for name in ("holder", "epoch", "expires_at", "acquired_at", "taken_over_from")
        },
        "execs": Exec.objects.filter(sandbox_id=sandbox_id).count(),
        "sessions": sorted(
            ShellSession.objects.filter(sandbox_id=sandbox_id).values_list("name", "cwd")
        ),
        "sandbox events": Event.objects.filter(sandbox_id=sandbox_id).count(),
        "pipeline events": Event.objects.filter(pipeline=pipeline).count(),
        "pipeline sandboxes": Sandbox.objects.filter(pipeline=pipeline).count(),
        "pipeline tokens": PipelineToken.objects.filter(pipeline=pipeline).count(),
    }


def _workspace_as_support_sees_it(support: Any, sandbox_id: str) -> dict[str, Any]:
    read = call(support.client, "get", f"/sandboxes/{sandbox_id}/files", query={"path": NOTES})
    assert read.status_code == 200, read.content
    listing = call(
        support.client, "get", f"/sandboxes/{sandbox_id}/files/list", query={"path": "/workspace"}
    )
    assert listing.status_code == 200, listing.content
    return {
        "notes": read.json()["contents"],
        "entries": sorted(
            (entry["path"], entry["type"], entry["size"], entry["mtime_unix"])
            for entry in listing.json()["entries"]
        ),
    }


def _container_state(sandbox_id: str) -> tuple[str, str]:
    sandbox = Sandbox.objects.get(pk=sandbox_id)
    info = get_runtime().inspect_container(sandbox.container_id)
    assert info is not None, "support's container is gone"
    return info.id, info.status


@pytest.mark.docker
@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.label)
def test_another_pipelines_token_gets_404_and_changes_nothing(
    route: Route, support: Any, billing: Any, docker_engine: Any
) -> None:
    target = _open_support_sandbox(support)
    files_before = _workspace_as_support_sees_it(support, target.sandbox_id)
    db_before = _database_state(target.sandbox_id, support.pipeline)
    container_before = _container_state(target.sandbox_id)

    response = request(billing.client, route, target)

    if route.lists:
        assert response.status_code == 200, response.content
        assert target.sandbox_id not in response.content.decode()
        for query in ({}, {"scope_key": target.holder}, {"status": "running"}):
            listed = call(billing.client, "get", "/sandboxes", query=query)
            assert listed.status_code == 200 and listed.json() == {"sandboxes": []}, (
                query,
                listed.content,
            )
    else:
        assert_error(response, 404, "not_found")
        # Nothing of support's leaks into the answer.
        text = response.content.decode()
        assert target.holder not in text and NOTES_TEXT.strip() not in text, text

    assert _database_state(target.sandbox_id, support.pipeline) == db_before
    assert _container_state(target.sandbox_id) == container_before
    assert _workspace_as_support_sees_it(support, target.sandbox_id) == files_before
    # And support still acts as before, under the same lease.
    again = call(
        support.client,
        "post",
        f"/sandboxes/{target.sandbox_id}/exec",
        {"cmd": ["cat", NOTES], "holder": target.holder, "epoch": target.epoch},
    )
    assert again.status_code == 200 and again.json()["stdout"] == NOTES_TEXT, again.content


@pytest.mark.docker
@pytest.mark.django_db
def test_an_exec_id_of_another_pipeline_is_not_found_under_ones_own_sandbox(
    support: Any, billing: Any, docker_engine: Any
) -> None:
    target = _open_support_sandbox(support)
    own = call(
        billing.client, "post", "/sandboxes/open", {"pipeline": "billing", "variables": CHAT}
    )
    assert own.status_code == 200, own.content
    mixed = Target(
        sandbox_id=own.json()["sandbox_id"],
        exec_id=target.exec_id,
        slug="billing",
        holder=own.json()["lease"]["holder"],
        epoch=own.json()["lease"]["epoch"],
    )
    for route in ROUTES:
        if "{exec_id}" in route.template:
            assert_error(request(billing.client, route, mixed), 404, "not_found")


# --- no valid credentials: 401 ------------------------------------------------------------------


@pytest.fixture
def fake_target(fake_runtime: Any, support: Any) -> Target:
    """Support's sandbox and exec on the fake engine: the 401 matrix never reaches an engine."""
    actor = services.Actor("bot", "support")
    opened = services.open_sandbox(support.pipeline, CHAT, actor)
    record = services.run_exec(
        opened.sandbox, services.clean_request(opened.sandbox, cmd=["true"]), actor
    )
    return Target(
        sandbox_id=str(opened.sandbox.pk),
        exec_id=str(record.pk),
        slug="support",
        holder=opened.lease.holder,
        epoch=opened.lease.epoch,
    )


def _malformed(token: str) -> list[str]:
    return [
        f"Bearer {token[:-1]}",  # one character short
        f"Bearer {token}x",  # one character more
        f"Bearer {token} {token}",
        f"Token {token}",  # another scheme
        f"Basic {base64.b64encode(f'support:{token}'.encode()).decode()}",
        f"Bearer{token}",  # no space
        "Bearer ",
        "Bearer",
        "Bearer \x00",
        "Bearer " + "a" * 5000,
    ]


def _credentials(kind: str, support: Any, django_user_model: Any) -> list[Client]:
    if kind == "none":
        return [Client()]
    if kind == "revoked":
        row, token = PipelineToken.issue(support.pipeline, name="revoked")
        row.revoke()
        return [Client(HTTP_AUTHORIZATION=f"Bearer {token}")]
    if kind == "malformed":
        return [Client(HTTP_AUTHORIZATION=header) for header in _malformed(support.token)]
    if kind == "non-staff session":
        clients = []
        for name, fields in (
            ("visitor", {"is_staff": False}),
            ("former-admin", {"is_staff": True, "is_active": False}),
        ):
            user = django_user_model.objects.create_user(username=name, password="x", **fields)
            session = Client()
            session.force_login(user)
            clients.append(session)
        return clients
    raise AssertionError(kind)


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["none", "revoked", "malformed", "non-staff session"])
@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.label)
def test_without_a_valid_credential_every_route_is_401(
    route: Route,
    kind: str,
    support: Any,
    fake_target: Target,
    django_user_model: Any,
    fake_runtime: Any,
) -> None:
    before = _database_state(fake_target.sandbox_id, support.pipeline)
    engine_calls = len(fake_runtime.execs)
    for client in _credentials(kind, support, django_user_model):
        response = request(client, route, fake_target)
        assert_error(response, 401, "unauthorized")
        assert response.headers.get("WWW-Authenticate") == "Bearer"
    assert _database_state(fake_target.sandbox_id, support.pipeline) == {
        **before,
        "pipeline tokens": before["pipeline tokens"] + (kind == "revoked"),
    }
    assert len(fake_runtime.execs) == engine_calls


@pytest.mark.django_db
def test_the_valid_token_passes_where_the_malformed_ones_fail(
    support: Any, fake_target: Target
) -> None:
    """The 401s above are about the credential: the same call with the real token works."""
    route = next(route for route in ROUTES if route.template == "/sandboxes/{sandbox_id}")
    assert request(support.client, route, fake_target).status_code == 200
    lower_case_scheme = Client(HTTP_AUTHORIZATION=f"bearer {support.token}")
    assert request(lower_case_scheme, route, fake_target).status_code == 200


# --- staff session: every pipeline ---------------------------------------------------------------


@pytest.fixture
def staff() -> Client:
    user = get_user_model().objects.create_user(username="alice", password="x", is_staff=True)
    session = Client()  # CSRF checks are not enforced by the test client
    session.force_login(user)
    return session


@pytest.mark.docker
@pytest.mark.django_db
def test_a_staff_session_acts_on_every_pipelines_sandboxes(
    support: Any, billing: Any, staff: Client, docker_engine: Any
) -> None:
    opened = {}
    for bot in (support, billing):
        slug = bot.pipeline.slug
        answer = call(bot.client, "post", "/sandboxes/open", {"pipeline": slug, "variables": CHAT})
        assert answer.status_code == 200, answer.content
        opened[slug] = answer.json()["sandbox_id"]

    listed = call(staff, "get", "/sandboxes")
    assert listed.status_code == 200
    assert {row["sandbox_id"] for row in listed.json()["sandboxes"]} == set(opened.values())

    for slug, sandbox_id in opened.items():
        got = call(staff, "get", f"/sandboxes/{sandbox_id}")
        assert got.status_code == 200 and got.json()["pipeline"] == slug
        body = {"path": NOTES, "contents": f"by alice for {slug}"}
        wrote = call(staff, "put", f"/sandboxes/{sandbox_id}/files", body)
        assert wrote.status_code == 200, wrote.content
        ran = call(staff, "post", f"/sandboxes/{sandbox_id}/exec", {"cmd": ["cat", NOTES]})
        assert ran.status_code == 200 and ran.json()["stdout"] == f"by alice for {slug}", (
            ran.content
        )
        exec_id = ran.json()["exec_id"]
        assert call(staff, "get", f"/sandboxes/{sandbox_id}/execs/{exec_id}").status_code == 200
        assert call(staff, "get", f"/sandboxes/{sandbox_id}/files/list").status_code == 200
        assert call(staff, "get", f"/pipelines/{slug}/tools").status_code == 200
        again = call(staff, "post", "/sandboxes/open", {"pipeline": slug, "variables": CHAT})
        assert again.status_code == 200 and again.json()["sandbox_id"] == sandbox_id, again.content
        renewed = call(staff, "post", f"/sandboxes/{sandbox_id}/lease/renew", {})
        assert renewed.status_code == 200, renewed.content
        closed = call(
            staff, "delete", f"/sandboxes/{sandbox_id}", query={"delete_workspace": "true"}
        )
        assert closed.status_code == 200, closed.content

    for slug in opened:
        compute = call(
            staff, "post", "/run", {"pipeline": slug, "language": "sh", "code": "echo hi"}
        )
        assert compute.status_code == 200 and compute.json()["stdout"] == "hi\n", compute.content
