"""The gateway, end to end: a pipeline's managed process that speaks MCP over stdio (a server
written with the official `mcp` package, `tests/mcp_notes/notes_server.py`), reached at
`/mcp/servers/notes` by MCP clients through a served Boxyard and the real engine.

The sandbox image has Python but not the `mcp` package: the test gives the sandbox a copy of
the package and everything it needs from this virtualenv (the same CPython 3.11 on the same
Debian) as a skill, mounted read-only at /workspace/.skills/mcplib/.
"""

import importlib.metadata
import json
import re
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from django.conf import settings
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from packaging.requirements import Requirement

from boxyard.actors import Actor
from pipelines.models import Pipeline, PipelineToken, Skill
from sandboxes import services
from sandboxes.models import Sandbox
from tests.conftest import wait_for
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

HERE = Path(__file__).resolve().parent
CHAT = "launcher_type=group&launcher_id=42"
NOTES = {
    "name": "notes",
    "cmd": ["python3", "/workspace/.skills/mcplib/notes_server.py"],
    "env": {"PYTHONPATH": "/workspace/.skills/mcplib", "PYTHONDONTWRITEBYTECODE": "1"},
}


def _distributions(
    requirement: str,
    found: dict[str, importlib.metadata.Distribution],
    visited: set[tuple[str, frozenset[str]]],
) -> None:
    """The distribution a requirement names and those it needs (with the extras asked for),
    for this platform and Python."""
    wanted = Requirement(requirement)
    key = re.sub(r"[-_.]+", "-", wanted.name).lower()
    if (key, frozenset(wanted.extras)) in visited:
        return
    visited.add((key, frozenset(wanted.extras)))
    try:
        distribution = importlib.metadata.distribution(wanted.name)
    except importlib.metadata.PackageNotFoundError:
        return
    found[key] = distribution
    extras = {""} | wanted.extras
    for needed in map(Requirement, distribution.requires or []):
        if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in extras):
            named = (
                f"{needed.name}[{','.join(sorted(needed.extras))}]"
                if needed.extras
                else needed.name
            )
            _distributions(named, found, visited)


@pytest.fixture(scope="module")
def skills(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A skill root holding `mcplib`: the `mcp` package, its requirements and the server."""
    root = tmp_path_factory.mktemp("skills")
    library = root / "mcplib"
    library.mkdir()
    found: dict[str, importlib.metadata.Distribution] = {}
    _distributions("mcp", found, set())
    for distribution in found.values():
        for file in distribution.files or []:
            source = Path(str(distribution.locate_file(file)))
            if "__pycache__" in file.parts or not source.is_file() or ".." in file.parts:
                continue
            target = library / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    shutil.copy2(HERE.parent / "mcp_notes" / "notes_server.py", library / "notes_server.py")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Any, skills: Path) -> Iterator[Server]:
    images = f"{settings.BOXYARD_TEST_IMAGE},{settings.BOXYARD_DEFAULT_IMAGE}"
    with served(
        tmp_path_factory.mktemp("gateway"),
        BOXYARD_SKILL_ROOTS=str(skills),
        BOXYARD_IMAGE_ALLOWLIST=images,
    ) as running:
        yield running


@pytest.fixture
def notes_bot(
    server: Server, skills: Path, docker_engine: Any, make_pipeline: Any, settings: Any
) -> tuple[Pipeline, str, str]:
    """The notes bot: its pipeline, its token, and its chat's sandbox (the server running)."""
    settings.BOXYARD_SKILL_ROOTS = [str(skills)]
    pipeline = make_pipeline(
        slug="notes-bot",
        image=settings.BOXYARD_DEFAULT_IMAGE,
        scope_template="{launcher_type}_{launcher_id}",
        processes=[NOTES],
    )
    Skill.objects.create(pipeline=pipeline, name="mcplib", host_path=str(skills / "mcplib"))
    _, token = PipelineToken.issue(pipeline, name="tests")
    with api(server, token) as rest:
        opened = rest.post(
            "/sandboxes/open",
            json={
                "pipeline": pipeline.slug,
                "variables": {"launcher_type": "group", "launcher_id": 42},
            },
        )
        assert opened.status_code == 200, opened.text
    return pipeline, token, opened.json()["sandbox_id"]


def api(server: Server, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


@asynccontextmanager
async def gateway(server: Server, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    url = f"{server.url}/mcp/servers/notes?{CHAT}"
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_client_lists_and_calls_the_processs_own_tools(
    server: Server, notes_bot: tuple[Pipeline, str, str], mode: str
) -> None:
    _, token, sandbox_id = notes_bot

    async def go() -> tuple[Any, Any, Any, Any, Any]:
        async with gateway(server, token, mode) as client:
            return (
                await client.list_tools(),
                await client.call_tool("add", {"a": 2, "b": 3}),
                await client.call_tool("note", {"text": "buy milk"}),
                await client.get_prompt("review", {"topic": "the plan"}),
                await client.read_resource("notes://all"),
            )

    listed, added, noted, prompt, resource = anyio.run(go)
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"add", "note", "slow", "crash"}
    assert tools["add"].input_schema["required"] == ["a", "b"]
    assert added.structured_content == {"result": 5} and not added.is_error
    assert noted.content[0].text == "1 notes"
    assert prompt.messages[0].content.text == "Please review the plan."
    assert resource.contents[0].text == "buy milk\n"
    with api(server, token) as rest:  # the process works in the chat's own workspace
        read = rest.get(f"/sandboxes/{sandbox_id}/files", params={"path": "notes.txt"})
    assert read.json()["contents"] == "buy milk\n"


def test_fastmcp_calls_through_the_gateway(
    server: Server, notes_bot: tuple[Pipeline, str, str]
) -> None:
    _, token, _ = notes_bot

    async def go() -> Any:
        transport = StreamableHttpTransport(
            f"{server.url}/mcp/servers/notes?{CHAT}", headers={"Authorization": f"Bearer {token}"}
        )
        async with FastMCPClient(transport) as client:
            return await client.call_tool("add", {"a": 20, "b": 22})

    assert anyio.run(go).structured_content == {"result": 42}


def test_the_processs_progress_reaches_the_client(
    server: Server, notes_bot: tuple[Pipeline, str, str]
) -> None:
    _, token, _ = notes_bot
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async def go() -> Any:
        async with gateway(server, token) as client:
            return await client.call_tool("slow", {"steps": 3}, progress_callback=progress)

    result = anyio.run(go)
    assert result.structured_content == {"result": "done"}
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def test_a_crash_is_a_clear_error_and_the_restarted_process_answers_again(
    server: Server, notes_bot: tuple[Pipeline, str, str]
) -> None:
    _, token, sandbox_id = notes_bot

    def generation() -> int:
        with api(server, token) as rest:
            listed = rest.get(f"/sandboxes/{sandbox_id}/processes").json()["processes"]
        return int(listed[0]["generation"])

    async def call(name: str, arguments: dict[str, Any]) -> tuple[float, Any]:
        async with gateway(server, token) as client:
            await client.call_tool("add", {"a": 0, "b": 0})  # the process is up and greeted
            started = time.monotonic()
            result = await client.call_tool(name, arguments)
            return time.monotonic() - started, result

    before = generation()
    took, crashed = anyio.run(call, "crash", {})
    assert crashed.is_error
    assert crashed.content[0].text.startswith(
        "502 mcp_server_exited: the MCP server notes exited (exit code 3)"
    )
    assert took < 5
    took, again = anyio.run(call, "add", {"a": 1, "b": 1})
    assert again.structured_content == {"result": 2}
    assert generation() == before + 1


def test_only_declared_processes_and_the_pipelines_own_token(
    server: Server, notes_bot: tuple[Pipeline, str, str], make_pipeline: Any
) -> None:
    _, token, _ = notes_bot
    _, other = PipelineToken.issue(make_pipeline(slug="billing"), name="tests")
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    undeclared = httpx.post(
        f"{server.url}/mcp/servers/nope?{CHAT}", json=hello,
        headers={"Authorization": f"Bearer {token}"},
    )  # fmt: skip
    assert undeclared.status_code == 404
    assert "declares no process 'nope'" in undeclared.json()["error"]["message"]
    stranger = httpx.post(
        f"{server.url}/mcp/servers/notes?{CHAT}", json=hello,
        headers={"Authorization": f"Bearer {other}"},
    )  # fmt: skip
    assert stranger.status_code == 404
    assert httpx.post(f"{server.url}/mcp/servers/notes", json=hello).status_code == 401


def test_a_takeover_refuses_the_gateway_with_423(
    server: Server, notes_bot: tuple[Pipeline, str, str]
) -> None:
    _, token, sandbox_id = notes_bot
    services.takeover_lease(Sandbox.objects.get(pk=sandbox_id), Actor("admin", "alice"))

    async def go() -> Any:
        async with gateway(server, token) as client:
            return await client.call_tool("add", {"a": 1, "b": 2})

    refused = anyio.run(go)
    assert refused.is_error
    assert refused.structured_content["status"] == 423
    assert refused.content[0].text.startswith("423 taken_over:")


def test_the_bot_api_and_the_gateway_share_the_process(
    server: Server, notes_bot: tuple[Pipeline, str, str]
) -> None:
    _, token, sandbox_id = notes_bot
    line = json.dumps({"jsonrpc": "2.0", "id": "by-the-bot", "method": "tools/list"}) + "\n"

    async def go() -> Any:
        async with gateway(server, token) as client:
            await client.call_tool("add", {"a": 0, "b": 0})  # greeted by the gateway first
            with api(server, token) as rest:
                written = rest.post(
                    f"/sandboxes/{sandbox_id}/processes/notes/stdin", json={"text": line}
                )
                assert written.status_code == 200, written.text
            return await client.call_tool("add", {"a": 3, "b": 4})

    assert anyio.run(go).structured_content == {"result": 7}

    def answered() -> bool:
        with api(server, token) as rest:
            output = rest.get(f"/sandboxes/{sandbox_id}/processes/notes/output").json()
        return '"id":"by-the-bot"' in "".join(chunk["text"] for chunk in output["chunks"])

    wait_for(answered, 10)


def test_the_readmes_example_and_a_sandbox_named_by_its_id(
    server: Server, notes_bot: tuple[Pipeline, str, str]
) -> None:
    """The README's client code, on the default image; then a connection with no chat in its
    URL acting on a sandbox it names."""
    _, token, sandbox_id = notes_bot

    async def go() -> tuple[Any, Any]:
        url = f"{server.url}/mcp?{CHAT}"
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(url, http_client=http)) as client:
            result = await client.call_tool("sandbox_exec", {"cmd": "python3 -c 'print(6*7)'"})
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as bare:
            named = await bare.call_tool(
                "sandbox_fs_list", {"path": ".skills", "sandbox_id": sandbox_id}
            )
        return result, named

    result, named = anyio.run(go)
    assert result.structured_content["stdout"] == "42\n"
    assert [entry["name"] for entry in named.structured_content["entries"]] == ["mcplib"]
