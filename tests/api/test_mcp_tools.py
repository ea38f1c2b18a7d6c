"""Boxyard as an MCP server, end to end: a served Boxyard, the real engine, and the clients people
use (the official `mcp` SDK in both of its modes, fastmcp), pinned in the test dependencies."""

import base64
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from boxyard.actors import Actor
from pipelines.models import Pipeline, PipelineToken
from pipelines.tools import system_prompt
from sandboxes import services
from sandboxes.models import Exec, Sandbox
from sandboxes.schemas.tools import tool_specs
from tests.conftest import wait_for
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHAT = "launcher_type=group&launcher_id=42"
MODES = ["auto", "legacy"]  # 2026-07-28 without a session; the handshake, with one


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> Iterator[Server]:
    with served(tmp_path_factory.mktemp("mcp")) as running:
        yield running


@pytest.fixture
def bot(server: Server, docker_engine: Any, make_pipeline: Any) -> tuple[Pipeline, str]:
    pipeline = make_pipeline(slug="support", scope_template="{launcher_type}_{launcher_id}")
    _, token = PipelineToken.issue(pipeline, name="tests")
    return pipeline, token


@asynccontextmanager
async def connected(
    server: Server, token: str, mode: str = "auto", query: str = CHAT, **headers: str
) -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}", **headers})
    url = f"{server.url}/mcp?{query}"
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def rest(server: Server, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


@pytest.mark.parametrize("mode", MODES)
def test_the_official_client_lists_the_tools_and_the_prompt(
    server: Server, bot: tuple[Pipeline, str], mode: str
) -> None:
    pipeline, token = bot

    async def go() -> tuple[str, Any, Any]:
        async with connected(server, token, mode) as client:
            return (
                client.protocol_version,
                await client.list_tools(),
                await client.get_prompt("sandbox_system_prompt"),
            )

    version, listed, prompt = anyio.run(go)
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    tools = {tool.name: tool for tool in listed.tools}
    assert list(tools) == [spec.name for spec in tool_specs()]
    assert "sandbox_id" not in tools["sandbox_exec"].input_schema["required"]
    assert tools["sandbox_exec"].input_schema["required"] == ["cmd"]
    read = tools["sandbox_fs_read"].annotations
    assert read is not None and read.read_only_hint and read.idempotent_hint
    delete = tools["sandbox_fs_delete"].annotations
    assert delete is not None and delete.destructive_hint and not delete.read_only_hint
    opening = tools["sandbox_open"].annotations
    assert opening is not None and not opening.destructive_hint and opening.idempotent_hint
    assert tools["sandbox_exec"].output_schema == tool_specs()[1].output_schema
    assert prompt.messages[0].content.text == system_prompt(pipeline)


def test_fastmcp_connects_and_runs_a_command(server: Server, bot: tuple[Pipeline, str]) -> None:
    _, token = bot

    async def go() -> tuple[list[str], Any]:
        transport = StreamableHttpTransport(
            f"{server.url}/mcp?{CHAT}", headers={"Authorization": f"Bearer {token}"}
        )
        async with FastMCPClient(transport) as client:
            names = [tool.name for tool in await client.list_tools()]
            return names, await client.call_tool("sandbox_exec", {"cmd": "echo $((6*7))"})

    names, result = anyio.run(go)
    assert names == [spec.name for spec in tool_specs()]
    assert result.structured_content["stdout"] == "42\n"
    assert result.structured_content["exit_code"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_the_url_opens_the_chats_own_sandbox(
    server: Server, bot: tuple[Pipeline, str], mode: str
) -> None:
    pipeline, token = bot

    async def go() -> tuple[Any, Any, Any]:
        async with connected(server, token, mode) as client:
            # A tool before any open: the chat's sandbox is opened for it.
            written = await client.call_tool("sandbox_fs_write", {"path": "n.txt", "contents": "7"})
            opened = await client.call_tool("sandbox_open", {})
        async with connected(
            server, token, mode, query="", **{"Boxyard-Var-Launcher-Type": "group",
                                               "Boxyard-Var-Launcher-Id": "42"}
        ) as by_headers:  # fmt: skip
            read = await by_headers.call_tool("sandbox_fs_read", {"path": "n.txt"})
        return written, opened, read

    written, opened, read = anyio.run(go)
    assert not written.is_error, written.content
    assert opened.structured_content["scope_key"] == "group_42"
    assert opened.structured_content["created"] is False
    assert read.structured_content["contents"] == "7"
    with rest(server, token) as api:
        same = api.post(
            "/sandboxes/open",
            json={
                "pipeline": "support",
                "variables": {"launcher_type": "group", "launcher_id": 42},
            },
        ).json()
    assert same["sandbox_id"] == opened.structured_content["sandbox_id"]
    assert Sandbox.objects.filter(pipeline=pipeline).count() == 1


def test_a_url_without_the_chat_is_refused_naming_the_variable_and_opens_nothing(
    server: Server, bot: tuple[Pipeline, str]
) -> None:
    pipeline, token = bot

    async def go() -> tuple[Any, Any]:
        async with connected(server, token, query="launcher_type=group") as client:
            missing = await client.call_tool("sandbox_exec", {"cmd": "true"})
            bad = await client.call_tool("sandbox_exec", {"cmd": 3})
            return missing, bad

    missing, bad = anyio.run(go)
    assert missing.is_error and missing.structured_content["status"] == 400
    assert missing.structured_content["error"]["field"] == "variables.launcher_id"
    assert missing.content[0].text.startswith("400 invalid_input: variables.launcher_id")
    assert bad.is_error and bad.structured_content["error"]["field"] == "cmd"
    assert not Sandbox.objects.filter(pipeline=pipeline).exists()


def test_commands_and_files_through_mcp(server: Server, bot: tuple[Pipeline, str]) -> None:
    _, token = bot
    blob = bytes(range(256))

    async def go() -> dict[str, Any]:
        async with connected(server, token) as client:
            done: dict[str, Any] = {}
            for name, arguments in [
                ("exec", {"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]}),
                ("write", {"path": "d/t.txt", "contents": "héllo\n"}),
                ("write_b64", {"path": "d/b.bin", "contents_b64": base64.b64encode(blob).decode()}),
                ("read", {"path": "d/t.txt"}),
                ("read_b64", {"path": "d/b.bin"}),
                ("list", {"path": "d"}),
                ("write_kept", {"path": "kept.txt", "contents": "kept"}),
                ("link", {"path": "kept.txt"}),
                ("delete", {"path": "d", "recursive": True}),
                ("gone", {"path": "d/t.txt"}),
            ]:
                tool = {"write_b64": "write", "write_kept": "write", "read_b64": "read",
                        "gone": "read"}.get(name, name)  # fmt: skip
                tool = {
                    "exec": "sandbox_exec",
                    "list": "sandbox_fs_list",
                    "link": "sandbox_fs_link",
                }.get(tool, f"sandbox_fs_{tool}")
                done[name] = await client.call_tool(tool, arguments)
            return done

    done = anyio.run(go)
    ran = done["exec"].structured_content
    assert (ran["exit_code"], ran["stdout"], ran["stderr"]) == (3, "out\n", "err\n")
    assert done["write"].structured_content == {
        "ok": True, "path": "/workspace/d/t.txt", "size_bytes": 7,
    }  # fmt: skip
    assert done["read"].structured_content["contents"] == "héllo\n"
    assert base64.b64decode(done["read_b64"].structured_content["contents_b64"]) == blob
    names = sorted(entry["name"] for entry in done["list"].structured_content["entries"])
    assert names == ["b.bin", "t.txt"]
    assert httpx.get(done["link"].structured_content["url"]).content == b"kept"
    assert done["delete"].structured_content["ok"] is True
    assert done["gone"].is_error and done["gone"].structured_content["status"] == 404


@pytest.mark.parametrize("mode", MODES)
def test_a_command_reports_its_output_as_it_runs(
    server: Server, bot: tuple[Pipeline, str], mode: str
) -> None:
    _, token = bot
    seen: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic(), message))

    async def go() -> tuple[float, Any]:
        async with connected(server, token, mode) as client:
            script = "for i in 1 2 3; do echo line$i; sleep 0.3; done"
            result = await client.call_tool(
                "sandbox_exec", {"cmd": script}, progress_callback=progress
            )
            return time.monotonic(), result

    ended, result = anyio.run(go)
    assert result.structured_content["stdout"] == "line1\nline2\nline3\n"
    assert "".join(message or "" for _, message in seen) == "line1\nline2\nline3\n"
    assert seen[0][0] < ended - 0.4  # the first line came while the command still ran


def test_waiting_for_a_background_command_reports_its_output(
    server: Server, bot: tuple[Pipeline, str]
) -> None:
    _, token = bot
    seen: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async def go() -> tuple[Any, Any]:
        async with connected(server, token) as client:
            started = await client.call_tool(
                "sandbox_exec",
                {"cmd": "for i in 1 2; do echo bg$i; sleep 0.3; done", "background": True},
            )
            arguments = {"exec_id": started.structured_content["exec_id"], "timeout_seconds": 30}
            return started, await client.call_tool(
                "sandbox_exec_wait", arguments, progress_callback=progress
            )

    started, waited = anyio.run(go)
    assert started.structured_content["status"] == "running"
    assert waited.structured_content == {"done": True, "status": "completed", "exit_code": 0}
    assert "".join(message or "" for message in seen) == "bg1\nbg2\n"


def processes(api: httpx.Client, sandbox_id: str) -> str:
    listed = api.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": ["ps", "-o", "args"]})
    return str(listed.json()["stdout"])


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_command_is_killed_with_everything_it_started(
    server: Server, bot: tuple[Pipeline, str], mode: str
) -> None:
    pipeline, token = bot

    async def go() -> None:
        async with connected(server, token, mode) as client:
            await client.call_tool("sandbox_open", {})
            with anyio.move_on_after(1.5):
                await client.call_tool("sandbox_exec", {"cmd": "sleep 3018 & sleep 3017"})
                raise AssertionError("the command ended by itself")

    anyio.run(go)
    sandbox = Sandbox.objects.get(pipeline=pipeline)
    with rest(server, token) as api:
        wait_for(lambda: "sleep 301" not in processes(api, str(sandbox.pk)), 10)
    record = Exec.objects.filter(sandbox=sandbox, command="sleep 3018 & sleep 3017").get()
    wait_for(lambda: Exec.objects.get(pk=record.pk).state == "killed", 10)


def test_the_exec_timeout_still_applies(server: Server, bot: tuple[Pipeline, str]) -> None:
    _, token = bot

    async def go() -> tuple[float, Any]:
        async with connected(server, token) as client:
            await client.call_tool("sandbox_open", {})
            started = time.monotonic()
            result = await client.call_tool(
                "sandbox_exec", {"cmd": "sleep 30", "timeout_seconds": 1}
            )
            return time.monotonic() - started, result

    took, result = anyio.run(go)
    assert result.structured_content["status"] == "timed_out"
    assert took < 10


def test_a_takeover_reaches_the_client_as_the_apis_423(
    server: Server, bot: tuple[Pipeline, str]
) -> None:
    pipeline, token = bot

    async def go(cmd: str) -> Any:
        async with connected(server, token) as client:
            return await client.call_tool("sandbox_exec", {"cmd": cmd})

    assert not anyio.run(go, "true").is_error
    sandbox = Sandbox.objects.get(pipeline=pipeline)
    services.takeover_lease(sandbox, Actor("admin", "alice"), reason="looking")
    refused = anyio.run(go, "true")
    assert refused.is_error
    assert refused.structured_content["status"] == 423
    assert refused.structured_content["error"]["code"] == "taken_over"
    assert refused.content[0].text.startswith("423 taken_over:")
    assert "alice" in refused.content[0].text


def test_another_pipelines_token_sees_nothing_and_no_token_is_refused(
    server: Server, bot: tuple[Pipeline, str], make_pipeline: Any
) -> None:
    _, token = bot
    _, other = PipelineToken.issue(make_pipeline(slug="billing"), name="tests")

    async def go() -> tuple[Any, Any]:
        async with connected(server, token) as client:
            opened = await client.call_tool("sandbox_open", {})
        async with connected(server, other) as stranger:
            sandbox_id = opened.structured_content["sandbox_id"]
            return opened, await stranger.call_tool(
                "sandbox_fs_read", {"path": "x", "sandbox_id": sandbox_id}
            )

    _, refused = anyio.run(go)
    assert refused.is_error and refused.structured_content["status"] == 404
    for headers in ({}, {"Authorization": "Bearer byd_nope"}):
        answer = httpx.post(f"{server.url}/mcp", headers=headers, json={})
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("version", [None, "2025-11-25", "2026-07-28"])
def test_malformed_json_rpc_gets_an_error_never_a_500(
    server: Server, bot: tuple[Pipeline, str], version: str | None
) -> None:
    _, token = bot
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if version:
        headers["MCP-Protocol-Version"] = version
    bodies: list[bytes] = [
        b"{not json",
        b"[]",
        b'{"jsonrpc": "2.0", "id": 1}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "no/such"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nope"}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": 7}',
    ]
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        for body in bodies:
            answer = http.post(f"/mcp?{CHAT}", content=body)
            assert answer.status_code < 500, (body, answer.status_code, answer.text)
            assert "error" in answer.text, (body, answer.text)
    assert "Traceback" not in server.tail()
