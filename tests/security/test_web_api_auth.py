"""Who the bot API thinks is calling, as a real browser or bot reaches it (CSRF enforced, as
it is outside Django's test client), and what its document promises about `GET /sandboxes`.

- A call that changes something (POST, PUT, DELETE) without a token, or with a revoked or
  malformed one, is 401 with `WWW-Authenticate: Bearer`, exactly like a GET: there is no
  session for a CSRF check to protect, so "CSRF check failed" (403) would be a wrong answer.
- An admin's session cookie still needs its CSRF token to change anything (403 without it),
  and works with it.
- `status` of `GET /sandboxes` is declared as the enum of sandbox states: every value the
  document allows is answered 200, and Schemathesis, checking that the API accepts what its
  document allows and refuses what it rules out, finds nothing on that operation.
"""

import re
from typing import Any

import pytest
from django.test import Client

from pipelines.models import PipelineToken
from sandboxes.models import State
from tests.api.conftest import Bot, _bot

CHANGING = ("post", "put", "delete")
IDS = {
    "sandbox_id": "00000000-0000-0000-0000-000000000001",
    "exec_id": "00000000-0000-0000-0000-000000000002",
    "name": "default",
    "slug": "support",
}


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver", "localhost"]  # the test client's, Schemathesis'


@pytest.fixture
def support(make_pipeline: Any) -> Bot:
    return _bot(make_pipeline(slug="support"))


def _document() -> dict[str, Any]:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def _changing_routes() -> list[tuple[str, str]]:
    routes = []
    for template, operations in _document()["paths"].items():
        url = re.sub(r"\{(\w+)\}", lambda match: IDS[match.group(1)], template)
        routes.extend((method, url) for method in operations if method in CHANGING)
    return routes


def _strict(**headers: str) -> Client:
    """A client that, like a browser or a bot, gets Django's CSRF checks."""
    return Client(enforce_csrf_checks=True, **headers)


def _credentials(bot: Bot) -> dict[str, Client]:
    revoked, token = PipelineToken.issue(bot.pipeline, name="revoked")
    revoked.revoke()
    return {
        "no token": _strict(),
        "a revoked token": _strict(HTTP_AUTHORIZATION=f"Bearer {token}"),
        "a malformed token": _strict(HTTP_AUTHORIZATION=f"Bearer {bot.token}x"),
        "another scheme": _strict(HTTP_AUTHORIZATION=f"Token {bot.token}"),
    }


@pytest.mark.django_db
def test_a_change_without_a_valid_token_is_401_like_a_read(support: Bot) -> None:
    routes = _changing_routes()
    assert len(routes) >= 15  # every changing operation of the document, not a sample
    for kind, client in _credentials(support).items():
        for method, url in [*routes, ("get", "/api/v1/sandboxes")]:
            body = {} if method == "get" else {"data": "{}", "content_type": "application/json"}
            response = getattr(client, method)(url, **body)
            assert response.status_code == 401, (kind, method, url, response.content[:200])
            assert response["WWW-Authenticate"] == "Bearer", (kind, method, url)
            assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.django_db
def test_a_valid_token_needs_no_csrf_token(support: Bot) -> None:
    bot = _strict(HTTP_AUTHORIZATION=f"Bearer {support.token}")
    ran = bot.post(
        "/api/v1/sandboxes/open",
        data={"pipeline": "nope", "variables": {}},
        content_type="application/json",
    )
    assert ran.status_code == 404, ran.content  # reached the view: no such pipeline


def _session(django_user_model: Any, **fields: Any) -> Client:
    client = _strict()
    client.force_login(django_user_model.objects.create_user(password="x", **fields))
    client.get("/")  # the dashboard sets the CSRF cookie, as a browser would have it
    return client


@pytest.mark.django_db
def test_an_admin_session_still_needs_its_csrf_token(django_user_model: Any, pipeline: Any) -> None:
    admin = _session(django_user_model, username="alice", is_staff=True)
    csrf = admin.cookies["csrftoken"].value
    forged = admin.post(
        "/api/v1/sandboxes/open",
        data={"pipeline": pipeline.slug, "variables": {}},
        content_type="application/json",
    )
    assert forged.status_code == 403, forged.content
    assert forged.json()["error"]["message"] == "CSRF check Failed"
    fair = admin.delete(f"/api/v1/sandboxes/{IDS['sandbox_id']}", HTTP_X_CSRFTOKEN=csrf)
    assert fair.status_code == 404, fair.content  # past authentication: no such sandbox
    assert admin.get("/api/v1/sandboxes").status_code == 200  # reads need no CSRF token


@pytest.mark.django_db
def test_a_session_that_is_not_an_admins_is_401(django_user_model: Any) -> None:
    for fields in (
        {"username": "mallory"},
        {"username": "former", "is_staff": True, "is_active": False},
    ):
        visitor = _strict()
        visitor.force_login(django_user_model.objects.create_user(password="x", **fields))
        refused = visitor.post("/api/v1/sandboxes/open", data={}, content_type="application/json")
        assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer", fields


def test_the_document_names_no_key_twice(db: None) -> None:
    """Python's JSON reader keeps the last of two equal keys, the browsable documentation's
    refuses the document (and Schemathesis from outside reads it as the former does)."""
    import json

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    json.loads(Client().get("/api/v1/openapi.json").content, object_pairs_hook=unique)


# --- GET /sandboxes?status= ---------------------------------------------------------------------


@pytest.mark.django_db
def test_the_status_filter_declares_the_states_it_takes(support: Bot) -> None:
    operation = _document()["paths"]["/api/v1/sandboxes"]["get"]
    status = next(
        parameter for parameter in operation["parameters"] if parameter["name"] == "status"
    )
    assert _enum(status["schema"]) == set(State.values)
    for value in State.values:
        listed = support.client.get("/api/v1/sandboxes", {"status": value})
        assert listed.status_code == 200, (value, listed.content)
    refused = support.client.get("/api/v1/sandboxes", {"status": "sleeping"})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "status"


def _enum(schema: dict[str, Any]) -> set[str]:
    """The values a parameter's schema allows, through `anyOf` and `$ref`s."""
    document = _document()
    found: set[str] = set()
    pending = [schema]
    while pending:
        part = pending.pop()
        if "$ref" in part:
            name = part["$ref"].rsplit("/", 1)[1]
            pending.append(document["components"]["schemas"][name])
        found.update(value for value in part.get("enum", []) if value is not None)
        pending.extend(part.get("anyOf", []))
        if part.get("type") == "string" and "enum" not in part:
            found.add("<any string>")
    return found


@pytest.mark.django_db(transaction=True)  # the WSGI app closes connections after each request
def test_schemathesis_finds_nothing_on_the_status_filter(support: Bot) -> None:
    """Schemathesis' own checks on `GET /sandboxes`, positive and negative data: a value the
    document allows is accepted, one it rules out is refused, never a 5xx."""
    import schemathesis
    from django.core.wsgi import get_wsgi_application
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis.checks import not_a_server_error
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import (
        negative_data_rejection,
        positive_data_acceptance,
        response_schema_conformance,
        status_code_conformance,
    )

    config = schemathesis.Config.from_dict(
        {"generation": {"mode": "all", "database": "none", "with-security-parameters": False}}
    )
    schema = schemathesis.openapi.from_wsgi(
        "/api/v1/openapi.json", get_wsgi_application(), config=config
    )
    operation = schema["/api/v1/sandboxes"]["GET"]
    checks = [
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
        positive_data_acceptance,
        negative_data_rejection,
    ]
    seen: list[int] = []

    @given(case=st.one_of(operation.as_strategy(mode) for mode in GenerationMode))
    @settings(
        max_examples=60,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(headers={"Authorization": f"Bearer {support.token}"})
        case.validate_response(response, checks=checks)
        seen.append(response.status_code)

    run()
    assert 200 in seen and 400 in seen, seen  # both kinds of data were tried
