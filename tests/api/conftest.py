"""Fixtures for the bot API: two pipelines (support, billing) with a token each, and a
served Boxyard."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from pipelines.models import Pipeline, PipelineToken
from tests.servers import Server, served


@dataclass
class Bot:
    """A pipeline's bot: its pipeline, its token and a test client that sends the token."""

    pipeline: Pipeline
    token: str
    client: Client

    def call(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs = {"data": body, "content_type": "application/json"}
        elif query:
            kwargs = {"data": query} if method == "get" else {"QUERY_STRING": _qs(query)}
        return getattr(self.client, method)(f"/api/v1{path}", **kwargs)


def _qs(query: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    return urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})


def _bot(pipeline: Pipeline) -> Bot:
    _, token = PipelineToken.issue(pipeline, name="tests")
    return Bot(pipeline=pipeline, token=token, client=Client(HTTP_AUTHORIZATION=f"Bearer {token}"))


@pytest.fixture(autouse=True)
def _test_host(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]


@pytest.fixture
def support(make_pipeline: Any) -> Bot:
    """The support pipeline's bot (scope: per chat)."""
    return _bot(make_pipeline(slug="support"))


@pytest.fixture
def billing(make_pipeline: Any) -> Bot:
    """Another pipeline's bot: must never see or touch support's sandboxes."""
    return _bot(make_pipeline(slug="billing"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    """One Boxyard served with the default settings (`manage.py serve`), on the test database,
    for each module here that needs no settings of its own (a server start costs seconds):
    each test's rows and containers are removed after it (the database flush,
    `docker_engine`). One per module, never longer: its worker's periodic work (reconcile,
    the fleet's samples) acts on the same database and engine as the tests after it."""
    with served(tmp_path_factory.mktemp("served")) as running:
        yield running
