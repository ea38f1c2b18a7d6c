"""What every route of the bot API shares: the error shape, the base of every request body,
and the lease fields every call that changes a sandbox accepts. Field names follow the tool
schemas bots already know.

Types and bounds here are what the OpenAPI document promises and exactly what the server
takes: a request the document allows is never refused for its form, one it forbids always
is. The services still check the meaning (paths inside /workspace, the sandbox's limits,
known variables) and name the field they refuse.
"""

from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import BeforeValidator, ConfigDict

# Text the kernel takes as a path or an argument: no NUL character.
NO_NUL = r"^[^\x00]*$"
# Base64 as the services decode it (validated, padded, padding only at the end).
B64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# The largest count the agent and the database hold (a sequence number, an epoch).
COUNT_MAX = 2**63 - 1
# A line of text as the services take it: no control character (below U+0020).
LINE = r"^[^\x00-\x1f]*$"
# A lease holder: empty (the default holder) or a line that is not only blank.
HOLDER = r"^(?:[^\x00-\x1f]*[^\x00-\x1f\s][^\x00-\x1f]*)?$"
# Octal permissions such as "0644" or "755", at most 0777.
MODE = r"^(?:0*[0-7]{1,3})?$"


def _whole(value: Any) -> Any:
    """JSON's 3.0 is the integer 3 (as JSON Schema says); 3.5, "3" and true stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# An integer of a request body: strict, but a whole number written as 3.0 is one. Bounds go
# before WHOLE (`Annotated[int, Field(ge=1), WHOLE]`), or the document loses them.
WHOLE = BeforeValidator(_whole)
Integer = Annotated[int, WHOLE]


def present(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema: the object has `name`, and its value matches `schema` (null does not)."""
    return {"required": [name], "properties": {name: schema}}


def together(*clauses: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema: every clause holds (each a `present`)."""
    merged: dict[str, Any] = {"required": [], "properties": {}}
    for clause in clauses:
        merged["required"] += clause["required"]
        merged["properties"].update(clause["properties"])
    return merged


class ErrorBody(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorOut(Schema):
    error: ErrorBody


class Input(Schema):
    """The base of every request body: strict, so that a mistake is a 400 naming the field
    rather than a guess. A field the call does not know (`content` for `contents`) is refused,
    and no value is converted: `true` is not 1, `"5"` is not 5."""

    model_config = ConfigDict(extra="forbid", strict=True)


# The lease's fields, built here for every shape that takes them: who acts, the epoch it
# holds, and why (a takeover, a reset).
EPOCH = "Refused if the lease has moved on."


def holder_field(description: str = "Defaults to the scope key.") -> Any:
    """The holder a call acts as: at most 200 characters of a line, not only blank."""
    return Field(None, max_length=200, pattern=HOLDER, description=description)


def reason_field(default: str | None, description: str) -> Any:
    """Why, for the event the call records: at most 200 characters of a line."""
    return Field(default, max_length=200, pattern=LINE, description=description)


class Fencing(Input):
    """Optional on every call that changes a sandbox: who acts, and the epoch it holds."""

    holder: str | None = holder_field()
    epoch: Annotated[int, Field(ge=0, le=COUNT_MAX), WHOLE] | None = Field(None, description=EPOCH)


class FencingQuery(Schema):
    """`Fencing` for calls that take it in the query (a DELETE, an upload's body is bytes)."""

    holder: str | None = holder_field()
    epoch: int | None = Field(None, ge=0, le=COUNT_MAX, description=EPOCH)
