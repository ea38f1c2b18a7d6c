"""The README's "Run code" commands, as they are written there (the address, the token and
the sandbox id filled in)."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.code.conftest import Coder

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
