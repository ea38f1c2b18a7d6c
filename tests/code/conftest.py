"""A served Boxyard for the code interpreter's tests (one per module), and a pipeline whose
sandboxes run Boxyard's default image (the one with the kernels; the tests' own image has
no Python)."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from django.conf import settings

from pipelines.models import Pipeline, PipelineToken
from tests.conftest import CHAT
from tests.servers import Server, served

IMAGE = settings.BOXYARD_DEFAULT_IMAGE


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    with served(
        tmp_path_factory.mktemp("code"),
        BOXYARD_IMAGE_ALLOWLIST=f"{settings.BOXYARD_TEST_IMAGE},{IMAGE}",
    ) as running:
        yield running


@dataclass
class Coder:
    """A pipeline's bot on the served Boxyard: its token, and the sandbox of a chat."""

    pipeline: Pipeline
    url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> requests.Response:
        return requests.request(
            method,
            f"{self.url}/api/v1{path}",
            headers={**self.headers, **(headers or {})},
            timeout=120,
            **kwargs,
        )

    def open(self, chat: dict[str, str] | None = None) -> str:
        answer = self.call(
            "post",
            "/sandboxes/open",
            json={"pipeline": self.pipeline.slug, "variables": chat or CHAT},
        )
        assert answer.status_code in (200, 201), answer.text
        return str(answer.json()["sandbox_id"])

    def run(self, sandbox_id: str, code: str, **fields: Any) -> dict[str, Any]:
        answer = self.call("post", f"/sandboxes/{sandbox_id}/code", json={"code": code, **fields})
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


def coder_of(server: Server, pipeline: Pipeline) -> Coder:
    _, token = PipelineToken.issue(pipeline, name="code")
    return Coder(pipeline, server.url, token)


@pytest.fixture
def coder(server: Server, docker_engine: Any, make_pipeline: Any) -> Coder:
    return coder_of(server, make_pipeline(slug="analysts", image=IMAGE))


@pytest.fixture
def other(server: Server, docker_engine: Any, make_pipeline: Any) -> Coder:
    return coder_of(server, make_pipeline(slug="others", image=IMAGE))
