"""The README's "Run code" commands, as they are written there (the address, the token and
the sandbox id filled in)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from boxyard.actors import Actor
from pipelines import services as pipeline_services
from tests.code.conftest import IMAGE, Coder
from tests.servers import Server

ADMIN = Actor("admin", "alice")

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readmes_run_code_commands_work_as_written(coder: Coder) -> None:
    section = README.read_text().split("## Run code\n", 1)[1].split("\n## ", 1)[0]
    [shell] = re.findall(r"```sh\n(.*?)```", section, re.S)
    sandbox = coder.open()
    script = shell.replace("http://127.0.0.1:8000", coder.url).replace("<sandbox_id>", sandbox)
    commands = [part for part in script.split("\ncurl") if part.strip()]
    assert len(commands) == 2
    outputs = []
    for command in (commands[0], "curl" + commands[1]):
        ran = subprocess.run(
            ["bash", "-c", command],
            env={"TOKEN": coder.token, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        outputs.append(ran.stdout)
    first = json.loads(outputs[0])
    assert first["ok"] is True and "<table" in first["results"][0]["html"]
    lines = [json.loads(line) for line in outputs[1].splitlines() if line.strip()]
    assert lines[0] == {"type": "stdout", "text": "12\n"}
    assert any(line["type"] == "result" and line.get("png") for line in lines)
    assert lines[-1]["type"] == "end" and lines[-1]["status"] == "ok"


def _programs() -> list[str]:
    section = README.read_text().split("## Run code\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _ran(program: str, environment: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "DJANGO_"))}
    ran = subprocess.run(
        [sys.executable, "-c", program],
        env={**clean, **environment},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_the_readmes_python_client_program_works_as_written(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(slug="support-bot", image=IMAGE)
    _, token = pipeline_services.issue_token(pipeline, ADMIN, "readme")
    client, _e2b = _programs()
    program = client.replace("http://127.0.0.1:8000", server.url).replace("byd_...", token)
    assert _ran(program, {}).splitlines() == ["12"]


def test_the_readmes_e2b_code_interpreter_program_works_as_written(
    server: Server, docker_engine: Any, make_pipeline: Any
) -> None:
    pipeline = make_pipeline(slug="support-bot", image=IMAGE)
    _, key = pipeline_services.issue_token(pipeline, ADMIN, "e2b", shape="e2b")
    _client, e2b = _programs()
    printed = _ran(
        e2b,
        {
            "E2B_API_URL": f"{server.url}/e2b",
            "E2B_SANDBOX_URL": f"{server.url}/e2b/sandbox",
            "E2B_API_KEY": key,
        },
    )
    assert printed.splitlines() == ["12", "iVBORw0K"]
