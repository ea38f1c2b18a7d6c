"""MCP sessions against a served Boxyard: what a session of the handshake revisions remembers,
what a sessionless client must say itself, and a session's end after its idle time."""

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pipelines.models import PipelineToken
from sandboxes.models import Sandbox, SessionSandbox
from tests.conftest import wait_for
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

IDLE_SECONDS = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> Iterator[Server]:
    with served(
        tmp_path_factory.mktemp("sessions"), BOXYARD_MCP_SESSION_IDLE_SECONDS=str(IDLE_SECONDS)
    ) as running:
        yield running


@asynccontextmanager
async def connected(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def test_a_session_keeps_the_sandbox_it_opened_where_each_open_makes_a_new_one(
    server: Server, make_pipeline: Any, docker_engine: Any
) -> None:
    pipeline = make_pipeline(slug="per-message", scope_template="msg_{query_id|uuid}")
    _, token = PipelineToken.issue(pipeline, name="tests")
    url = f"{server.url}/mcp"

    async def go() -> tuple[Any, Any, Any, int]:
        async with connected(url, token, "legacy") as client:
            written = await client.call_tool("sandbox_fs_write", {"path": "a.txt", "contents": "1"})
            read = await client.call_tool("sandbox_fs_read", {"path": "a.txt"})
            rows = await anyio.to_thread.run_sync(_session_rows, pipeline)
        async with connected(url, token, "auto") as sessionless:
            refused = await sessionless.call_tool("sandbox_fs_read", {"path": "a.txt"})
        return written, read, refused, rows

    written, read, refused, rows = anyio.run(go)
    assert not written.is_error and not read.is_error, (written, read)
    # The session's sandbox is a row (any web process finds it), gone once the session ends.
    assert rows == 1
    wait_for(lambda: _session_rows(pipeline) == 0, IDLE_SECONDS + 10)
    assert read.structured_content["contents"] == "1"
    assert Sandbox.objects.filter(pipeline=pipeline).count() == 1  # one sandbox, not one a call
    assert refused.is_error
    assert refused.structured_content["error"]["field"] == "sandbox_id"
    assert "sandbox_open" in refused.structured_content["error"]["message"]


def _session_rows(pipeline: Any) -> int:
    return SessionSandbox.objects.filter(pipeline=pipeline).count()


def test_a_session_left_idle_ends_and_its_id_is_refused(server: Server, make_pipeline: Any) -> None:
    pipeline = make_pipeline(slug="idle")
    _, token = PipelineToken.issue(pipeline, name="tests")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "tests", "version": "1"},
        },
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        opened = http.post("/mcp", json=hello)
        assert opened.status_code == 200, opened.text
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], **_version()}
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                  headers=session)  # fmt: skip
        assert http.post("/mcp", json=listing, headers=session).status_code == 200
        anyio.run(anyio.sleep, IDLE_SECONDS + 1.5)
        gone = http.post("/mcp", json=listing, headers=session)
    assert gone.status_code == 404, gone.text
    # A JSON-RPC answer to the request itself, saying what happened and what to do.
    assert gone.json()["id"] == 2
    message = gone.json()["error"]["message"]
    assert message.startswith("MCP session not found: it has ended"), message
    assert f"after {IDLE_SECONDS} s without a request" in message
    assert "send initialize without an Mcp-Session-Id" in message


def _version() -> dict[str, str]:
    return {"MCP-Protocol-Version": "2025-11-25"}


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_every_handshake_revision_opens_a_session(
    server: Server, make_pipeline: Any, version: str
) -> None:
    """AstrBot, for one, tests a server with an `initialize` of 2024-11-05."""
    pipeline = make_pipeline(slug="revisions")
    _, token = PipelineToken.issue(pipeline, name="tests")
    answer = httpx.post(
        f"{server.url}/mcp",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "test-client", "version": "1"},
            },
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["mcp-session-id"]
    data = next(line for line in answer.text.splitlines() if line.startswith("data:"))
    assert f'"protocolVersion":"{version}"' in data.replace(" ", "")
