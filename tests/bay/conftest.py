"""A served Boxyard for the Bay API's tests (one per module), and the pipelines whose tokens
AstrBot's Bay client sends: support (Python in its image) and billing (another pipeline)."""

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from django.conf import settings
from shipyard_neo import BayClient

from pipelines.models import Pipeline, PipelineToken
from tests.servers import Server, served

T = TypeVar("T")
# An image with Python, for `python/exec`; the tests' own image has none.
PYTHON_IMAGE = settings.BOXYARD_DEFAULT_IMAGE
# Few idempotency keys, so that the cap is reached in a test.
KEYS_CAP = 4


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    with served(
        tmp_path_factory.mktemp("bay"),
        BOXYARD_IMAGE_ALLOWLIST=f"{settings.BOXYARD_TEST_IMAGE},{PYTHON_IMAGE}",
        BOXYARD_BAY_IDEMPOTENCY_KEYS=str(KEYS_CAP),
    ) as running:
        yield running


@dataclass
class Bay:
    """A pipeline as AstrBot sees it: the endpoint and the token of its settings."""

    pipeline: Pipeline
    endpoint: str
    token: str

    def run(self, work: Callable[[BayClient], Awaitable[T]]) -> T:
        """`work` done with the SDK's client, as AstrBot's booter holds it."""

        async def session() -> T:
            async with BayClient(endpoint_url=self.endpoint, access_token=self.token) as client:
                return await work(client)

        return asyncio.run(session())


def bay_of(server: Server, pipeline: Pipeline) -> Bay:
    _, token = PipelineToken.issue(pipeline, name="astrbot")
    return Bay(pipeline, f"{server.url}/bay", token)


@pytest.fixture
def support(server: Server, docker_engine: Any, make_pipeline: Any) -> Bay:
    return bay_of(server, make_pipeline(slug="support", image=PYTHON_IMAGE))


@pytest.fixture
def billing(support: Bay, server: Server, make_pipeline: Any) -> Bay:
    """Another pipeline's token: it must never reach support's sandboxes."""
    return bay_of(server, make_pipeline(slug="billing"))
