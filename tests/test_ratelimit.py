"""The operator's rate limit per pipeline (BOXYARD_RATE_LIMIT), on the served Boxyard: counted
in the server's memory in the embedded mode, in Redis in the distributed one (CI runs this
module in both)."""

from typing import Any

import httpx
import pytest

from pipelines.models import PipelineToken
from tests.servers import served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def token_of(make_pipeline: Any, slug: str) -> str:
    _, token = PipelineToken.issue(make_pipeline(slug=slug), name="rate")
    return token


def test_the_rate_limit_refuses_a_pipeline_past_it(
    tmp_path: Any, django_db_setup: None, engine: Any, make_pipeline: Any
) -> None:
    fast = token_of(make_pipeline, "fast")
    calm = token_of(make_pipeline, "calm")
    with served(tmp_path, BOXYARD_RATE_LIMIT="5/minute") as limited:
        codes = [
            httpx.get(
                f"{limited.url}/api/v1/sandboxes",
                headers={"Authorization": f"Bearer {fast}"},
                timeout=10,
            )
            for _ in range(6)
        ]
        assert [answer.status_code for answer in codes] == [200] * 5 + [429]
        assert codes[-1].json()["error"]["code"] == "rate_limited"
        assert 1 <= int(codes[-1].headers["Retry-After"]) <= 60
        # The same token as E2B's SDKs send it is the same pipeline's call, counted as such.
        as_e2b_key = httpx.get(
            f"{limited.url}/e2b/v2/sandboxes", headers={"X-API-KEY": fast}, timeout=10
        )
        assert as_e2b_key.status_code == 429
        calm_answer = httpx.get(
            f"{limited.url}/api/v1/sandboxes",
            headers={"Authorization": f"Bearer {calm}"},
            timeout=10,
        )
        assert calm_answer.status_code == 200
