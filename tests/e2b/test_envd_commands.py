"""The E2B SDK's commands and pty, unchanged, on a Boxyard sandbox through `/e2b/sandbox`:
each call is Boxyard's exec or terminal service, seen in the sandbox's history."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from sandboxes.e2b.common import ENVD_VERSION
from tests.e2b.envd import EnvdSandbox, sdk_sandbox
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    # The server derives a sandbox's access token from the same secret as the tests.
    with served(tmp_path_factory.mktemp("envd"), BOXYARD_SECRET_KEY=settings.SECRET_KEY) as running:
        yield running


@pytest.fixture
def sandbox(server: Server, docker_engine: Any, make_pipeline: Any) -> EnvdSandbox:
    return sdk_sandbox(server, make_pipeline(slug="agents"))


def test_a_command_runs_in_the_foreground_in_home(sandbox: EnvdSandbox) -> None:
    out: list[str] = []
    result = sandbox.commands.run("echo hi; pwd; echo oops >&2", on_stdout=out.append)
    assert result.exit_code == 0
    assert result.stdout == "hi\n/home/user\n"
    assert result.stderr == "oops\n"
    assert "".join(out) == result.stdout
    assert ENVD_VERSION
