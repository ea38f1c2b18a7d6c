"""Each refusal of E2B's control plane raises the SDK's own exception, with nothing changed: an
unknown sandbox and another pipeline's (not found), a bad or revoked key (authentication), the
pipeline's quota (rate limit), an admin's takeover (refused, saying so) and bad input (400
naming the field)."""

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import httpx
import pytest
from e2b import (
    AuthenticationException,
    RateLimitException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
)

from pipelines import services as pipeline_services
from sandboxes import services
from sandboxes.models import Sandbox as Row
from sandboxes.models import State
from tests.conftest import wait_for
from tests.e2b.conftest import ADMIN, Bot, bot_of
from tests.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHAT = {"launcher_type": "group", "launcher_id": "42"}


def refusals(box_id: str, opts: dict[str, Any]) -> dict[str, Callable[[], object]]:
    """Every call of the SDK on one sandbox that changes or reads it."""
    return {
        "get_info": lambda: Sandbox.get_info(box_id, **opts),
        "connect": lambda: Sandbox.connect(box_id, **opts),
        "set_timeout": lambda: Sandbox.set_timeout(box_id, 60, **opts),
        "pause": lambda: Sandbox.beta_pause(box_id, **opts),
        "get_metrics": lambda: Sandbox.get_metrics(box_id, **opts),
    }


def test_an_unknown_sandbox_is_not_found_on_every_route(server: Server, support: Bot) -> None:
    opts = support.opts(server)
    for unknown in (str(uuid4()), "not-a-sandbox"):
        for call in refusals(unknown, opts).values():
            with pytest.raises(SandboxNotFoundException):
                call()
        assert Sandbox.kill(unknown, **opts) is False


def test_another_pipelines_key_finds_nothing_on_every_route(
    server: Server, support: Bot, billing: Bot
) -> None:
    box = Sandbox.create(metadata={"owner": "support"}, **support.opts(server))
    before = Row.objects.get(pk=box.sandbox_id)
    theirs = billing.opts(server)

    for call in refusals(box.sandbox_id, theirs).values():
        with pytest.raises(SandboxNotFoundException):
            call()
    assert Sandbox.kill(box.sandbox_id, **theirs) is False
    assert Sandbox.list(**theirs).next_items() == []
    with httpx.Client(base_url=f"{server.url}/e2b", headers={"X-API-KEY": billing.key}) as http:
        many = http.get("/sandboxes/metrics", params={"sandbox_ids": box.sandbox_id})
    assert many.json() == {"sandboxes": {}}
    after = Row.objects.get(pk=box.sandbox_id)
    assert (after.state, after.generation, after.expires_at) == (
        State.RUNNING,
        before.generation,
        before.expires_at,
    )  # untouched


def test_a_bad_or_revoked_key_is_an_authentication_error(server: Server, support: Bot) -> None:
    token = support.pipeline.tokens.get()
    wrong = {**support.opts(server), "api_key": "e2b_" + "0" * 40}
    with pytest.raises(AuthenticationException):
        Sandbox.create(**wrong)
    with pytest.raises(AuthenticationException):
        Sandbox.list(**wrong).next_items()

    pipeline_services.revoke_token(token, ADMIN)

    # Another process may know the key for a moment (its cache of keys): wait for the 401.
    def refused() -> bool:
        try:
            Sandbox.list(**support.opts(server)).next_items()
        except AuthenticationException:
            return True
        return False

    wait_for(refused, 10)
    with pytest.raises(AuthenticationException):
        Sandbox.create(**support.opts(server))
    assert not Row.objects.exists()


def test_the_key_also_works_as_a_bearer_token(server: Server, support: Bot) -> None:
    box = Sandbox.create(**support.opts(server))
    headers = {"Authorization": f"Bearer {support.key}"}
    with httpx.Client(base_url=f"{server.url}/e2b", headers=headers) as http:
        answer = http.get(f"/sandboxes/{box.sandbox_id}")
        unknown = http.get(f"/sandboxes/{uuid4()}")
    assert answer.status_code == 200
    assert answer.json()["sandboxID"] == box.sandbox_id
    assert unknown.status_code == 404
    assert unknown.json()["code"] == 404


def test_the_pipelines_quota_is_a_rate_limit(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    small = bot_of(make_pipeline(slug="small", max_live_sandboxes=1))
    Sandbox.create(**small.opts(server))

    with pytest.raises(RateLimitException) as refused:
        Sandbox.create(**small.opts(server))

    assert "max_live_sandboxes=1" in str(refused.value)
    assert Row.objects.filter(pipeline=small.pipeline).count() == 1


def test_an_admins_takeover_refuses_the_sdks_changes(server: Server, support: Bot) -> None:
    box = Sandbox.create(metadata=CHAT, **support.opts(server))
    made = Row.objects.select_related("pipeline").get(pk=box.sandbox_id)
    before = made.expires_at
    services.takeover_lease(made, ADMIN, reason="looking into it")

    for call in (
        lambda: box.set_timeout(60),
        lambda: box.beta_pause(),
        lambda: box.kill(),
        lambda: Sandbox.create(metadata=CHAT, **support.opts(server)),
    ):
        with pytest.raises(SandboxException) as refused:
            call()
        assert refused.value.status_code == 423
        assert "taken over by admin:alice" in str(refused.value)

    after = Row.objects.get(pk=box.sandbox_id)
    assert (after.state, after.expires_at) == (State.RUNNING, before)
    assert box.get_info().sandbox_id == box.sandbox_id  # looking is still allowed


@pytest.mark.parametrize(
    ("create", "field"),
    [
        ({"template": "ubuntu:latest"}, "templateID"),
        ({"timeout": 10**9}, "timeout"),
        ({"metadata": {"launcher_type": "group"}}, "metadata.launcher_id"),
        ({"envs": {"1BAD": "x"}}, "envVars.1BAD"),
    ],
)
def test_bad_input_to_create_is_a_400_naming_the_field(
    server: Server, support: Bot, create: dict[str, Any], field: str
) -> None:
    with pytest.raises(SandboxException) as refused:
        Sandbox.create(**create, **support.opts(server))

    assert refused.value.status_code == 400
    assert f"400: {field}:" in str(refused.value)
    assert not Row.objects.exists()


@pytest.mark.parametrize(
    ("method", "path", "given", "field"),
    [
        ("POST", "/v2/sandboxes", {"json": {"timeout": 60}}, "templateID"),
        ("POST", "/v2/sandboxes", {"json": {"templateID": "base", "timeout": 0}}, "timeout"),
        ("POST", "/v2/sandboxes", {"content": b"{not json"}, "body"),
        ("GET", "/v2/sandboxes", {"params": {"limit": "0"}}, "limit"),
        ("GET", "/v2/sandboxes", {"params": {"state": "sleeping"}}, "state"),
        ("GET", "/v2/sandboxes", {"params": {"nextToken": "x"}}, "nextToken"),
        ("GET", "/v2/sandboxes", {"params": {"order": "up"}}, "order"),
        ("GET", "/v2/sandboxes", {"params": {"startedAfter": "yesterday"}}, "startedAfter"),
    ],
)
def test_bad_input_on_the_wire_is_an_e2b_shaped_400(
    server: Server, support: Bot, method: str, path: str, given: dict[str, Any], field: str
) -> None:
    with httpx.Client(base_url=f"{server.url}/e2b", headers={"X-API-KEY": support.key}) as http:
        answer = http.request(method, path, **given)

    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["code"] == 400
    assert body["message"].startswith(f"{field}:"), body
    assert not Row.objects.exists()
