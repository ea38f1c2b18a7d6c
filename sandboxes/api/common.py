"""What every route of the bot API shares: who is calling, and the answers a route documents.

The views block (the database, the engine): under ASGI each request runs in a thread of the
server's pool (config.handlers), except while a long call waits for a sandbox (`later`).
"""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja import Schema
from ninja.responses import codes_4xx, codes_5xx

from boxyard.later import Awaited, Later
from sandboxes.schemas import ErrorOut
from sandboxes.selectors import Principal


def later(awaited: Awaited[Any], schema: type[Schema], render: Callable[[Any], Any]) -> Later:
    """A long call's answer, to come: `render(result)` in the shape of `schema` (as django-ninja
    renders what a view returns), or the call's error."""
    return Later(
        awaited.then(lambda result: schema.model_validate(render(result)).model_dump(mode="json"))
    )


def responds(schema: Any) -> dict[Any, Any]:
    """The success shape, and the error shape every failure has (documented for clients)."""
    return {200: schema, codes_4xx: ErrorOut, codes_5xx: ErrorOut}


def principal(request: HttpRequest) -> Principal:
    """The caller, as the API's authentication found it (a pipeline's token or an admin)."""
    who = request.auth  # type: ignore[attr-defined]  # set by django-ninja's authentication
    assert isinstance(who, Principal)
    return who
