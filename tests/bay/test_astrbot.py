"""AstrBot itself (the `astrbot` package, pinned) on a served Boxyard: its `shipyard_neo`
booter, unchanged, boots a sandbox, runs shell and Python (its state kept between calls, a
chart as an image), writes, edits, lists, uploads and downloads files and shuts down, with
the settings the README gives ("Use Boxyard as AstrBot's sandbox"). AstrBot needs Python 3.12 and its own pins, so it runs in its own virtualenv
(`bin/client-venv astrbot`), made once and kept outside the clone."""

import base64
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandboxes.models import Exec, Sandbox, State
from tests.bay.conftest import Bay
from tests.servers import REPO, Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

SCRIPT = Path(__file__).parent / "clients" / "astrbot_booter.py"
NO_PYTHON = 3  # bin/client-venv's exit status when the interpreter it needs is missing


@pytest.fixture(scope="module")
def astrbot_python() -> str:
    """The client virtualenv's interpreter; the test is skipped only if Python 3.12 is not on
    this machine (any other failure to make the venv fails the test)."""
    made = subprocess.run(
        [str(REPO / "bin" / "client-venv"), "astrbot"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if made.returncode == NO_PYTHON:
        pytest.skip(f"AstrBot needs Python 3.12, absent here: {made.stderr.strip()}")
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def readme_settings(server: Server, token: str) -> dict[str, Any]:
    """AstrBot's sandbox settings as the README writes them, for this server and token."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Use Boxyard as AstrBot's sandbox", 1)[1]
    block = re.search(r"<!-- astrbot-settings -->\n```json\n(.*?)\n```", section, re.S)
    assert block, "the README's section lost its settings block"
    host_port = server.url.removeprefix("http://")
    text = block.group(1).replace("HOST:PORT", host_port).replace("PIPELINE_TOKEN", token)
    settings: dict[str, Any] = json.loads(text)
    return settings


def test_astrbots_booter_works_on_boxyard_as_the_readme_says(
    support: Bay, server: Server, astrbot_python: str, tmp_path: Path
) -> None:
    settings = readme_settings(server, support.token)
    assert settings["shipyard_neo_endpoint"] == support.endpoint
    ran = subprocess.run(
        [astrbot_python, str(SCRIPT), json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # AstrBot keeps its data in ./data
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert seen["capabilities"] == ["python", "shell", "filesystem"] and seen["available"]
    assert seen["shell"]["stdout"] == "from astrbot\n/workspace\n"
    assert seen["shell"]["exit_code"] == 0 and seen["shell"]["success"]
    assert seen["python"]["success"] and seen["python"]["output"] == "42"
    assert seen["python"]["data"]["output"]["text"] == "42"
    # One Python kernel per sandbox, as Bay's: state stays between calls; a figure is an image.
    assert seen["kept"]["success"] and seen["kept"]["output"] == "42"
    chart = seen["chart"]
    [image] = chart["data"]["output"]["images"]
    assert chart["success"] and base64.b64decode(image["image/png"]).startswith(b"\x89PNG")
    assert seen["read"]["content"] == "# notes\nhello\n"
    assert seen["edit"] == {"success": True, "path": "astrbot/notes.md", "replacements": 1}
    [entry] = seen["listed"]["entries"]
    assert (entry["name"], entry["is_dir"]) == ("notes.md", False)
    assert entry["size"] == len("# notes\nhello, Boxyard\n")
    assert seen["round_trip"] and seen["deleted"]["success"]
    # Boxyard's own record of it: the pipeline's sandbox, its commands, destroyed at shutdown.
    sandbox = Sandbox.objects.get(pk=seen["sandbox_id"])
    assert sandbox.pipeline == support.pipeline and sandbox.state == State.DESTROYED
    assert Exec.objects.filter(sandbox=sandbox).count() >= 5
