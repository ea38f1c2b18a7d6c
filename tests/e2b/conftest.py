"""E2B's SDK against a served Boxyard: one server per module (a module asks for `server`), a
pipeline's bot with its E2B-shaped key, and a chat's sandbox made by the SDK itself."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings
from e2b import Sandbox

from pipelines import services as pipeline_services
from pipelines.models import Pipeline
from sandboxes.services import Actor
from tests.conftest import CHAT
from tests.servers import Server, served

ADMIN = Actor("admin", "alice")


@dataclass
class Bot:
    """A pipeline's bot and the E2B API key it sets as E2B_API_KEY."""

    pipeline: Pipeline
    key: str

    def opts(self, server: Server) -> dict[str, Any]:
        """The SDK's connection options, as its E2B_* settings would give them."""
        return {
            "api_key": self.key,
            "api_url": f"{server.url}/e2b",
            "sandbox_url": f"{server.url}/e2b/sandbox",
        }


def bot_of(pipeline: Pipeline) -> Bot:
    _, key = pipeline_services.issue_token(pipeline, ADMIN, "e2b", shape="e2b")
    return Bot(pipeline, key)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    """One Boxyard for the module, on the test database; each test's rows and containers
    are removed after it (the database flush, `docker_engine`)."""
    # The server's secret is the tests' too: a sandbox's access token is derived from it.
    with served(tmp_path_factory.mktemp("e2b"), BOXYARD_SECRET_KEY=settings.SECRET_KEY) as running:
        yield running


@pytest.fixture
def support(server: Server, docker_engine: Any, make_pipeline: Any) -> Bot:
    """The support pipeline's bot: one sandbox per chat."""
    return bot_of(make_pipeline(slug="support", scope_template="{launcher_type}_{launcher_id}"))


@pytest.fixture
def billing(support: Bot, make_pipeline: Any) -> Bot:
    """Another pipeline's bot, which must never reach support's sandboxes."""
    return bot_of(make_pipeline(slug="billing", scope_template="{launcher_type}_{launcher_id}"))


@pytest.fixture
def sandbox(server: Server, docker_engine: Any, make_pipeline: Any) -> Sandbox:
    """The agents pipeline's chat sandbox (a workspace of 256 MiB), made by the SDK's
    `Sandbox.create` with the chat's variables as its metadata."""
    bot = bot_of(make_pipeline(slug="agents", workspace_mb=256))
    return Sandbox.create(metadata=CHAT, **bot.opts(server))
