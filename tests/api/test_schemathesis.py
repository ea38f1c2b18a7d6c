"""Property-based fuzzing of the bot API from its own OpenAPI document (Schemathesis 4).

Every operation of `/api/v1/openapi.json` gets generated requests, valid and invalid
(`mode = "all"`), sent in-process to the real Django app (WSGI) with a valid pipeline token,
against the real engine. About half the examples of an operation (`uses_real_ids`) have their
ids replaced by those of a live sandbox, one of its execs and the token's pipeline, so the
requests reach the services and the engine rather than stopping at "not found".

Checked: never a 5xx (the API's promise: never a 500 for anything a caller sent), and every
response conforms to the schema the document declares for it (the success shape, or the error
shape `{"error": {"code", "message"}}` for 4xx/5xx).

Schemathesis generates only text that encodes as UTF-8; strings holding a lone surrogate
escape ("\\ud800", valid JSON) are tried by hand in `test_errors.py`.

Bounded and deterministic: 25 fuzzed examples per operation plus Schemathesis' coverage phase
(boundary values of each parameter), a fixed seed, no example database on disk.
"""

import zlib
from typing import Any

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from pipelines.models import Pipeline
from sandboxes import services
from sandboxes.models import Lease, Sandbox, State
from tests.conftest import CHAT

MAX_EXAMPLES = 25
SEED = 20261122


class LiveSandbox:
    """A running sandbox of the token's pipeline and one of its execs, kept usable.

    Generated requests close it, take its lease over or release it; before each example
    that uses it, it is reopened if needed and its lease freed, so the next request reaches
    the engine again.
    """

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.actor = services.Actor("bot", "schemathesis-setup")
        self.sandbox_id = ""
        self.exec_id = ""
        self.ensure()

    def ensure(self) -> None:
        sandbox = Sandbox.objects.filter(pk=self.sandbox_id or None).first()
        if sandbox is None or sandbox.state != State.RUNNING:
            Lease.objects.filter(sandbox__pipeline=self.pipeline).update(
                holder="", expires_at=None, taken_over_from=""
            )
            opened = services.open_sandbox(self.pipeline, CHAT, self.actor)
            record = services.run_exec(
                opened.sandbox,
                services.clean_request(opened.sandbox, cmd=["echo", "hi"]),
                self.actor,
            )
            self.sandbox_id, self.exec_id = str(opened.sandbox.pk), str(record.pk)
        Lease.objects.filter(sandbox_id=self.sandbox_id).update(
            holder="", expires_at=None, taken_over_from=""
        )

    def substitute(self, case: Any) -> None:
        """Aim the generated request at the live sandbox so that it reaches the engine.

        Real ids and the token's pipeline where it has ids; no epoch (a generated one is
        always stale); the scope variables the pipeline needs, unless generated; `sh`, the
        one interpreter of the busybox test image, for compute mode.
        """
        self.ensure()
        real = {"sandbox_id": self.sandbox_id, "exec_id": self.exec_id, "slug": self.pipeline.slug}
        for name in case.path_parameters:
            if name in real:
                case.path_parameters[name] = real[name]
        if isinstance(case.query, dict):
            case.query.pop("epoch", None)
        if isinstance(case.body, dict):
            case.body.pop("epoch", None)
            if "pipeline" in case.body:
                case.body["pipeline"] = self.pipeline.slug
            if isinstance(case.body.get("variables"), dict):
                for name, value in CHAT.items():
                    case.body["variables"].setdefault(name, value)
            if "language" in case.body:
                case.body["language"] = "sh"


def uses_real_ids(case: Any) -> bool:
    """Half the cases, chosen by their content (so a failing case replays the same way).

    Not `@schema.given(st.booleans())`: Schemathesis skips its coverage phase for tests
    with extra strategies.
    """
    return zlib.crc32(repr(case).encode("utf-8", "surrogatepass")) % 2 == 0


@pytest.fixture
def live(support: Any, docker_engine: Any) -> LiveSandbox:
    return LiveSandbox(support.pipeline)


def load_schema() -> Any:
    """The document of the real app, fetched in-process when this module is collected.

    (Not `schemathesis.pytest.from_fixture`: Schemathesis 4.32's lazy loader sets
    `Node._nodeid`, which pytest 9.2 no longer has.) The token is sent per request: tokens
    are made by the test's fixtures, after collection.
    """
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "cache": {"enabled": False},
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
                "with-security-parameters": False,
            },
            "phases": {
                "examples": {"enabled": False},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
            "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
        }
    )
    return schemathesis.openapi.from_wsgi(
        "/api/v1/openapi.json", get_wsgi_application(), config=config
    )


schema = load_schema()


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
def test_no_input_gives_a_server_error(case: Any, live: LiveSandbox, support: Any) -> None:
    if uses_real_ids(case):
        live.substitute(case)
    response = case.call(headers={"Authorization": f"Bearer {support.token}"})
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
