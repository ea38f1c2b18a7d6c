"""What one pipeline may take of `/mcp` in a served Boxyard, with the official `mcp` client: its
own number of sessions (one more is 429 while another pipeline still connects), a short life
for a session that only ran `initialize`, and a clear JSON-RPC error once a session has ended;
and the arguments clients send for what they leave out (null, an empty `sandbox_id`)."""

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # no stubs
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pipelines.models import PipelineToken
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CAP = 3
UNUSED_SECONDS = 2
IDLE_SECONDS = 30
VERSION = "2025-11-25"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> Iterator[Server]:
    with served(
        tmp_path_factory.mktemp("limits"),
        BOXYARD_MCP_SESSIONS_PER_PIPELINE=str(CAP),
        BOXYARD_MCP_UNUSED_SESSION_SECONDS=str(UNUSED_SECONDS),
        BOXYARD_MCP_SESSION_IDLE_SECONDS=str(IDLE_SECONDS),
    ) as running:
        yield running


def token_of(make_pipeline: Any, slug: str) -> str:
    _, token = PipelineToken.issue(make_pipeline(slug=slug), name="tests")
    return token


@asynccontextmanager
async def connected(
    server: Server, token: str, answers: list[httpx2.Response] | None = None
) -> AsyncIterator[Client]:
    """The official client with a session (the handshake's revisions)."""

    async def seen(response: httpx2.Response) -> None:
        if answers is not None:
            answers.append(response)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30, read=120),
        event_hooks={"response": [seen]},
    )
    url = f"{server.url}/mcp?launcher_type=group&launcher_id=7"
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        yield c


def raw(server: Server, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
        timeout=30,
    )


def initialize(http: httpx.Client, identifier: int = 1, path: str = "/mcp") -> httpx.Response:
    return http.post(
        path,
        json={
            "jsonrpc": "2.0",
            "id": identifier,
            "method": "initialize",
            "params": {
                "protocolVersion": VERSION,
                "capabilities": {},
                "clientInfo": {"name": "tests", "version": "1"},
            },
        },
    )


def list_tools(http: httpx.Client, session: str, identifier: int = 2) -> httpx.Response:
    return http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": identifier, "method": "tools/list"},
        headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION},
    )


def messages(error: BaseException) -> str:
    """Every message in an error and the groups and causes around it."""
    found = [str(error)]
    for inner in getattr(error, "exceptions", ()):
        found.append(messages(inner))
    if error.__cause__ is not None:
        found.append(messages(error.__cause__))
    return " | ".join(found)


def test_a_pipeline_at_its_session_limit_gets_429_while_another_still_connects(
    server: Server, make_pipeline: Any
) -> None:
    greedy = make_pipeline(slug="greedy")
    _, first = PipelineToken.issue(greedy, name="one")
    _, second = PipelineToken.issue(greedy, name="two")
    other = token_of(make_pipeline, "other")

    async def go() -> tuple[list[str], list[str]]:
        async with AsyncExitStack() as stack:
            for _ in range(CAP):  # the greedy pipeline's sessions, all of them kept open
                client = await stack.enter_async_context(connected(server, first))
                await client.list_tools()
            refused = []
            for token in (first, second):  # every token of the pipeline counts
                try:
                    async with connected(server, token):
                        refused.append("connected")
                except Exception as error:  # the client's error, as it shows it
                    refused.append(messages(error))
            async with connected(server, other) as client:
                listed = await client.list_tools()
            return [tool.name for tool in listed.tools], refused

    names, refused = anyio.run(go)
    assert "sandbox_exec" in names  # another pipeline is not locked out
    for message in refused:
        assert "BOXYARD_MCP_SESSIONS_PER_PIPELINE" in message, message
        assert f"has {CAP} open" in message, message
    with raw(server, first) as http:  # the answer itself (the client's sessions have ended)
        opened = [initialize(http, n) for n in range(CAP)]
        assert all(answer.status_code == 200 for answer in opened), opened[0].text
        answer = initialize(http, 99)
    assert answer.status_code == 429, answer.text
    assert answer.headers["retry-after"] == str(UNUSED_SECONDS)
    body = answer.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 99
    assert body["error"]["data"] == {"limit": CAP, "setting": "BOXYARD_MCP_SESSIONS_PER_PIPELINE"}


def test_a_session_that_only_initialized_ends_soon_and_frees_its_place(
    server: Server, make_pipeline: Any
) -> None:
    process = {"name": "notes", "cmd": ["sleep", "infinity"]}
    _, token = PipelineToken.issue(make_pipeline(slug="idler", processes=[process]), name="t")
    with raw(server, token) as http:
        used = initialize(http).headers["mcp-session-id"]
        assert list_tools(http, used).status_code == 200
        unused = [initialize(http, n).headers["mcp-session-id"] for n in range(CAP - 1)]
        # A gateway's sessions count with the pipeline's others.
        assert initialize(http, path="/mcp/servers/notes").status_code == 429
        assert initialize(http).status_code == 429
        anyio.run(anyio.sleep, UNUSED_SECONDS + 1.5)
        gone = list_tools(http, unused[0], identifier=7)
        kept = list_tools(http, used)
        again = initialize(http)
    assert gone.status_code == 404, gone.text
    assert gone.json()["id"] == 7 and "has ended" in gone.json()["error"]["message"]
    assert kept.status_code == 200, kept.text  # a used session lives its full idle time
    assert again.status_code == 200, again.text  # the ended ones no longer count


def test_a_session_that_ended_gets_a_json_rpc_error_that_the_client_shows(
    server: Server, make_pipeline: Any
) -> None:
    token = token_of(make_pipeline, "ended")
    answers: list[httpx2.Response] = []

    async def go() -> tuple[str, str]:
        async with connected(server, token, answers) as client:
            await client.list_tools()
            session = next(
                r.headers["mcp-session-id"] for r in answers if "mcp-session-id" in r.headers
            )
            async with httpx2.AsyncClient(base_url=server.url) as http:
                ended = await http.delete(
                    "/mcp",
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Mcp-Session-Id": session,
                        "MCP-Protocol-Version": VERSION,
                    },
                )
                assert ended.status_code == 200, ended.text
            try:
                await client.list_tools()
            except Exception as error:
                return session, messages(error)
            return session, "answered"

    session, shown = anyio.run(go)
    assert "MCP session not found: it has ended" in shown, shown
    assert "send initialize without an Mcp-Session-Id" in shown, shown
    with raw(server, token) as http:
        answer = list_tools(http, session, identifier=12)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["jsonrpc"] == "2.0" and answer.json()["id"] == 12
    assert f"{IDLE_SECONDS} s without a request" in answer.json()["error"]["message"]


def test_null_and_an_empty_sandbox_id_are_taken_as_left_out(
    server: Server, make_pipeline: Any, docker_engine: Any
) -> None:
    pipeline = make_pipeline(slug="nulls", scope_template="{launcher_type}_{launcher_id}")
    _, token = PipelineToken.issue(pipeline, name="tests")

    async def go() -> tuple[Any, list[Any]]:
        async with connected(server, token) as client:
            listed = await client.list_tools()
            schemas = {tool.name: tool.input_schema for tool in listed.tools}

            def every_key(name: str, **given: Any) -> dict[str, Any]:
                """What a client that sends every key sends: null for all it leaves out."""
                return dict.fromkeys(schemas[name]["properties"]) | given

            calls = [
                ("sandbox_fs_write", every_key("sandbox_fs_write", path="a.txt", contents="hi")),
                ("sandbox_exec", every_key("sandbox_exec", cmd="cat a.txt", sandbox_id="")),
                ("sandbox_fs_read", every_key("sandbox_fs_read", path="a.txt", sandbox_id="")),
                ("sandbox_fs_list", every_key("sandbox_fs_list")),
            ]
            return listed, [await client.call_tool(name, args) for name, args in calls]

    listed, results = anyio.run(go)
    for result in results:
        assert not result.is_error, result.content
    _, ran, read, files = (result.structured_content for result in results)
    assert ran["stdout"] == "hi" and read["contents"] == "hi"
    assert "a.txt" in {entry["name"] for entry in files["entries"]}
    for tool in listed.tools:  # the schemas say so: every optional argument may be null
        schema = tool.input_schema
        for name, argument in schema["properties"].items():
            optional = name not in schema.get("required", [])
            assert Draft202012Validator(argument).is_valid(None) == optional, (tool.name, name)
