"""A bot's MCP client at work on its chat's sandbox, end to end: a served Boxyard (`/mcp`), the
real engine, and the clients people use — the official `mcp` SDK in both of its modes (the
2026-07-28 revision without a session; the handshake, with one) and fastmcp.

The support pipeline keeps one sandbox per chat (`{launcher_type}_{launcher_id}`); its bot
connects with the chat in the URL or in `Boxyard-Var-*` headers, as a bot runtime would, and
the REST API is the witness of what the tools did.
"""

import base64
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from jsonschema import (  # type: ignore[import-untyped]  # no stubs; mcp's client uses it too
    Draft202012Validator,
    FormatChecker,
)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from pipelines.models import Pipeline, PipelineToken
from pipelines.tools import system_prompt
from sandboxes import services
from sandboxes.models import Exec, Sandbox
from sandboxes.schemas.tools import tool_specs
from sandboxes.services import Actor
from tests.conftest import wait_for
from tests.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHAT = {"launcher_type": "group", "launcher_id": "42"}
CHAT_QUERY = "launcher_type=group&launcher_id=42"
MODES = ["auto", "legacy"]
MODERN = "2026-07-28"
CATALOG = [spec.name for spec in tool_specs()]


@dataclass
class Bot:
    """A pipeline's bot: its pipeline and the API token its MCP client sends."""

    pipeline: Pipeline
    token: str


def bot_of(pipeline: Pipeline) -> Bot:
    _, token = PipelineToken.issue(pipeline, name="mcp")
    return Bot(pipeline, token)


@pytest.fixture
def support(server: Server, docker_engine: Any, make_pipeline: Any) -> Bot:
    """The support pipeline's bot: one sandbox per chat."""
    return bot_of(make_pipeline(slug="support", scope_template="{launcher_type}_{launcher_id}"))


@pytest.fixture
def billing(support: Bot, make_pipeline: Any) -> Bot:
    """Another pipeline's bot, which must never reach support's sandboxes."""
    return bot_of(make_pipeline(slug="billing", scope_template="{launcher_type}_{launcher_id}"))


@asynccontextmanager
async def connected(
    server: Server,
    bot: Bot,
    mode: str = "auto",
    query: str = CHAT_QUERY,
    headers: dict[str, str] | None = None,
    answers: list[httpx2.Response] | None = None,
) -> AsyncIterator[Client]:
    """The official client on `/mcp?{query}`; `answers` collects the HTTP responses it got."""

    async def seen(response: httpx2.Response) -> None:
        if answers is not None:
            answers.append(response)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {bot.token}", **(headers or {})},
        timeout=httpx2.Timeout(30, read=300),
        event_hooks={"response": [seen]},
    )
    url = f"{server.url}/mcp" + (f"?{query}" if query else "")
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def rest(server: Server, bot: Bot) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.url}/api/v1",
        headers={"Authorization": f"Bearer {bot.token}"},
        timeout=60,
    )


def conforming(result: types.CallToolResult, tool: types.Tool) -> dict[str, Any]:
    """A tool's successful answer, checked against the output schema it was listed with: every
    field of the schema, valid, and the same data as its text."""
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict) and tool.output_schema is not None
    Draft202012Validator(tool.output_schema, format_checker=FormatChecker()).validate(data)
    assert set(data) == set(tool.output_schema["properties"])
    text = result.content[0]
    assert isinstance(text, types.TextContent) and json.loads(text.text) == data
    return data


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions an exception group (of task groups in task groups) holds."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def refusal(result: types.CallToolResult) -> tuple[int, dict[str, Any], str]:
    """A tool error as the API's: its status, its error object and its text."""
    assert result.is_error, result.structured_content
    data = result.structured_content
    assert isinstance(data, dict), result.content
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    error = data["error"]
    assert text.text == f"{data['status']} {error['code']}: {error['message']}"
    return data["status"], error, text.text


# --- connecting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_official_client_connects_and_sees_the_catalog_and_the_prompt(
    server: Server, support: Bot, mode: str
) -> None:
    answers: list[httpx2.Response] = []

    async def go() -> tuple[str, types.ListToolsResult, Any, Any]:
        async with connected(server, support, mode, answers=answers) as client:
            return (
                client.protocol_version,
                await client.list_tools(),
                await client.list_prompts(),
                await client.get_prompt("sandbox_system_prompt"),
            )

    version, listed, prompts, prompt = anyio.run(go)
    sessions = {r.headers.get("mcp-session-id") for r in answers} - {None}
    if mode == "auto":
        assert version == MODERN and not sessions  # each request on its own
    else:
        assert version in HANDSHAKE_PROTOCOL_VERSIONS and len(sessions) == 1
    tools = {tool.name: tool for tool in listed.tools}
    assert list(tools) == CATALOG
    for spec in tool_specs():
        schema = tools[spec.name].input_schema
        assert set(schema["properties"]) == set(spec.parameters["properties"])
        # The chat's sandbox is the default: no tool needs its id.
        assert "sandbox_id" not in schema.get("required", []), spec.name
        assert tools[spec.name].output_schema == spec.output_schema
    assert tools["sandbox_exec"].input_schema["required"] == ["cmd"]
    reading = tools["sandbox_fs_read"].annotations
    assert reading is not None and reading.read_only_hint and reading.idempotent_hint
    deleting = tools["sandbox_fs_delete"].annotations
    assert deleting is not None and deleting.destructive_hint is True
    opening = tools["sandbox_open"].annotations
    assert opening is not None and opening.destructive_hint is False
    assert [p.name for p in prompts.prompts] == ["sandbox_system_prompt"]
    text = prompt.messages[0].content
    assert isinstance(text, types.TextContent)
    assert text.text == system_prompt(support.pipeline)


def test_fastmcp_connects_with_the_token_and_works_the_sandbox(
    server: Server, support: Bot
) -> None:
    async def go() -> tuple[list[str], list[str], str, Any]:
        transport = StreamableHttpTransport(f"{server.url}/mcp?{CHAT_QUERY}", auth=support.token)
        async with FastMCPClient(transport) as client:
            names = [tool.name for tool in await client.list_tools()]
            prompts = [prompt.name for prompt in await client.list_prompts()]
            prompt = await client.get_prompt("sandbox_system_prompt")
            content = prompt.messages[0].content
            assert isinstance(content, types.TextContent)
            ran = await client.call_tool("sandbox_exec", {"cmd": "echo $((6*7))"})
            return names, prompts, content.text, ran.structured_content

    names, prompts, prompt, ran = anyio.run(go)
    assert names == CATALOG
    assert prompts == ["sandbox_system_prompt"]
    assert prompt == system_prompt(support.pipeline)
    assert (ran["stdout"], ran["exit_code"], ran["status"]) == ("42\n", 0, "completed")


# --- the chat's sandbox -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "query", "headers"),
    [
        pytest.param("auto", CHAT_QUERY, {}, id="url-auto"),
        pytest.param("legacy", CHAT_QUERY, {}, id="url-legacy"),
        # The headers win over the query: launcher 1 in the URL, 42 in the header.
        pytest.param(
            "auto",
            "launcher_type=group&launcher_id=1",
            {"Boxyard-Var-Launcher-Id": "42"},
            id="headers-auto",
        ),
        pytest.param(
            "legacy",
            "",
            {"Boxyard-Var-Launcher-Type": "group", "Boxyard-Var-Launcher-Id": "42"},
            id="headers-legacy",
        ),
    ],
)
def test_a_tool_without_a_sandbox_id_works_in_the_chats_sandbox_as_the_api_opens_it(
    server: Server, support: Bot, mode: str, query: str, headers: dict[str, str]
) -> None:
    async def first_call() -> types.CallToolResult:
        async with connected(server, support, mode, query, headers) as client:
            # Before any open: the chat's sandbox is opened for the call.
            return await client.call_tool(
                "sandbox_fs_write", {"path": "notes.txt", "contents": "from mcp"}
            )

    written = anyio.run(first_call)
    assert not written.is_error, written.content
    with rest(server, support) as api:
        opened = api.post("/sandboxes/open", json={"pipeline": "support", "variables": CHAT})
        assert opened.status_code == 200, opened.text
        assert opened.json()["created"] is False  # MCP's call opened this very one
        sandbox_id = opened.json()["sandbox_id"]
        read = api.get(f"/sandboxes/{sandbox_id}/files", params={"path": "notes.txt"})
        assert read.json()["contents"] == "from mcp"

    async def then_open() -> types.CallToolResult:
        async with connected(server, support, mode, query, headers) as client:
            return await client.call_tool("sandbox_open", {})

    reopened = anyio.run(then_open).structured_content
    assert reopened is not None
    assert (reopened["scope_key"], reopened["sandbox_id"]) == ("group_42", sandbox_id)
    assert reopened["created"] is False
    assert Sandbox.objects.filter(pipeline=support.pipeline).count() == 1


def test_a_url_without_a_variable_the_scope_needs_is_a_400_naming_it(
    server: Server, support: Bot
) -> None:
    async def go() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with connected(server, support, query="launcher_type=group") as client:
            return (
                await client.call_tool("sandbox_open", {}),
                await client.call_tool("sandbox_fs_write", {"path": "a", "contents": "a"}),
            )

    for result in anyio.run(go):
        status, error, text = refusal(result)
        assert (status, error["code"], error["field"]) == (
            400,
            "invalid_input",
            "variables.launcher_id",
        )
        assert text.startswith("400 invalid_input: ") and "launcher_id" in text
    assert not Sandbox.objects.filter(pipeline=support.pipeline).exists()


# --- commands and files -------------------------------------------------------------------------


def test_commands_and_files_through_mcp_answer_as_their_schemas_say(
    server: Server, support: Bot
) -> None:
    blob = bytes(range(256)) * 4

    async def go() -> tuple[dict[str, types.Tool], dict[str, types.CallToolResult], bytes]:
        async with connected(server, support) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            calls: list[tuple[str, str, dict[str, Any]]] = [
                ("ran", "sandbox_exec", {"cmd": "echo out; echo err >&2; exit 3"}),
                ("argv", "sandbox_exec", {"cmd": ["sh", "-c", 'echo "$0 $1"', "a b", "c"]}),
                ("text", "sandbox_fs_write", {"path": "docs/héllo.txt", "contents": "héllo\n"}),
                ("binary", "sandbox_fs_write",
                 {"path": "docs/blob.bin", "contents_b64": base64.b64encode(blob).decode()}),
                ("read_text", "sandbox_fs_read", {"path": "docs/héllo.txt"}),
                ("read_binary", "sandbox_fs_read", {"path": "docs/blob.bin"}),
                ("listed", "sandbox_fs_list", {"path": "docs"}),
                ("linked", "sandbox_fs_link", {"path": "docs/blob.bin"}),
            ]  # fmt: skip
            done = {key: await client.call_tool(name, args) for key, name, args in calls}
            # The user downloads the linked file with no token: the link is the permission.
            linked = done["linked"].structured_content or {}
            async with httpx.AsyncClient() as user:
                downloaded = await user.get(linked.get("url", f"{server.url}/links/none"))
                assert downloaded.status_code == 200, downloaded.text
            done["deleted"] = await client.call_tool(
                "sandbox_fs_delete", {"path": "docs", "recursive": True}
            )
            done["gone"] = await client.call_tool("sandbox_fs_read", {"path": "docs/héllo.txt"})
            return tools, done, downloaded.content

    tools, done, downloaded = anyio.run(go)

    def answer(key: str, tool: str) -> dict[str, Any]:
        return conforming(done[key], tools[tool])

    ran = answer("ran", "sandbox_exec")
    assert (ran["exit_code"], ran["stdout"], ran["stderr"], ran["status"]) == (
        3, "out\n", "err\n", "completed",
    )  # fmt: skip
    assert answer("argv", "sandbox_exec")["stdout"] == "a b c\n"
    assert answer("text", "sandbox_fs_write") == {
        "ok": True, "path": "/workspace/docs/héllo.txt", "size_bytes": len("héllo\n".encode()),
        "sha256": hashlib.sha256("héllo\n".encode()).hexdigest(),
    }  # fmt: skip
    assert answer("binary", "sandbox_fs_write")["size_bytes"] == len(blob)
    text = answer("read_text", "sandbox_fs_read")
    assert (text["contents"], text["contents_b64"], text["truncated"]) == ("héllo\n", None, False)
    binary = answer("read_binary", "sandbox_fs_read")
    assert binary["contents"] is None and base64.b64decode(binary["contents_b64"]) == blob
    entries = answer("listed", "sandbox_fs_list")["entries"]
    assert sorted((e["name"], e["type"], e["size"]) for e in entries) == [
        ("blob.bin", "file", len(blob)), ("héllo.txt", "file", 7),
    ]  # fmt: skip
    link = answer("linked", "sandbox_fs_link")
    assert link["url"].startswith(f"{server.url}/") and link["method"] == "GET"
    assert downloaded == blob
    assert answer("deleted", "sandbox_fs_delete") == {"ok": True, "deleted": "/workspace/docs"}
    status, error, _ = refusal(done["gone"])
    assert (status, error["code"]) == (404, "not_found")


@pytest.mark.parametrize("mode", MODES)
def test_waiting_for_a_background_command_reports_its_output_as_it_comes(
    server: Server, support: Bot, mode: str
) -> None:
    seen: list[tuple[float, str | None]] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic(), message))

    async def go() -> tuple[types.CallToolResult, types.CallToolResult, float]:
        async with connected(server, support, mode) as client:
            started = await client.call_tool(
                "sandbox_exec",
                {"cmd": "for i in 1 2 3; do echo bg$i; sleep 0.3; done", "background": True},
            )
            assert started.structured_content is not None, started.content
            waited = await client.call_tool(
                "sandbox_exec_wait",
                {"exec_id": started.structured_content["exec_id"], "timeout_seconds": 30},
                progress_callback=report,
            )
            return started, waited, time.monotonic()

    started, waited, answered = anyio.run(go)
    assert started.structured_content is not None
    assert started.structured_content["status"] == "running"
    assert started.structured_content["background"] is True
    assert waited.structured_content == {"done": True, "status": "completed", "exit_code": 0}
    assert "".join(message or "" for _, message in seen) == "bg1\nbg2\nbg3\n"
    assert seen[0][0] < answered - 0.3  # the first line came while the command still ran


@pytest.mark.parametrize("mode", MODES)
def test_a_command_in_the_foreground_reports_each_line_as_it_runs(
    server: Server, support: Bot, mode: str
) -> None:
    seen: list[tuple[float, str | None]] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic(), message))

    async def go() -> tuple[types.CallToolResult, float]:
        async with connected(server, support, mode) as client:
            await client.call_tool("sandbox_open", {})
            result = await client.call_tool(
                "sandbox_exec",
                {"cmd": "for i in 1 2 3; do echo line$i; sleep 0.2; done"},
                progress_callback=report,
            )
            return result, time.monotonic()

    result, answered = anyio.run(go)
    assert result.structured_content is not None
    assert result.structured_content["stdout"] == "line1\nline2\nline3\n"
    # Every line came as progress (none after the answer, which the client would drop) ...
    assert "".join(message or "" for _, message in seen) == "line1\nline2\nline3\n"
    assert seen[0][0] < answered - 0.3  # ... and line1 came while the command still ran


def processes(api: httpx.Client, sandbox_id: str) -> str:
    """What runs in the sandbox, seen from a process of its own (outside any shell session)."""
    listed = api.post(
        f"/sandboxes/{sandbox_id}/exec", json={"cmd": ["ps", "-o", "pid,args"], "fresh": True}
    )
    assert listed.status_code == 200, listed.text
    return str(listed.json()["stdout"])


@pytest.mark.parametrize("mode", MODES)
def test_a_command_the_client_cancels_is_killed_with_everything_it_started(
    server: Server, support: Bot, mode: str
) -> None:
    # Durations no other test uses: the marker of this command's processes in `ps`.
    first = random.randint(100_000, 999_998)
    markers = [f"sleep {first}", f"sleep {first + 1}"]
    command = f"echo started; {markers[0]} & {markers[1]}; echo never"
    running_seen: list[str] = []

    async def go() -> types.CallToolResult:
        async with connected(server, support, mode) as client:
            opened = await client.call_tool("sandbox_open", {})
            assert opened.structured_content is not None
            sandbox_id = opened.structured_content["sandbox_id"]
            started = anyio.Event()

            async def report(progress: float, total: float | None, message: str | None) -> None:
                if message and "started" in message:
                    started.set()

            async def call() -> None:
                await client.call_tool("sandbox_exec", {"cmd": command}, progress_callback=report)
                raise AssertionError("the command ended by itself")

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                with anyio.fail_after(30):
                    await started.wait()
                with rest(server, support) as api:
                    running_seen.append(processes(api, sandbox_id))
                group.cancel_scope.cancel()  # the user pressed stop
            # The chat goes on: the next command runs.
            return await client.call_tool("sandbox_exec", {"cmd": "echo after"})

    after = anyio.run(go)
    assert all(marker in running_seen[0] for marker in markers), running_seen
    sandbox = Sandbox.objects.get(pipeline=support.pipeline)
    with rest(server, support) as api:
        wait_for(
            lambda: not any(marker in processes(api, str(sandbox.pk)) for marker in markers),
            10,
            lambda: processes(api, str(sandbox.pk)) + server.tail(),
        )
        record = Exec.objects.get(sandbox=sandbox, command=command)
        url = f"/sandboxes/{sandbox.pk}/execs/{record.pk}"
        wait_for(lambda: api.get(url).json()["status"] == "killed", 10, lambda: api.get(url).text)
    assert not after.is_error and after.structured_content is not None, after.content
    assert after.structured_content["stdout"] == "after\n"


def test_the_exec_timeout_still_applies_through_mcp(server: Server, support: Bot) -> None:
    async def go() -> tuple[float, types.CallToolResult]:
        async with connected(server, support) as client:
            await client.call_tool("sandbox_open", {})
            started = time.monotonic()
            result = await client.call_tool(
                "sandbox_exec", {"cmd": "sleep 30", "timeout_seconds": 1}
            )
            return time.monotonic() - started, result

    took, result = anyio.run(go)
    assert result.structured_content is not None, result.content
    assert result.structured_content["status"] == "timed_out"
    assert 1 <= took < 5


# --- who may act --------------------------------------------------------------------------------


def test_an_admin_taking_the_sandbox_over_stops_the_bots_next_command(
    server: Server, support: Bot, alice_actor: Actor
) -> None:
    async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        async with connected(server, support) as client:
            return await client.call_tool(name, arguments)

    opened = anyio.run(call, "sandbox_open", {})
    assert opened.structured_content is not None
    sandbox = Sandbox.objects.get(pk=opened.structured_content["sandbox_id"])
    services.takeover_lease(sandbox, alice_actor, reason="checking the bot's work")

    status, error, text = refusal(anyio.run(call, "sandbox_exec", {"cmd": "touch ran.txt"}))
    assert (status, error["code"]) == (423, "taken_over")
    assert text.startswith("423 taken_over: ") and "alice" in text
    status, error, _ = refusal(anyio.run(call, "sandbox_fs_write", {"path": "w", "contents": "w"}))
    assert (status, error["code"]) == (423, "taken_over")
    with rest(server, support) as api:  # nothing ran
        listing = api.get(f"/sandboxes/{sandbox.pk}/files/list").json()["entries"]
        assert not {"ran.txt", "w"} & {entry["name"] for entry in listing}


def test_another_pipelines_token_finds_no_sandbox_and_a_bad_token_cannot_connect(
    server: Server, support: Bot, billing: Bot
) -> None:
    async def open_for_support() -> str:
        async with connected(server, support) as client:
            opened = await client.call_tool("sandbox_open", {})
            assert opened.structured_content is not None
            return str(opened.structured_content["sandbox_id"])

    sandbox_id = anyio.run(open_for_support)

    async def billing_tries() -> list[types.CallToolResult]:
        async with connected(server, billing) as client:
            tries: list[tuple[str, dict[str, Any]]] = [
                ("sandbox_exec", {"cmd": "touch billing-was-here"}),
                ("sandbox_fs_read", {"path": "x"}),
                ("sandbox_close", {"delete_workspace": True}),
            ]
            return [
                await client.call_tool(name, {"sandbox_id": sandbox_id, **arguments})
                for name, arguments in tries
            ]

    for result in anyio.run(billing_tries):
        status, error, _ = refusal(result)
        assert (status, error["code"]) == (404, "not_found")
    assert Sandbox.objects.get(pk=sandbox_id).state == "running"
    assert not Sandbox.objects.filter(pipeline=billing.pipeline).exists()

    # A token nobody issued: the client cannot connect, in either mode, and the reason it
    # got is the HTTP 401.
    stranger = Bot(support.pipeline, "byd_not-a-token")
    for mode in MODES:
        answers: list[httpx2.Response] = []

        async def connect(mode: str = mode, answers: list[httpx2.Response] = answers) -> None:
            async with connected(server, stranger, mode, answers=answers) as client:
                await client.list_tools()

        with pytest.raises(Exception) as failed:  # the SDK wraps it: checked below
            anyio.run(connect)
        assert all(isinstance(error, MCPError) for error in leaves(failed.value)), failed.value
        assert answers and {answer.status_code for answer in answers} == {401}, mode
    for headers in ({}, {"Authorization": "Bearer byd_not-a-token"}, {"Authorization": "Basic x"}):
        answer = httpx.post(f"{server.url}/mcp", headers=headers, json={})
        assert answer.status_code == 401, answer.text
        assert answer.headers["WWW-Authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "unauthorized"


# --- malformed messages and bad input ------------------------------------------------------------

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call(arguments: Any, name: str = "sandbox_exec", envelope: bool = True) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if envelope:
        params["_meta"] = ENVELOPE
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def message(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message a POST was answered with, as JSON or as the last SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        assert events, response.text
        answer: dict[str, Any] = json.loads(events[-1])
    else:
        answer = response.json()
    return answer


@pytest.mark.parametrize("revision", ["2026-07-28", "session", "no-header"])
def test_malformed_json_rpc_is_answered_with_an_error_never_a_500(
    server: Server, support: Bot, revision: str
) -> None:
    headers = {
        "Authorization": f"Bearer {support.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    log_before = len(server.log.read_bytes())
    http = httpx.Client(base_url=server.url, headers=headers, timeout=30)
    if revision == MODERN:
        http.headers["MCP-Protocol-Version"] = MODERN
    elif revision == "session":
        hello = http.post(
            f"/mcp?{CHAT_QUERY}",
            json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "tests", "version": "1"}},
            },
        )  # fmt: skip
        assert hello.status_code == 200, hello.text
        http.headers["Mcp-Session-Id"] = hello.headers["mcp-session-id"]
        http.headers["MCP-Protocol-Version"] = "2025-11-25"
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(f"/mcp?{CHAT_QUERY}", json=done).status_code == 202

    def post(body: Any, **extra: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return http.post(f"/mcp?{CHAT_QUERY}", content=content, headers=extra)

    def tool(arguments: Any, name: str = "sandbox_exec") -> httpx.Response:
        if revision == MODERN:  # the method and the tool's name are headers too
            return post(call(arguments, name), **{"Mcp-Method": "tools/call", "Mcp-Name": name})
        return post(call(arguments, name, envelope=False))

    unknown_method = {"jsonrpc": "2.0", "id": 3, "method": "no/such", "params": {"_meta": ENVELOPE}}
    answers: dict[str, httpx.Response] = {
        "invalid JSON": post(b'{"jsonrpc": "2.0", "id": 1, "method": '),
        "empty array": post(b"[]"),
        "batch": post([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]),
        "no method": post({"jsonrpc": "2.0", "id": 2, "params": {"_meta": ENVELOPE}}),
        "a number": post(b"7"),
        "unknown method": post(unknown_method, **{"Mcp-Method": "no/such"}),
        "params not an object": post(
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": 7},
            **{"Mcp-Method": "tools/call"},
        ),
        "unknown tool": tool({}, name="sandbox_nope"),
        "arguments not an object": tool("echo hi"),
        "cmd a number": tool({"cmd": 3}),
    }
    for case, answer in answers.items():
        assert answer.status_code < 500, (case, answer.status_code, answer.text)
        if answer.status_code == 202:
            raise AssertionError(f"{case}: accepted as a notification: {answer.text}")
        reply = message(answer)
        is_tool_error = reply.get("result", {}).get("isError") is True
        assert "error" in reply or is_tool_error, (case, reply)
    if revision != "no-header":
        assert message(answers["invalid JSON"])["error"]["code"] == types.PARSE_ERROR
        assert message(answers["unknown method"])["error"]["code"] == types.METHOD_NOT_FOUND
        wrong = message(answers["cmd a number"])["result"]
        assert wrong["isError"] is True
        assert wrong["structuredContent"]["status"] == 400
        assert wrong["structuredContent"]["error"]["field"] == "cmd"
        assert wrong["content"][0]["text"].startswith("400 invalid_input: cmd")
    http.close()
    log = server.log.read_bytes()[log_before:].decode(errors="replace")
    assert "Traceback" not in log and "Exception in ASGI" not in log, log
    assert not Sandbox.objects.filter(pipeline=support.pipeline).exists()


def no_sandbox_after(server: Server, bot: Bot, tool: str, arguments: dict[str, Any]) -> str:
    """Call a tool for a chat that has no sandbox yet; the field its 400 names, once it is
    checked that the call left no sandbox behind."""

    async def go() -> types.CallToolResult:
        async with connected(server, bot) as client:
            return await client.call_tool(tool, arguments)

    status, error, text = refusal(anyio.run(go))
    assert (status, error["code"]) == (400, "invalid_input"), text
    with rest(server, bot) as api:
        assert api.get("/sandboxes").json()["sandboxes"] == [], text
    assert not Sandbox.objects.filter(pipeline=bot.pipeline).exists()
    return str(error["field"])


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("sandbox_exec", {"cmd": 3}, "cmd"),
        ("sandbox_exec", {"cmd": "true", "timeout_seconds": 0}, "timeout_seconds"),
        ("sandbox_exec", {"cmd": "true", "env": {"A": 1}}, "env.A"),
        ("sandbox_exec", {"cmd": "true", "shell": "bash"}, "shell"),
        ("sandbox_fs_write", {"contents": "no path"}, "path"),
        ("sandbox_fs_read", {"path": "a", "max_bytes": -1}, "max_bytes"),
        ("sandbox_exec_wait", {"exec_id": "x", "timeout_seconds": 10_000}, "timeout_seconds"),
    ],
    ids=["cmd-a-number", "timeout-0", "env-a-number", "unknown-argument", "no-path",
         "max-bytes-negative", "wait-too-long"],
)  # fmt: skip
def test_a_call_whose_arguments_do_not_fit_the_schema_opens_no_sandbox(
    server: Server, support: Bot, tool: str, arguments: dict[str, Any], field: str
) -> None:
    assert no_sandbox_after(server, support, tool, arguments) == field


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("sandbox_fs_write", {"path": "/etc/passwd", "contents": "x"}, "path"),
        ("sandbox_fs_write", {"path": "a", "contents": "a", "contents_b64": "YQ=="}, "contents"),
        ("sandbox_exec", {"cmd": "true", "session": "bad session name!"}, "session"),
        ("sandbox_fs_link", {"path": "a", "method": "POST"}, "method"),
    ],
    ids=["path-outside-workspace", "both-contents", "bad-session-name", "link-method-post"],
)
def test_a_call_the_services_refuse_opens_no_sandbox_either(
    server: Server, support: Bot, tool: str, arguments: dict[str, Any], field: str
) -> None:
    """Input the schema lets through but the services refuse (a path outside /workspace, both
    contents, ...): still a 400 for the chat with no sandbox, and still nothing opened."""
    assert no_sandbox_after(server, support, tool, arguments) == field


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("sandbox_exec_read", {"exec_id": "7a1d2c3b-0000-4000-8000-000000000002"}),
        ("sandbox_exec_wait", {"exec_id": "7a1d2c3b-0000-4000-8000-000000000002"}),
        ("sandbox_exec_kill", {"exec_id": "7a1d2c3b-0000-4000-8000-000000000002"}),
        ("sandbox_close", {}),
    ],
)
def test_what_acts_on_an_earlier_call_opens_no_sandbox_for_a_new_chat(
    server: Server, support: Bot, tool: str, arguments: dict[str, Any]
) -> None:
    """Reading, waiting for or killing an exec, or closing, need a sandbox an earlier call
    opened: for a chat without one they are a 404, and open none."""

    async def go() -> types.CallToolResult:
        async with connected(server, support) as client:
            return await client.call_tool(tool, arguments)

    status, error, text = refusal(anyio.run(go))
    assert (status, error["code"]) == (404, "not_found"), text
    assert "no open sandbox" in text
    assert not Sandbox.objects.filter(pipeline=support.pipeline).exists()
