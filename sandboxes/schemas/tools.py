"""The sandbox tools an LLM is given, made from the operation records offered as tools
(`sandboxes.operations.TOOLS`): what each one does, which call of the bot API it is, and its
input and output schemas, taken from the record's own shapes (never written a second time).

`GET /pipelines/{slug}/tools` renders them for function calling (OpenAI's and Anthropic's
shapes, with the call to dispatch each one to); the MCP server at `/mcp` lists the same tools
with their annotations and runs them.

A tool's arguments are the call's path placeholders (`sandbox_id`, `exec_id`) and the fields of
its body or query shape, less those the runtime fills in (`HIDDEN`: the lease's holder and
epoch, the pipeline, the chat's variables).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ninja import Schema

from sandboxes.operations import HIDDEN, TOOLS, Hints, Operation

API_PREFIX = "/api/v1"
JsonSchema = dict[str, Any]

__all__ = ["HIDDEN", "Hints", "ToolSpec", "tool_specs"]

PATH_ARGUMENTS: dict[str, JsonSchema] = {
    "sandbox_id": {"type": "string", "description": "The sandbox_id returned by sandbox_open."},
    "exec_id": {"type": "string", "description": "The exec_id returned by sandbox_exec."},
}


@dataclass(frozen=True)
class ToolSpec:
    """One tool, as its operation's record says it: what the model sees, the API call it is,
    and the shapes of both ends."""

    operation: Operation[Any, Any]

    @property
    def name(self) -> str:
        return self.operation.name

    @property
    def title(self) -> str:
        return self.operation.title

    @property
    def description(self) -> str:
        return self.operation.description

    @property
    def hints(self) -> Hints:
        return self.operation.hints

    @property
    def method(self) -> str:
        return self.operation.method

    @property
    def path(self) -> str:
        return API_PREFIX + self.operation.path

    @property
    def output(self) -> type[Schema]:
        return self.operation.output

    @property
    def body(self) -> type[Schema] | None:
        return None if self.operation.in_query else self.operation.input

    @property
    def query(self) -> type[Schema] | None:
        return self.operation.input if self.operation.in_query else None

    @property
    def path_arguments(self) -> tuple[str, ...]:
        return self.operation.ids

    @property
    def body_arguments(self) -> tuple[str, ...]:
        return () if self.operation.in_query else self.operation.fields

    @property
    def query_arguments(self) -> tuple[str, ...]:
        return self.operation.fields if self.operation.in_query else ()

    @property
    def parameters(self) -> JsonSchema:
        """The arguments as one JSON Schema object (a fresh copy on each call)."""
        return copy.deepcopy(self._parameters)

    @cached_property
    def _parameters(self) -> JsonSchema:
        properties: dict[str, JsonSchema] = {
            name: copy.deepcopy(PATH_ARGUMENTS[name]) for name in self.path_arguments
        }
        required = list(self.path_arguments)
        if self.operation.input is not None:
            schema = self.operation.input.model_json_schema(by_alias=True)
            defs = schema.get("$defs", {})
            for name, sub in schema.get("properties", {}).items():
                if name not in HIDDEN:
                    properties[name] = _argument(sub, defs)
            required += [name for name in schema.get("required", []) if name not in HIDDEN]
        parameters: JsonSchema = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            parameters["required"] = required
        return parameters

    @property
    def output_schema(self) -> JsonSchema:
        """What a successful call answers, as a JSON Schema object (a fresh copy)."""
        return copy.deepcopy(self._output_schema)

    @cached_property
    def _output_schema(self) -> JsonSchema:
        schema = self.output.model_json_schema(by_alias=True, mode="serialization")
        resolved: JsonSchema = _resolved(schema, schema.get("$defs", {}))
        return resolved

    def call(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "method": self.method,
            "path": self.path,
            "body": list(self.body_arguments),
            "query": list(self.query_arguments),
            "output_schema": self.output_schema,
        }


def _resolved(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with every `$ref` replaced by the definition it names, and no titles."""
    if isinstance(schema, list):
        return [_resolved(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        return _resolved({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    plain: JsonSchema = {}
    for key, value in schema.items():
        if key == "properties":  # names of fields, not keywords
            plain[key] = {name: _resolved(sub, defs) for name, sub in value.items()}
        elif key not in ("title", "$defs"):
            plain[key] = _resolved(value, defs)
    return plain


# Keywords of the API's own schemas that the LLM providers' tool schemas do not take (the
# server still checks them, and names what a call got wrong).
_NOT_FOR_TOOLS = frozenset({"prefixItems", "maxItems", "maxProperties", "propertyNames"})


def _for_tools(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_for_tools(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: (
            {n: _for_tools(sub) for n, sub in value.items()}
            if key == "properties"
            else _for_tools(value)
        )
        for key, value in schema.items()
        if key == "properties" or key not in _NOT_FOR_TOOLS
    }


def _argument(schema: JsonSchema, defs: dict[str, Any]) -> JsonSchema:
    """An argument as a model should see it: an optional argument is left out rather than
    sent as null, so `X | None` reads as X; in the subset of JSON Schema the providers take."""
    plain: JsonSchema = _for_tools(_resolved(schema, defs))
    options = plain.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [option for option in options if option != {"type": "null"}]
        del plain["anyOf"]
        plain = {**rest[0], **plain} if len(rest) == 1 else {"anyOf": rest, **plain}
    if plain.get("default", 0) is None:
        del plain["default"]
    return plain


def tool_specs() -> list[ToolSpec]:
    """The sandbox tools, in the order a model meets them: one per operation record offered as
    a tool."""
    return list(_SPECS)


_SPECS = tuple(ToolSpec(operation) for operation in TOOLS if operation.is_tool)
