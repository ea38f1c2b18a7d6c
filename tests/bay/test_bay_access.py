"""Who may call the Bay API and what it keeps: another pipeline's token finds nothing (404 on
every route), no token is 401, an admin's takeover refuses the client's changes, and an
`Idempotency-Key` replays the first answer, refuses another request, and is capped."""

from typing import Any

import httpx
import pytest
from shipyard_neo import BayClient
from shipyard_neo.errors import (
    ConflictError,
    NotFoundError,
    QuotaExceededError,
    UnauthorizedError,
)

from pipelines.models import Pipeline
from sandboxes import services
from sandboxes.bay.models import IdempotentCall
from sandboxes.models import Event, Sandbox
from sandboxes.services import Actor
from tests.bay.conftest import KEYS_CAP, Bay

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

FILES = "/filesystem/files?path=a.txt"
# Every route that names a sandbox: (method, path under the sandbox, JSON body).
ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "", None),
    ("DELETE", "", None),
    ("POST", "/stop", None),
    ("POST", "/keepalive", None),
    ("POST", "/extend_ttl", {"extend_by": 10}),
    ("POST", "/shell/exec", {"command": "true"}),
    ("POST", "/python/exec", {"code": "pass"}),
    ("POST", "/browser/exec", {"cmd": "snapshot"}),
    ("POST", "/browser/exec_batch", {"commands": ["snapshot"]}),
    ("GET", FILES, None),
    ("PUT", "/filesystem/files", {"path": "a.txt", "content": "x"}),
    ("DELETE", FILES, None),
    ("GET", "/filesystem/directories?path=.", None),
    ("GET", "/filesystem/download?path=a.txt", None),
]


def created(bay: Bay, **body: Any) -> dict[str, Any]:
    with http(bay) as client:
        answer = client.post("/v1/sandboxes", json=body)
    assert answer.status_code == 200, answer.text
    made: dict[str, Any] = answer.json()
    return made


def http(bay: Bay, token: str | None = "") -> httpx.Client:
    headers = {"Authorization": f"Bearer {token or bay.token}"} if token is not None else {}
    return httpx.Client(base_url=bay.endpoint, headers=headers, timeout=60)


def test_another_pipelines_token_finds_nothing_on_every_route(support: Bay, billing: Bay) -> None:
    sandbox = created(support)
    base = f"/v1/sandboxes/{sandbox['id']}"
    with http(billing) as client:
        for method, path, body in ROUTES:
            answer = client.request(method, base + path, json=body)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "not_found", (method, path)
        upload = client.post(
            base + "/filesystem/upload", data={"path": "a.txt"}, files={"file": b"x"}
        )
        assert upload.status_code == 404
        assert client.get("/v1/sandboxes").json()["items"] == []
        assert (
            client.post("/v1/sandboxes", json={"cargo_id": sandbox["cargo_id"]}).status_code == 404
        )

    async def look(client: BayClient) -> None:
        with pytest.raises(NotFoundError):
            await client.get_sandbox(sandbox["id"])

    billing.run(look)
    assert Sandbox.objects.get(pk=sandbox["id"]).state == "running"  # untouched
    assert not Event.objects.filter(sandbox_id=sandbox["id"], actor__startswith="bot:billing")


def test_no_token_is_401_and_a_wrong_one_raises_the_sdks_error(support: Bay) -> None:
    sandbox = created(support)
    base = f"/v1/sandboxes/{sandbox['id']}"
    with http(support, token=None) as client:
        for method, path, body in [("POST", "", {}), ("GET", "", None), *ROUTES]:
            target = "/v1/sandboxes" if (method, path) == ("POST", "") else base + path
            answer = client.request(method, target, json=body)
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "unauthorized"
        assert client.get("/v1/profiles").status_code == 401

    async def create(client: BayClient) -> None:
        with pytest.raises(UnauthorizedError):
            await client.create_sandbox()

    Bay(support.pipeline, support.endpoint, "not-a-token").run(create)
    assert Sandbox.objects.filter(pipeline=support.pipeline).count() == 1


def test_an_admins_takeover_refuses_the_clients_changes(support: Bay, alice_actor: Actor) -> None:
    sandbox = created(support)
    row = Sandbox.objects.get(pk=sandbox["id"])
    services.takeover_lease(row, alice_actor, reason="checking the bot's work")

    async def work(client: BayClient) -> list[ConflictError]:
        bay_sandbox = await client.get_sandbox(sandbox["id"])
        refused = []
        with pytest.raises(ConflictError) as shell:
            await bay_sandbox.shell.exec("touch /workspace/mine")
        refused.append(shell.value)
        with pytest.raises(ConflictError) as write:
            await bay_sandbox.filesystem.write_file("mine.txt", "x")
        refused.append(write.value)
        return refused

    for error in support.run(work):
        assert "taken over" in error.message and error.details["code"] == "taken_over"
    with http(support) as client:
        answer = client.post(f"/v1/sandboxes/{sandbox['id']}/shell/exec", json={"command": "true"})
    assert answer.status_code == 423
    services.release_lease(row, alice_actor, force=True)

    async def after(client: BayClient) -> int | None:
        return (await (await client.get_sandbox(sandbox["id"])).shell.exec("true")).exit_code

    assert support.run(after) == 0


def test_an_idempotency_key_replays_the_first_answer_and_refuses_another_request(
    support: Bay,
) -> None:
    async def work(client: BayClient) -> dict[str, Any]:
        first = await client.create_sandbox(ttl=600, idempotency_key="create-1")
        again = await client.create_sandbox(ttl=600, idempotency_key="create-1")
        with pytest.raises(ConflictError) as other:
            await client.create_sandbox(ttl=60, idempotency_key="create-1")
        await first.extend_ttl(30, idempotency_key="extend-1")
        once = first.expires_at
        await first.extend_ttl(30, idempotency_key="extend-1")
        return {
            "ids": (first.id, again.id),
            "other": other.value,
            "once": once,
            "twice": first.expires_at,
        }

    seen = support.run(work)
    assert seen["ids"][0] == seen["ids"][1]
    assert Sandbox.objects.filter(pipeline=support.pipeline).count() == 1
    assert "another request" in seen["other"].message
    assert seen["once"] == seen["twice"]  # extended once
    assert Event.objects.filter(action="sandbox.lifetime_set").count() == 2  # create, extend


def test_a_pipeline_holds_a_bounded_number_of_keys(support: Bay, billing: Bay) -> None:
    sandbox = created(support, ttl=60)
    path = f"/v1/sandboxes/{sandbox['id']}/extend_ttl"
    with http(support) as client:
        for number in range(KEYS_CAP):
            answer = client.post(
                path, json={"extend_by": 1}, headers={"Idempotency-Key": f"k{number}"}
            )
            assert answer.status_code == 200, answer.text
        refused = client.post(path, json={"extend_by": 1}, headers={"Idempotency-Key": "one-more"})
        replayed = client.post(path, json={"extend_by": 1}, headers={"Idempotency-Key": "k0"})
        without = client.post(path, json={"extend_by": 1})
        too_long = client.post(path, json={"extend_by": 1}, headers={"Idempotency-Key": "k" * 201})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded"
    assert replayed.status_code == 200 and replayed.headers["Idempotent-Replayed"] == "true"
    assert without.status_code == 200
    assert too_long.status_code == 400
    assert too_long.json()["error"]["details"]["field"] == "Idempotency-Key"
    assert IdempotentCall.objects.filter(pipeline=support.pipeline).count() == KEYS_CAP
    # Another pipeline's keys are its own.
    with http(billing) as client:
        other = client.post("/v1/sandboxes", json={}, headers={"Idempotency-Key": "k0"})
    assert other.status_code == 200


def test_a_sandbox_past_the_pipelines_quota_is_the_sdks_quota_error(support: Bay) -> None:
    Pipeline.objects.filter(pk=support.pipeline.pk).update(max_live_sandboxes=1)

    async def work(client: BayClient) -> QuotaExceededError:
        await client.create_sandbox()
        with pytest.raises(QuotaExceededError) as refused:
            await client.create_sandbox()
        return refused.value

    refused = support.run(work)
    assert "max_live_sandboxes=1" in refused.message
    assert Sandbox.objects.filter(pipeline=support.pipeline).count() == 1
