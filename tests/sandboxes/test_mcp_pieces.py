"""The MCP server's pieces that need no server: the caller's token and chat variables, the tools
as MCP lists them (from the one catalog), and the stdio peer's reading of a process's output."""

import asyncio
from typing import Any

import pytest

from boxyard.errors import InvalidInput
from pipelines import scope
from sandboxes.mcp.connection import bearer_token, chat_variables
from sandboxes.mcp.stdio import PeerError, ProcessExited, ProcessPeer
from sandboxes.mcp.tools import listed_tools
from sandboxes.schemas.tools import HIDDEN, tool_specs


def asgi(query: bytes = b"", **headers: str) -> dict[str, Any]:
    return {
        "query_string": query,
        "headers": [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in headers.items()],
    }


def test_the_chat_comes_from_the_query_and_a_header_wins() -> None:
    found = chat_variables(
        asgi(b"launcher_type=group&launcher_id=42", boxyard_var_launcher_id="7", other="x")
    )
    assert found == {"launcher_type": "group", "launcher_id": "7"}
    assert chat_variables(asgi(b"sender_id=%E5%BC%A0")) == {"sender_id": "张"}


def test_a_query_that_is_not_utf8_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput) as refused:
        chat_variables(asgi(b"launcher_id=\xff"))
    assert refused.value.field == "query"


@pytest.mark.parametrize(
    ("value", "token"),
    [("Bearer byd_x", "byd_x"), ("bearer  byd_x ", "byd_x"), ("Basic abc", None), ("Bearer", None)],
)
def test_only_a_bearer_token_is_a_token(value: str, token: str | None) -> None:
    assert bearer_token(asgi(authorization=value)) == token
    assert bearer_token(asgi()) is None


def test_a_scope_generates_only_where_its_chain_falls_through_to_uuid() -> None:
    assert scope.generates("{conversation_id|uuid}", {})
    assert not scope.generates("{conversation_id|uuid}", {"conversation_id": "c1"})
    assert not scope.generates("{launcher_type}_{launcher_id}", {})
    assert scope.generates("chat_{uuid}", {"launcher_id": "1"})


def test_mcp_lists_the_catalog_with_sandbox_id_optional() -> None:
    for network in (False, True):
        listed = listed_tools(network)
        assert [tool.name for tool in listed] == [spec.name for spec in tool_specs()]
        for tool, spec in zip(listed, tool_specs(), strict=True):
            catalog = spec.parameters
            assert tool.input_schema["properties"].keys() == catalog["properties"].keys()
            assert "sandbox_id" not in tool.input_schema.get("required", [])
            assert set(tool.input_schema.get("required", [])) == set(
                catalog.get("required", [])
            ) - {"sandbox_id"}
            assert tool.output_schema == spec.output_schema
            hints = tool.annotations
            assert hints is not None
            assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
                spec.hints.read_only,
                spec.hints.destructive,
                spec.hints.idempotent,
            )
            assert hints.open_world_hint is (
                network and spec.name in ("sandbox_exec", "sandbox_run_code", "sandbox_run")
            )


def test_the_schemas_are_the_api_shapes_own() -> None:
    """No second copy: every argument's schema and description is the request shape's."""
    for spec in tool_specs():
        for shape in (spec.body, spec.query):
            if shape is None:
                continue
            for attribute, field in shape.model_fields.items():
                name = field.alias or attribute
                if name in HIDDEN:
                    assert name not in spec.parameters["properties"]
                    continue
                argument = spec.parameters["properties"][name]
                assert argument.get("description") == field.description, (spec.name, name)
                assert field.description, f"{shape.__name__}.{name} has no description"


def test_the_output_schema_is_the_response_shape_without_refs() -> None:
    exec_out = next(spec for spec in tool_specs() if spec.name == "sandbox_exec").output_schema
    assert exec_out["properties"]["exec_id"] == {"format": "uuid", "type": "string"}
    assert {"type": "null"} in exec_out["properties"]["exit_code"]["anyOf"]
    listing = next(spec for spec in tool_specs() if spec.name == "sandbox_fs_list").output_schema
    assert "$ref" not in str(listing) and "$defs" not in listing
    assert listing["properties"]["entries"]["items"]["properties"]["mtime_unix"] == {
        "type": "integer"
    }


# --- the stdio peer ------------------------------------------------------------------------


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def waiting(peer: ProcessPeer, request_id: str) -> "asyncio.Future[Any]":
    future = peer.loop.create_future()
    peer._waiting[request_id] = future
    return future


def test_answers_are_read_across_chunks_and_only_for_the_peers_own_ids() -> None:
    async def go() -> tuple[Any, Any]:
        peer = ProcessPeer(None, "notes", None)  # type: ignore[arg-type]  # nothing is written
        mine, theirs = f"{peer._prefix}1", "bot-1"
        answer = waiting(peer, mine)
        other = waiting(peer, f"{peer._prefix}2")
        peer._take({"event": "chunk", "stream": "stdout", "text": 'starting up...\n{"jsonrpc'})
        peer._take({"event": "chunk", "stream": "stderr", "text": '{"id": "x"}\n'})
        peer._take(
            {
                "event": "chunk",
                "stream": "stdout",
                "text": f'":"2.0","id":"{theirs}","result":1}}\n',
            }
        )
        assert not answer.done()
        peer._take(
            {
                "event": "chunk",
                "stream": "stdout",
                "text": f'{{"jsonrpc":"2.0","id":"{mine}","result":{{"ok":true}}}}\n'
                f'{{"jsonrpc":"2.0","id":"{peer._prefix}2","error":{{"code":-32601,'
                '"message":"no such method"}}\n',
            }
        )
        return await answer, await asyncio.gather(other, return_exceptions=True)

    result, (error,) = run(go())
    assert result == {"ok": True}
    assert isinstance(error, PeerError) and (error.code, error.message) == (
        -32601,
        "no such method",
    )


def test_the_end_of_the_run_fails_what_waits_and_what_comes_next() -> None:
    async def go() -> tuple[Any, ProcessPeer]:
        peer = ProcessPeer(None, "notes", None)  # type: ignore[arg-type]  # nothing is written
        answer = waiting(peer, f"{peer._prefix}1")
        peer._take({"event": "exit", "exit_code": 3})
        (outcome,) = await asyncio.gather(answer, return_exceptions=True)
        return outcome, peer

    outcome, peer = run(go())
    assert isinstance(outcome, ProcessExited)
    assert "exited (exit code 3)" in outcome.message
    with pytest.raises(ProcessExited):
        run(peer.request("tools/list", {}))
