import json
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBase

_API_PREFIX = "/api/"


class JSONErrorsForAPI:
    """Give API callers the JSON error shape for what Django answers outside any API view.

    Unknown routes (404) and wrong methods (405) under /api/ would otherwise be an HTML page
    or plain text; a bot must be able to read every error the same way. Sync and async: under
    ASGI a sync-only middleware would send every request through an extra thread.
    """

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase | Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if iscoroutinefunction(self.get_response):  # and so this middleware, marked above
            return self._acall(request)
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)  # a synchronous chain answers at once
        return _as_json_error(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        assert not isinstance(response, HttpResponseBase)  # an asynchronous chain's coroutine
        return _as_json_error(request, await response)


def _as_json_error(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    if (
        request.path.startswith(_API_PREFIX)
        and response.status_code in (404, 405)
        and not response.get("Content-Type", "").startswith("application/json")
    ):
        code, message = (
            ("not_found", f"no API route {request.path}")
            if response.status_code == 404
            else ("method_not_allowed", f"{request.method} is not allowed on {request.path}")
        )
        replacement = HttpResponse(
            json.dumps({"error": {"code": code, "message": message}}),
            status=response.status_code,
            content_type="application/json",
        )
        if allow := response.get("Allow"):
            replacement["Allow"] = allow
        return replacement
    return response
