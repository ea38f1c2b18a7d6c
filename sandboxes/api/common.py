"""What every route of the bot API shares: who is calling, and the answers a route documents.

The statuses a route can answer are declared once here, by family, and each route takes its
family's set: the OpenAPI document lists exactly what the server answers (423 where a taken-over
lease refuses, 507 where the workspace can fill, 411 where an upload must say its length).

The views block (the database, the engine): under ASGI each request runs in a thread of the
server's pool (config.handlers), except while a long call waits for a sandbox (`later`).
"""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja import Schema

from boxyard.later import Awaited, Later
from sandboxes.schemas import ErrorOut
from sandboxes.selectors import Principal

# Every call: bad input, no token, a refused session's CSRF check, not found (also another
# pipeline's), a quota, and the engine's failures (unreachable, broken, too slow).
ANY = frozenset({400, 401, 403, 404, 429, 502, 503, 504})
# A call on a sandbox: one that is not running, or whose container is gone, is 409.
READS = ANY | {409}
# A call that acts under the lease: busy or a stale epoch is 409, taken over is 423.
LEASED = READS | {423}
# A call with a JSON body: one over the size the server reads is 413.
BODY = READS | {408, 413}
CHANGES = LEASED | BODY
# A call that writes to the workspace: a full workspace is 507.
WRITES = CHANGES | {507}
# An upload streamed as it arrives (no size bound of the server's): it must say its length.
UPLOADS = LEASED | {408, 411, 507}
# A file's download: conditional requests and ranges.
DOWNLOADS = READS | {412, 416}


def later(awaited: Awaited[Any], schema: type[Schema], render: Callable[[Any], Any]) -> Later:
    """A long call's answer, to come: `render(result)` in the shape of `schema` (as django-ninja
    renders what a view returns), or the call's error."""
    return Later(
        awaited.then(lambda result: schema.model_validate(render(result)).model_dump(mode="json"))
    )


def responds(schema: Any, errors: frozenset[int] = READS, status: int = 200) -> dict[Any, Any]:
    """The success shape, and the error shape of each failure the route can answer."""
    return {status: schema, frozenset(errors): ErrorOut}


def principal(request: HttpRequest) -> Principal:
    """The caller, as the API's authentication found it (a pipeline's token or an admin)."""
    who = request.auth  # type: ignore[attr-defined]  # set by django-ninja's authentication
    assert isinstance(who, Principal)
    return who
