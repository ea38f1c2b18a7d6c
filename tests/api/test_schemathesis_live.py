"""Schemathesis from outside: its command line against the served Boxyard (`manage.py serve`,
uvicorn, the real engine), as anyone who has the OpenAPI document and a pipeline token would
run it.

Every operation gets requests made from the document, valid and invalid, over HTTP; about half
of them carry the ids of a live sandbox, one of its execs and the token's pipeline (schemathesis
dictionaries), so they reach the services and the engine. Any server error, any answer whose
status, content type, headers or body the document does not declare, any request the document
forbids that the server takes and any the document allows that the server refuses for its form,
fails the test (but a file path's meaning, inside /workspace, a file or a directory, is the
workspace's: for the operations that take a path or a cwd, a 400 is an answer of the workspace).

Bounded: the coverage phase (the boundaries of every parameter) and 5 fuzzed examples per
operation, deterministic, one worker; about two minutes.
"""

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipelines.models import PipelineToken
from tests.conftest import CHAT
from tests.servers import served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
MAX_EXAMPLES = 5
SEED = 20261128
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
        "positive_data_acceptance",
        "missing_required_header",
        "unsupported_method",
        "allow_header_conformance",
    ]
)


def config(path: Path, sandbox_id: str, exec_id: str, slug: str) -> Path:
    """Half the requests aimed at the live sandbox, its exec and the token's pipeline."""
    path.write_text(
        f"""
[dictionaries.sandboxes]
values = ["{sandbox_id}"]

[dictionaries.execs]
values = ["{exec_id}"]

[dictionaries.pipelines]
values = ["{slug}"]

[checks.positive_data_acceptance]
# A request of the right form may still find the sandbox in a state that refuses it: another
# request of the run took its lease over (423), closed it (409) or filled a quota (429).
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "423", "429"]

[[operations]]
# A file path's meaning is the workspace's, not the document's: inside /workspace once
# normalized, a file or a directory, names of at most 255 bytes. The document bounds its form
# (1-4096 characters, no NUL); the rest is a 400 or 404 naming `path` (or an exec's `cwd`),
# as is an uploaded archive's content.
include-path-regex = "/files|/run$|/exec$|/sessions$"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "400", "401", "403", "404", "409", "423", "429"
]

[parameters]
"path.sandbox_id" = {{ dictionary = "sandboxes", probability = 0.5 }}
"path.exec_id" = {{ dictionary = "execs", probability = 0.5 }}
"path.slug" = {{ dictionary = "pipelines", probability = 0.5 }}
"""
    )
    return path


def test_schemathesis_run_from_outside_finds_nothing(
    tmp_path: Path, docker_engine: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(slug="fuzzed")
    _, token = PipelineToken.issue(pipeline, name="schemathesis")
    with served(tmp_path) as server:
        with httpx.Client(
            base_url=f"{server.url}/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        ) as client:
            opened = client.post("/sandboxes/open", json={"pipeline": "fuzzed", "variables": CHAT})
            assert opened.status_code == 200, opened.text
            sandbox_id = opened.json()["sandbox_id"]
            ran = client.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": ["echo", "hi"]})
            assert ran.status_code == 200, ran.text
        settings = config(
            tmp_path / "schemathesis.toml", sandbox_id, ran.json()["exec_id"], "fuzzed"
        )
        command = [
            str(SCHEMATHESIS),
            "--config-file",
            str(settings),
            "run",
            f"{server.url}/api/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            CHECKS,
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            str(SEED),
            "--generation-deterministic",
            "--workers",
            "1",
            "--request-timeout",
            "60",
            "--suppress-health-check",
            "all",
            "--no-color",
        ]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
        except subprocess.TimeoutExpired as timeout:
            pytest.fail(f"schemathesis did not finish in 240 s\n{timeout.stdout!r}")
    (tmp_path / "schemathesis.out").write_text(run.stdout + run.stderr)
    report = run.stdout[-12000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    assert "Tested: 41" in run.stdout and " failed" not in run.stdout, report
