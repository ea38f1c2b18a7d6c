"""A protocol is a door onto the operation records (`sandboxes.operations`): read from the
source and from what each door serves. No MCP module imports the bot API's routes; the records
import no protocol; every MCP tool, every tool definition and every JSON route of the bot API
is made from a record, and the routes that are not are named here."""

from config.api import api
from sandboxes import operations
from sandboxes.mcp import tools as mcp_tools
from sandboxes.operations import OPERATIONS, TOOLS
from sandboxes.schemas.tools import API_PREFIX, tool_specs
from tests.test_layers import REPO, _imports, _module

# Routes of the bot API written by hand, as no record's answer fits them: bytes streamed in or
# out, server-sent events, and reads of the caller's pipeline rather than of one sandbox.
HAND_WRITTEN = {
    ("GET", "/sandboxes/{sandbox_id}/execs/{exec_id}/output/raw"),  # bytes, streamed
    ("GET", "/sandboxes/{sandbox_id}/execs/{exec_id}/stream"),  # server-sent events
    ("PUT", "/sandboxes/{sandbox_id}/files/raw"),  # an upload of any size, as it arrives
    ("GET", "/sandboxes/{sandbox_id}/files/raw"),  # a download: ranges, ETag
    ("HEAD", "/sandboxes/{sandbox_id}/files/raw"),
    ("GET", "/sandboxes/{sandbox_id}/files/archive"),  # a directory as an archive
    ("PUT", "/sandboxes/{sandbox_id}/files/archive"),  # an archive extracted, streamed in
    ("GET", "/sandboxes"),  # the pipeline's sandboxes
    ("GET", "/metrics"),  # the pipeline's metrics
    ("GET", "/pipelines/{slug}/tools"),  # the tool definitions themselves
}


def _importing(package: str, banned: tuple[str, ...]) -> list[str]:
    """What the modules of `package` import of `banned` (read from the source)."""
    found = []
    for path in (REPO / package.replace(".", "/")).rglob("*.py"):
        found += [
            f"{_module(path)} imports {name}"
            for name in _imports(path)
            if any(name == ban or name.startswith(ban + ".") for ban in banned)
        ]
    return sorted(found)


def test_no_mcp_module_imports_the_bot_apis_routes() -> None:
    assert _importing("sandboxes.mcp", ("sandboxes.api", "config.api")) == []


def test_the_records_import_no_protocol() -> None:
    banned = ("sandboxes.api", "sandboxes.mcp", "config", "django.http", "ninja.responses")
    assert _importing("sandboxes.operations", banned) == []


def test_the_import_reader_sees_an_import_of_the_api() -> None:
    assert _importing("sandboxes.api", ("sandboxes.api",))  # the routes import their common
    assert "config.api imports sandboxes.api" in _importing("config", ("sandboxes.api",))


def test_every_mcp_tool_is_a_record_offered_as_a_tool() -> None:
    listed = [tool.name for tool in mcp_tools.listed_tools(True)]
    assert listed == [operation.name for operation in TOOLS]
    assert all(mcp_tools.OPERATIONS[operation.name] is operation for operation in TOOLS)
    assert set(mcp_tools.OPERATIONS) == set(listed)


def test_every_tool_definition_is_made_from_its_record() -> None:
    specs = tool_specs()
    assert [spec.operation for spec in specs] == [op for op in OPERATIONS if op.is_tool]
    assert [spec.operation for spec in specs] == list(TOOLS)
    for spec in specs:
        assert (spec.method, spec.path) == (spec.operation.method, API_PREFIX + spec.operation.path)
        assert spec.output is spec.operation.output
        assert spec.operation.input in (spec.body, spec.query)


def test_every_json_route_of_the_bot_api_is_a_record_and_the_others_are_named() -> None:
    served = {
        (method, path.removeprefix(API_PREFIX))
        for path, methods in api.get_openapi_schema()["paths"].items()
        for method in methods
    }
    served = {(method.upper(), path) for method, path in served}
    records = {(operation.method, operation.path) for operation in OPERATIONS}
    assert len(records) == len(OPERATIONS)  # one record a route
    assert records <= served
    assert served - records == HAND_WRITTEN


def test_each_route_of_a_record_says_what_its_record_says() -> None:
    paths = api.get_openapi_schema()["paths"]
    for operation in OPERATIONS:
        documented = paths[API_PREFIX + operation.path][operation.method.lower()]
        assert documented["summary"] == operation.summary
        assert operation.status in documented["responses"]


def test_a_record_is_offered_as_a_tool_only_with_a_description() -> None:
    assert all(operation.description and operation.title for operation in TOOLS)
    assert {op.name for op in OPERATIONS if op.is_tool} == {op.name for op in TOOLS}
    assert operations.execs.GET_EXEC not in TOOLS and not operations.execs.GET_EXEC.is_tool
