"""The LLM tool definitions: both providers' shapes, valid schemas, dispatchable calls, prompt.

`jsonschema` is not a dependency, so schemas are checked structurally against the subset of
JSON Schema the tools use, and sample arguments are checked with a small validator of it.
"""

import json
import re
import string
from typing import Any

import pytest

from pipelines import tools
from pipelines.models import DEFAULT_SYSTEM_PROMPT, Pipeline, Skill

NAMES = [
    "sandbox_open",
    "sandbox_exec",
    "sandbox_exec_read",
    "sandbox_exec_wait",
    "sandbox_exec_kill",
    "sandbox_run_code",
    "sandbox_fs_write",
    "sandbox_fs_read",
    "sandbox_fs_list",
    "sandbox_fs_delete",
    "sandbox_fs_link",
    "sandbox_close",
    "sandbox_run",
]

TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}
KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "anyOf",
    "description", "minimum", "maximum", "minLength", "maxLength", "minItems", "pattern",
    "default", "format", "enum",
}  # fmt: skip


def check_schema(schema: Any, where: str = "$") -> None:
    """Fail unless `schema` is a well-formed JSON Schema in the subset the tools use."""
    assert isinstance(schema, dict), where
    assert set(schema) <= KEYWORDS, (where, set(schema) - KEYWORDS)
    assert "type" in schema or "anyOf" in schema, where
    if "type" in schema:
        assert schema["type"] in TYPES, where
    if "description" in schema:
        assert isinstance(schema["description"], str) and schema["description"].strip(), where
    for key in ("minimum", "maximum"):
        if key in schema:
            assert schema["type"] in {"integer", "number"}, where
            assert isinstance(schema[key], int | float) and not isinstance(schema[key], bool)
    for key in ("minLength", "maxLength", "minItems"):
        if key in schema:
            assert isinstance(schema[key], int) and schema[key] >= 0, where
    if "pattern" in schema:
        assert schema["type"] == "string", where
        re.compile(schema["pattern"])
    if "anyOf" in schema:
        assert isinstance(schema["anyOf"], list) and schema["anyOf"], where
        for i, option in enumerate(schema["anyOf"]):
            check_schema(option, f"{where}.anyOf[{i}]")
    if "items" in schema:
        assert schema["type"] == "array", where
        check_schema(schema["items"], f"{where}.items")
    if "properties" in schema:
        assert schema["type"] == "object", where
        assert isinstance(schema["properties"], dict), where
        for name, sub in schema["properties"].items():
            assert isinstance(name, str) and name, where
            check_schema(sub, f"{where}.{name}")
    if "required" in schema:
        required = schema["required"]
        assert isinstance(required, list) and len(set(required)) == len(required), where
        assert set(required) <= set(schema.get("properties", {})), where
    if "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        if not isinstance(extra, bool):
            check_schema(extra, f"{where}.additionalProperties")


def is_valid(instance: Any, schema: dict[str, Any]) -> bool:
    """A small validator for the same subset."""
    if "anyOf" in schema and not any(is_valid(instance, option) for option in schema["anyOf"]):
        return False
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(instance, dict):
            return False
        properties = schema.get("properties", {})
        if any(name not in instance for name in schema.get("required", [])):
            return False
        for name, value in instance.items():
            extra = schema.get("additionalProperties")
            if name in properties:
                if not is_valid(value, properties[name]):
                    return False
            elif extra is False or (isinstance(extra, dict) and not is_valid(value, extra)):
                return False
        return True
    if kind == "array":
        return (
            isinstance(instance, list)
            and len(instance) >= schema.get("minItems", 0)
            and all(is_valid(item, schema.get("items", {})) for item in instance)
        )
    if kind == "string":
        return (
            isinstance(instance, str)
            and schema.get("minLength", 0) <= len(instance) <= schema.get("maxLength", 1 << 62)
            and ("pattern" not in schema or re.search(schema["pattern"], instance) is not None)
        )
    if kind in {"integer", "number"}:
        numeric = int if kind == "integer" else int | float
        if isinstance(instance, bool) or not isinstance(instance, numeric):
            return False
        return schema.get("minimum", instance) <= instance <= schema.get("maximum", instance)
    if kind == "boolean":
        return isinstance(instance, bool)
    return kind is None


def placeholders(path: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(path) if field}


# --- shapes -----------------------------------------------------------------------------


def test_every_tool_is_present_in_both_shapes_with_identical_names() -> None:
    openai = tools.openai_tools()
    anthropic = tools.anthropic_tools()
    assert [tool["function"]["name"] for tool in openai] == NAMES
    assert [tool["name"] for tool in anthropic] == NAMES
    assert [spec.name for spec in tools.tool_specs()] == NAMES


def test_openai_shape() -> None:
    for tool in tools.openai_tools():
        assert set(tool) == {"type", "function"}
        assert tool["type"] == "function"
        assert set(tool["function"]) == {"name", "description", "parameters"}


def test_anthropic_shape() -> None:
    for tool in tools.anthropic_tools():
        assert set(tool) == {"name", "description", "input_schema"}


def test_both_shapes_carry_the_same_description_and_schema() -> None:
    for openai, anthropic in zip(tools.openai_tools(), tools.anthropic_tools(), strict=True):
        assert openai["function"]["description"] == anthropic["description"]
        assert openai["function"]["parameters"] == anthropic["input_schema"]


def test_names_and_descriptions_are_acceptable_to_the_providers() -> None:
    for spec in tools.tool_specs():
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", spec.name)
        assert 40 < len(spec.description) <= 1024, spec.name


# --- schemas ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", tools.tool_specs(), ids=lambda spec: spec.name)
def test_every_parameters_schema_is_a_valid_json_schema(spec: tools.ToolSpec) -> None:
    check_schema(spec.parameters)
    # Both providers want a plain object at the top: no anyOf/oneOf there, no extra fields.
    assert spec.parameters["type"] == "object"
    assert "anyOf" not in spec.parameters
    assert spec.parameters["additionalProperties"] is False
    assert set(spec.parameters.get("required", [])) <= set(spec.parameters["properties"])


def test_the_structural_check_catches_broken_schemas() -> None:
    broken = [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
        {"type": "strnig"},
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": "1"}}},
        {"type": "string", "pattern": "("},
        {"anyOf": []},
        {"type": "string", "maxLenght": 3},
    ]
    for schema in broken:
        with pytest.raises((AssertionError, re.error)):
            check_schema(schema)


def test_required_parameters_follow_the_api() -> None:
    required = {spec.name: set(spec.parameters.get("required", [])) for spec in tools.tool_specs()}
    assert required == {
        "sandbox_open": set(),
        "sandbox_exec": {"sandbox_id", "cmd"},
        "sandbox_exec_read": {"sandbox_id", "exec_id"},
        "sandbox_exec_wait": {"sandbox_id", "exec_id"},
        "sandbox_exec_kill": {"sandbox_id", "exec_id"},
        "sandbox_run_code": {"sandbox_id", "code"},
        "sandbox_fs_write": {"sandbox_id", "path"},
        "sandbox_fs_read": {"sandbox_id", "path"},
        "sandbox_fs_list": {"sandbox_id"},
        "sandbox_fs_delete": {"sandbox_id", "path"},
        "sandbox_fs_link": {"sandbox_id", "path"},
        "sandbox_close": {"sandbox_id"},
        "sandbox_run": {"language", "code"},
    }


def test_sandbox_open_takes_no_arguments_and_says_the_runtime_fills_them() -> None:
    spec = next(spec for spec in tools.tool_specs() if spec.name == "sandbox_open")
    assert spec.parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    assert "runtime" in spec.description
    assert is_valid({}, spec.parameters)
    assert not is_valid({"pipeline": "x"}, spec.parameters)


@pytest.mark.parametrize(
    ("name", "arguments", "valid"),
    [
        ("sandbox_exec", {"sandbox_id": "s", "cmd": "ls -la | wc -l"}, True),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": ["python", "main.py"]}, True),
        (
            "sandbox_exec",
            {
                "sandbox_id": "s",
                "cmd": "make",
                "cwd": "src",
                "env": {"A": "1"},
                "timeout_seconds": 5,
                "background": True,
            },
            True,
        ),
        ("sandbox_exec", {"sandbox_id": "s"}, False),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": 3}, False),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": ["ls", 3]}, False),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": "ls", "env": {"A": 1}}, False),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": "ls", "timeout_seconds": 0}, False),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": "ls", "timeout_seconds": 1.5}, False),
        ("sandbox_exec", {"sandbox_id": "s", "cmd": "ls", "container": "x"}, False),
        ("sandbox_exec_read", {"sandbox_id": "s", "exec_id": "e", "since_seq": 0}, True),
        ("sandbox_exec_read", {"sandbox_id": "s", "exec_id": "e", "since_seq": -1}, False),
        ("sandbox_exec_wait", {"sandbox_id": "s", "exec_id": "e", "timeout_seconds": 2.5}, True),
        ("sandbox_exec_wait", {"sandbox_id": "s", "exec_id": "e", "timeout_seconds": -1}, False),
        (
            "sandbox_fs_write",
            {"sandbox_id": "s", "path": "a/b.sh", "contents": "echo", "mode": "0755"},
            True,
        ),
        ("sandbox_fs_write", {"sandbox_id": "s", "path": "b", "contents_b64": "AA=="}, True),
        ("sandbox_fs_write", {"sandbox_id": "s", "path": ""}, False),
        ("sandbox_fs_read", {"sandbox_id": "s", "path": "out.txt", "max_bytes": 100}, True),
        ("sandbox_fs_read", {"sandbox_id": "s", "path": "out.txt", "max_bytes": -1}, False),
        ("sandbox_fs_list", {"sandbox_id": "s"}, True),
        ("sandbox_fs_list", {"sandbox_id": "s", "path": ".skills", "recursive": True}, True),
        ("sandbox_fs_delete", {"sandbox_id": "s", "path": "build", "recursive": True}, True),
        ("sandbox_fs_delete", {"sandbox_id": "s"}, False),
        ("sandbox_close", {"sandbox_id": "s", "delete_workspace": True}, True),
        ("sandbox_close", {"sandbox_id": "s", "delete_workspace": "yes"}, False),
    ],
)
def test_schemas_accept_what_the_api_accepts(
    name: str, arguments: dict[str, Any], valid: bool
) -> None:
    spec = next(spec for spec in tools.tool_specs() if spec.name == name)
    assert is_valid(arguments, spec.parameters) is valid


# --- dispatch ---------------------------------------------------------------------------


@pytest.mark.parametrize("spec", tools.tool_specs(), ids=lambda spec: spec.name)
def test_each_call_is_dispatchable_from_the_tool_arguments(spec: tools.ToolSpec) -> None:
    properties = set(spec.parameters["properties"])
    in_path = placeholders(spec.path)
    assert in_path <= properties
    assert set(spec.parameters.get("required", [])) >= in_path
    # Every argument goes exactly one way: into the path, the body or the query string.
    assert not set(spec.body_arguments) & set(spec.query_arguments)
    assert not in_path & (set(spec.body_arguments) | set(spec.query_arguments))
    assert in_path | set(spec.body_arguments) | set(spec.query_arguments) == properties
    assert spec.method in {"GET", "POST", "PUT", "DELETE"}
    if spec.method in {"GET", "DELETE"}:
        assert not spec.body_arguments
    assert spec.path.startswith("/api/v1/")


def test_calls_follow_the_bot_api() -> None:
    calls = {spec.name: (spec.method, spec.path) for spec in tools.tool_specs()}
    assert calls == {
        "sandbox_open": ("POST", "/api/v1/sandboxes/open"),
        "sandbox_exec": ("POST", "/api/v1/sandboxes/{sandbox_id}/exec"),
        "sandbox_exec_read": ("GET", "/api/v1/sandboxes/{sandbox_id}/execs/{exec_id}/output"),
        "sandbox_exec_wait": ("POST", "/api/v1/sandboxes/{sandbox_id}/execs/{exec_id}/wait"),
        "sandbox_exec_kill": ("POST", "/api/v1/sandboxes/{sandbox_id}/execs/{exec_id}/kill"),
        "sandbox_run_code": ("POST", "/api/v1/sandboxes/{sandbox_id}/code"),
        "sandbox_fs_write": ("PUT", "/api/v1/sandboxes/{sandbox_id}/files"),
        "sandbox_fs_read": ("GET", "/api/v1/sandboxes/{sandbox_id}/files"),
        "sandbox_fs_list": ("GET", "/api/v1/sandboxes/{sandbox_id}/files/list"),
        "sandbox_fs_delete": ("DELETE", "/api/v1/sandboxes/{sandbox_id}/files"),
        "sandbox_fs_link": ("POST", "/api/v1/sandboxes/{sandbox_id}/files/links"),
        "sandbox_close": ("DELETE", "/api/v1/sandboxes/{sandbox_id}"),
        "sandbox_run": ("POST", "/api/v1/run"),
    }


def test_tool_specs_are_immutable_and_callers_get_their_own_schemas() -> None:
    spec = tools.tool_specs()[0]
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    first = tools.openai_tools()
    first[1]["function"]["parameters"]["properties"].clear()
    tools.anthropic_tools()[1]["input_schema"]["required"].append("x")
    assert tools.openai_tools()[1]["function"]["parameters"]["properties"]
    assert "x" not in tools.tool_specs()[1].parameters["required"]


# --- descriptions -----------------------------------------------------------------------


def test_descriptions_tell_the_model_what_matters() -> None:
    by_name = {spec.name: spec.description for spec in tools.tool_specs()}
    exec_text = by_name["sandbox_exec"]
    for words in ("/workspace", "persist", "non-root", "network", "truncated", "background"):
        assert words in exec_text, words
    for name in ("sandbox_fs_write", "sandbox_fs_read", "sandbox_fs_list", "sandbox_fs_delete"):
        assert "/workspace" in by_name[name], name
        spec = next(spec for spec in tools.tool_specs() if spec.name == name)
        assert "relative to /workspace" in spec.parameters["properties"]["path"]["description"]
    assert "persist" in by_name["sandbox_fs_write"]
    assert "truncated" in by_name["sandbox_fs_read"]
    for spec in tools.tool_specs():
        for name, schema in spec.parameters["properties"].items():
            assert schema.get("description"), (spec.name, name)


# --- system prompt ----------------------------------------------------------------------


@pytest.mark.django_db
def test_default_prompt_with_profile_facts() -> None:
    pipeline = Pipeline.objects.create(slug="plain")
    prompt = tools.system_prompt(pipeline)
    assert prompt.startswith(DEFAULT_SYSTEM_PROMPT)
    assert "/workspace" in prompt
    assert "Network: disabled" in prompt
    assert "60 s" in prompt
    assert "256 KiB" in prompt
    assert "30 minutes" in prompt
    assert "No skills" in prompt
    assert len(prompt.splitlines()) <= 25


@pytest.mark.django_db
def test_prompt_lists_skills_and_reflects_network() -> None:
    pipeline = Pipeline.objects.create(
        slug="web", network_enabled=True, exec_timeout_seconds=120, output_limit_bytes=64 * 1024
    )
    Skill.objects.create(
        pipeline=pipeline, name="pdf-tools", host_path="/srv/skills/pdf",
        description="Convert and split PDF files.\nSecond line is left out.",
    )  # fmt: skip
    Skill.objects.create(pipeline=pipeline, name="charts", host_path="/srv/skills/charts")
    prompt = tools.system_prompt(pipeline)
    assert "Network: enabled" in prompt
    assert "Network: disabled" not in prompt
    assert "/workspace/.skills/pdf-tools/ - Convert and split PDF files." in prompt
    assert "/workspace/.skills/charts/" in prompt
    assert "Second line" not in prompt
    assert "120 s" in prompt
    assert "64 KiB" in prompt
    assert len(prompt.splitlines()) <= 25


@pytest.mark.django_db
def test_retention_is_stated() -> None:
    temporary = Pipeline.objects.create(slug="temp", idle_timeout_seconds=7200)
    persistent = Pipeline.objects.create(slug="keep", retention="persistent")
    assert "removed after 2 hours without activity" in tools.system_prompt(temporary)
    kept = tools.system_prompt(persistent)
    assert "Files in /workspace are kept:" in kept
    assert "removed after" not in kept


@pytest.mark.django_db
def test_custom_prompt_replaces_the_default_but_keeps_the_facts() -> None:
    pipeline = Pipeline.objects.create(slug="custom", system_prompt="You are DataBot.")
    Skill.objects.create(pipeline=pipeline, name="sql", host_path="/srv/skills/sql")
    prompt = tools.system_prompt(pipeline)
    assert prompt.startswith("You are DataBot.")
    assert DEFAULT_SYSTEM_PROMPT not in prompt
    assert "Network: disabled" in prompt
    assert "/workspace/.skills/sql/" in prompt
    assert "256 KiB" in prompt


@pytest.mark.django_db
def test_blank_custom_prompt_falls_back_to_the_default() -> None:
    pipeline = Pipeline.objects.create(slug="blank", system_prompt="  \n")
    assert tools.system_prompt(pipeline).startswith(DEFAULT_SYSTEM_PROMPT)


def test_sizes_and_durations_read_well() -> None:
    assert tools._kib(256 * 1024) == "256 KiB"
    assert tools._kib(1536) == "1.5 KiB"
    assert tools._kib(4 * 1024 * 1024) == "4 MiB"
    assert tools._duration(1800) == "30 minutes"
    assert tools._duration(3600) == "1 hour"
    assert tools._duration(90) == "90 seconds"


# --- the document -----------------------------------------------------------------------


@pytest.mark.django_db
def test_tools_document() -> None:
    pipeline = Pipeline.objects.create(slug="doc")
    document = tools.tools_document(pipeline)
    assert set(document) == {"pipeline", "system_prompt", "openai", "anthropic", "calls"}
    assert document["pipeline"] == "doc"
    assert document["system_prompt"] == tools.system_prompt(pipeline)
    assert document["openai"] == tools.openai_tools()
    assert document["anthropic"] == tools.anthropic_tools()
    assert [call["name"] for call in document["calls"]] == NAMES
    exec_call = document["calls"][1]
    assert exec_call == {
        "name": "sandbox_exec",
        "method": "POST",
        "path": "/api/v1/sandboxes/{sandbox_id}/exec",
        "body": ["cmd", "cwd", "env", "session", "timeout_seconds", "background", "fresh"],
        "query": [],
        "output_schema": tools.tool_specs()[1].output_schema,
    }
    assert json.loads(json.dumps(document)) == document
