"""The bot API (`/api/v1`): authentication, the one error mapping, and the routers."""

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.security import APIKeyCookie, HttpBearer

from boxyard.errors import BoxyardError, InvalidInput, Problem, problem
from pipelines.api import router as pipelines_router
from sandboxes.api import router as sandboxes_router
from sandboxes.operations import field_name, require_unicode
from sandboxes.selectors import Principal, principal_for_token, principal_for_user


class PipelineToken(HttpBearer):
    """`Authorization: Bearer <pipeline token>`: acts on that pipeline only."""

    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        return principal_for_token(token)


class StaffSession(APIKeyCookie):
    """A logged-in admin of the dashboard (session cookie, CSRF checked): every pipeline."""

    param_name = "sessionid"

    def __call__(self, request: HttpRequest) -> Principal | None:
        # The CSRF check protects an admin's session from pages of other sites; without one
        # there is nothing to protect, and the caller is simply not authenticated (401).
        who = principal_for_user(request.user)
        if who is None:
            return None
        self._get_key(request)  # raises 403 when the CSRF token is missing or wrong
        return who

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:
        return principal_for_user(request.user)


class StrictJSON(Parser):
    """JSON bodies whose every string is real Unicode.

    JSON may spell a lone surrogate ("\\ud800"), which no UTF-8 text, file, database or
    process argument can hold: refuse it here, once, instead of in every field.
    """

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(request.body)  # as ninja's parsers declare it
        except (ValueError, UnicodeDecodeError) as error:
            raise InvalidInput("body", f"is not valid JSON ({error})") from None
        require_unicode(data)
        return data


api = NinjaAPI(
    title="Boxyard bot API",
    version="1",
    description="Sandboxes for AI-agent pipelines. Authenticate with `Authorization: Bearer "
    '<pipeline token>`. Errors are `{"error": {"code", "message", ...}}`.',
    urls_namespace="api-v1",
    openapi_url="/openapi.json",
    docs_url="/docs",
    auth=[PipelineToken(), StaffSession()],
    parser=StrictJSON(),
)
api.add_router("", sandboxes_router)
api.add_router("", pipelines_router)


def error_response(request: HttpRequest, status: int, body: dict[str, Any]) -> HttpResponse:
    return api.create_response(request, {"error": body}, status=status)


def problem_response(served: NinjaAPI, request: HttpRequest, answer: Problem) -> HttpResponse:
    """An error's answer as `served` (this API, or another door's) renders it."""
    response = served.create_response(request, answer.body, status=answer.status)
    for name, value in answer.headers.items():
        response[name] = value
    return response


@api.exception_handler(BoxyardError)
def on_boxyard_error(request: HttpRequest, error: BoxyardError) -> HttpResponse:
    return problem_response(api, request, problem(error))


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, error: ValidationError) -> HttpResponse:
    first = error.errors[0] if error.errors else {}
    field = field_name(first.get("loc", ()))
    message = first.get("msg", "invalid input")
    if first.get("type") == "extra_forbidden":  # a typo must not be ignored (schemas.Input)
        message = "is not a field of this call"
    return error_response(
        request,
        400,
        {
            "code": "invalid_input",
            "message": f"{field}: {message}",
            "field": field,
            "errors": [
                {"loc": list(map(str, e.get("loc", ()))), "msg": e.get("msg", "")}
                for e in error.errors[:20]
            ],
        },
    )


@api.exception_handler(AuthenticationError)
def on_authentication_error(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    response = error_response(
        request,
        401,
        {
            "code": "unauthorized",
            "message": "a valid pipeline token is required (Authorization: Bearer ...)",
        },
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, error: Http404) -> HttpResponse:
    return error_response(request, 404, {"code": "not_found", "message": str(error) or "not found"})


@api.exception_handler(RequestDataTooBig)
def on_too_big(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
    return error_response(
        request, 413, {"code": "too_large", "message": "the request body is larger than allowed"}
    )


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    if isinstance(error.__cause__, BoxyardError):  # ninja wraps what our body parser raised
        return on_boxyard_error(request, error.__cause__)
    if error.status_code == 400:
        body = {"code": "invalid_input", "message": f"body: {error}", "field": "body"}
    else:
        body = {"code": "error", "message": str(error)}
    return error_response(request, error.status_code, body)
