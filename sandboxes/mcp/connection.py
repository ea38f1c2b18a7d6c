"""Who an MCP request comes from and which chat it is for.

The pipeline's token comes as `Authorization: Bearer`; the chat's scope variables come in
the URL's query (`/mcp?launcher_type=group&launcher_id=42`) or in headers named after them
(`Boxyard-Var-Launcher-Id: 42`, hyphens for underscores), a header winning over the query.
The caller is put in the request's ASGI scope once, by the application, and read back by the
handlers from the request the MCP SDK hands them.
"""

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from django.core.handlers.asgi import ASGIRequest

from boxyard.errors import InvalidInput
from pipelines.models import Pipeline
from sandboxes.selectors import Principal

CALLER = "boxyard.caller"
VARIABLE_HEADER = "boxyard-var-"
SESSION_HEADER = b"mcp-session-id"


@dataclass(frozen=True)
class Caller:
    """A pipeline's bot on one MCP request: its principal, its chat's variables, the HTTP
    request (its ASGI scope) they came with, and that request's origin (`origin_of`)."""

    principal: Principal
    variables: dict[str, str]
    asgi: Mapping[str, Any] = field(repr=False)
    origin: str = ""

    @property
    def pipeline(self) -> Pipeline:
        assert self.principal.pipeline is not None  # only pipeline tokens reach MCP
        return self.principal.pipeline

    @property
    def session_id(self) -> str | None:
        """The MCP session the request belongs to (the handshake's revisions), if any."""
        for name, value in self.asgi.get("headers", []):
            if name == SESSION_HEADER:
                return str(value.decode("latin-1"))
        return None

    @property
    def session(self) -> str | None:
        """The session as the chat's sandbox service knows it (one name space per protocol)."""
        return None if self.session_id is None else session_key(self.session_id)


def session_key(session_id: str) -> str:
    return f"mcp:{session_id}"


def origin_of(scope: Mapping[str, Any]) -> str:
    """`scheme://host` of the request, read as Django reads every other request's (its
    `ALLOWED_HOSTS` checked: `DisallowedHost`; a proxy's headers as the settings trust them),
    for the absolute links a tool answers with."""
    return ASGIRequest(dict(scope), io.BytesIO(b"")).build_absolute_uri("/").removesuffix("/")


def bearer_token(scope: Mapping[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            kind, _, token = str(value.decode("latin-1")).partition(" ")
            if kind.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


def chat_variables(scope: Mapping[str, Any]) -> dict[str, str]:
    """The chat's variables from the query string, then the `Boxyard-Var-*` headers."""
    try:
        query = scope.get("query_string", b"").decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("query", "is not valid UTF-8") from None
    variables = dict(parse_qsl(query))
    for name, value in scope.get("headers", []):
        text = name.decode("latin-1").lower()
        if text.startswith(VARIABLE_HEADER):
            variables[text.removeprefix(VARIABLE_HEADER).replace("-", "_")] = value.decode(
                "utf-8", "replace"
            )
    return variables


def caller_of(request: Any) -> Caller:
    """The caller the application put in the scope of the request a handler was given."""
    caller = getattr(request, "scope", {}).get(CALLER)
    assert isinstance(caller, Caller), "an MCP request that did not come through the application"
    return caller
