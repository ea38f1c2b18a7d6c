"""A served Boxyard for each E2B test module (one server a module keeps the suite fast), and
a chat's sandbox driven by the SDK's own clients."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from tests.e2b.envd import EnvdSandbox, sdk_sandbox
from tests.servers import Server, served


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    """One Boxyard for the module, on the test database; each test's rows and containers are
    removed after it. It derives a sandbox's access token from the same secret as the tests."""
    with served(tmp_path_factory.mktemp("envd"), BOXYARD_SECRET_KEY=settings.SECRET_KEY) as running:
        yield running


@pytest.fixture
def sandbox(server: Server, docker_engine: Any, make_pipeline: Any) -> EnvdSandbox:
    """The agents pipeline's chat sandbox (a workspace of 256 MiB), as the SDK reaches it."""
    return sdk_sandbox(server, make_pipeline(slug="agents", workspace_mb=256))
