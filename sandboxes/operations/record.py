"""What an operation is, once for every protocol: its input, its service, its presenter, its
hints.

A protocol (the bot API's routes, the MCP tools, and the compatible APIs to come) is a door:
it parses what its caller sent into the operation's input shape, names the ids the call acts
on (`Call`), runs the record with who is calling (`Context`) and sends the presented answer
back in its own way. None of them holds a rule of the operation's; none calls another.
"""

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Generic, TypeVar, cast

from ninja import Schema
from pydantic import ValidationError

from boxyard.errors import InvalidInput
from boxyard.later import Awaited
from pipelines.models import Pipeline
from sandboxes.selectors import Principal
from sandboxes.services import ExecWatch

In = TypeVar("In")
Result = TypeVar("Result")
Answer = dict[str, Any]

# Filled in by whoever runs the operation, never by the model (the lease's holder and epoch,
# the pipeline and the chat's variables that come with the connection, a call made later).
HIDDEN = frozenset({"holder", "epoch", "pipeline", "variables", "async"})


class Streams(Enum):
    """What a call can follow while it runs, for a protocol that reports progress."""

    NOTHING = "nothing"
    # The command it starts: its output pushed to the context's `watch` as it comes.
    ITS_COMMAND = "its_command"
    # The command it names (its `exec_id`): its output events followed until it ends.
    NAMED_COMMAND = "named_command"


@dataclass(frozen=True)
class Hints:
    """What the operation does, as a protocol may tell its caller (MCP's tool annotations) or
    act on (opening the chat's sandbox, reporting progress)."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    # Called without a sandbox_id, it opens the chat's sandbox (the others only find it:
    # they act on what an earlier call made).
    opens_chat_sandbox: bool = False
    # Its answer's sandbox_id is the chat's sandbox from now on (for the caller's session).
    names_chat_sandbox: bool = False
    # It reaches beyond the sandbox when the pipeline gives the sandbox the network.
    networked: bool = False
    streams: Streams = Streams.NOTHING


@dataclass(frozen=True)
class Context:
    """Who calls, as every protocol tells it: the principal, the origin (`scheme://host`) an
    absolute link is made with, and what follows a command's output, if anything does."""

    principal: Principal
    origin: str = ""
    watch: ExecWatch | None = None


@dataclass(frozen=True)
class Call(Generic[In]):
    """One call's parsed input and the ids its path names."""

    given: In
    sandbox_id: str = ""
    exec_id: str = ""
    name: str = ""  # a shell session's or a managed process's


@dataclass(frozen=True)
class Operation(Generic[In, Result]):
    """One operation: what a caller sees of it (`name`, `title`, `description`, for a tool;
    `summary`, for the API's document), where the bot API serves it (`method`, `path`, under
    `/api/v1`), its input and output shapes, the service it runs and the presenter of its
    result. An operation with no `description` is not offered as a tool.

    `check` refuses what the service would refuse of the input without looking at a sandbox,
    so that a protocol may refuse bad input before it opens the chat's sandbox for a call.
    """

    name: str
    summary: str
    method: str
    path: str
    output: type[Schema]
    service: Callable[[Context, Call[In]], Result | Awaited[Result]]
    present: Callable[[Result], Answer]
    input: type[Schema] | None = None
    status: int = 200
    title: str = ""
    description: str = ""
    hints: Hints = field(default_factory=Hints)
    check: Callable[[Pipeline, In], None] | None = None
    # What of its sent answer a protocol that carries media gives as such too, beside the
    # answer: (MIME type, base64) pairs, as an MCP tool result's images a model can see.
    media: Callable[[Answer], list[tuple[str, str]]] | None = None

    @property
    def is_tool(self) -> bool:
        return bool(self.description)

    @property
    def in_query(self) -> bool:
        """Whether the input comes in the query string (a read or a removal) or as a body."""
        return self.method in ("GET", "DELETE")

    @cached_property
    def ids(self) -> tuple[str, ...]:
        """The ids the path names (`sandbox_id`, `exec_id`, `name`), in order."""
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.path) if name)

    @cached_property
    def fields(self) -> tuple[str, ...]:
        """The input's fields a caller gives (not those filled in for it)."""
        if self.input is None:
            return ()
        names = self.input.model_json_schema(by_alias=True).get("properties", {})
        return tuple(name for name in names if name not in HIDDEN)

    def parse(self, given: dict[str, Any]) -> In:
        """The input from plain values; what does not fit is `InvalidInput` naming the field."""
        parsed: In | None = None
        if self.input is not None:
            try:
                parsed = cast(In, self.input.model_validate(given))  # `In` is the input's class
            except ValidationError as error:
                first = error.errors()[0]
                field = field_name(("body", *first["loc"]))
                raise InvalidInput(field, first["msg"]) from None
        return cast(In, parsed)  # None where the operation takes no input (`In` is None)

    def run(self, context: Context, call: Call[In]) -> Answer | Awaited[Answer]:
        """The service's result, presented; a long call's, once it comes."""
        result = self.service(context, call)
        if isinstance(result, Awaited):
            return result.then(self.present)
        return self.present(result)

    def media_of(self, answer: Answer) -> list[tuple[str, str]]:
        """The media in a sent answer (`shown`), as (MIME type, base64) pairs; none if the
        operation has none."""
        return self.media(answer) if self.media is not None else []

    def shown(self, answer: Answer) -> Answer:
        """The presented answer as it is sent: through the output shape, as JSON values."""
        shown: Answer = self.output.model_validate(answer).model_dump(mode="json")
        return shown


def field_name(location: Any) -> str:
    """The caller's own name for a field from a validation error's location.

    ("body", "body", "cmd", "list[str]") → "cmd": the source, the view's body parameter, the
    field, then a member of a union type; ("query", "path") → "path".
    """
    parts = [str(part) for part in location]
    source, rest = (parts[0], parts[1:]) if parts else ("body", [])
    if source == "body" and rest[:1] == ["body"]:
        rest = rest[1:]
    names: list[str] = []
    for part in rest:
        if "[" in part or part in ("str", "int", "float", "bool", "function-after"):
            break
        names.append(part)
    return ".".join(names) or source


def require_unicode(value: Any, where: str = "body") -> None:
    """Refuse a string that is not real Unicode (JSON may spell a lone surrogate, "\\ud800",
    which no UTF-8 text, file, database or process argument can hold)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(where, "holds a lone surrogate escape; send valid Unicode") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            require_unicode(key, where)
            require_unicode(item, f"{where}.{key}" if where != "body" else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            require_unicode(item, f"{where}[{index}]")
