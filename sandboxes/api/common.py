"""What every route of the bot API shares: who is calling, and the answers a route documents.

The views block (the database, the engine, a command that runs for minutes): under ASGI each
request runs in a thread of its own from the server's pool (config.handlers).
"""

from typing import Any

from django.http import HttpRequest
from ninja.responses import codes_4xx, codes_5xx

from sandboxes.schemas import ErrorOut
from sandboxes.selectors import Principal


def responds(schema: Any) -> dict[Any, Any]:
    """The success shape, and the error shape every failure has (documented for clients)."""
    return {200: schema, codes_4xx: ErrorOut, codes_5xx: ErrorOut}


def principal(request: HttpRequest) -> Principal:
    """The caller, as the API's authentication found it (a pipeline's token or an admin)."""
    who = request.auth  # type: ignore[attr-defined]  # set by django-ninja's authentication
    assert isinstance(who, Principal)
    return who
