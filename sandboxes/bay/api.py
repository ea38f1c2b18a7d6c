"""AstrBot's Bay API (`/bay`): the door that AstrBot's default sandbox driver (`shipyard_neo`,
through the `shipyard_neo_sdk` client) knows, onto the same records and services as the bot API.

A pipeline's token is the bearer token; a Bay sandbox is a Boxyard sandbox (the same id), its
cargo the sandbox's workspace, named by its scope key. Errors are shaped as the SDK reads them,
`{"error": {"code", "message", "details"}}`, with the codes it turns into its own exceptions.
"""

from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from boxyard.errors import (
    BoxyardError,
    Conflict,
    InvalidInput,
    InvalidState,
    NotFound,
    Problem,
    QuotaExceeded,
    RuntimeFailure,
    TakenOver,
    TooLarge,
    Unavailable,
    WorkspaceFull,
    problem,
)
from boxyard.later import Awaited, Later
from config.api import StrictJSON, problem_response
from sandboxes.operations import Answer, Call, Context, Operation, field_name
from sandboxes.selectors import Principal, principal_for_token

# The SDK's error codes (its `ERROR_CODE_MAP`), by the family of Boxyard's error.
_CODES: tuple[tuple[type[BoxyardError], str], ...] = (
    (TooLarge, "validation_error"),
    (InvalidInput, "validation_error"),
    (NotFound, "not_found"),
    (TakenOver, "conflict"),
    (Conflict, "conflict"),
    (QuotaExceeded, "quota_exceeded"),
    (WorkspaceFull, "quota_exceeded"),
    (Unavailable, "session_not_ready"),
)


class BayToken(HttpBearer):
    """`Authorization: Bearer <pipeline token>`: acts on that pipeline only."""

    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        return principal_for_token(token)


class CapabilityMissing(BoxyardError):
    """A capability the sandbox's profile does not have (the Bay API's own refusal)."""

    code = "capability_not_supported"
    status = 400


class SandboxExpired(InvalidState):
    """Bay's refusal to extend a sandbox whose time to live has passed."""

    code = "sandbox_expired"


def bay_code(error: BoxyardError) -> str:
    """The SDK's code for one of Boxyard's errors."""
    if isinstance(error, (CapabilityMissing, SandboxExpired)):
        return error.code
    if isinstance(error, InvalidInput) and error.field in ("path", "cwd"):
        return "invalid_path"
    if isinstance(error, NotFound) and error.extra.get("field") == "path":
        return "file_not_found"  # the sandbox is there; the file is not
    if isinstance(error, RuntimeFailure):
        return "timeout" if error.status == 504 else "ship_error"
    for family, code in _CODES:
        if isinstance(error, family):
            return code
    return error.code


def bay_problem(error: BoxyardError) -> Problem:
    """An error as the SDK reads it: its code, the message, and Boxyard's own code and
    details (the holder of a lease, the field that was wrong) in `details`."""
    shown = problem(error)
    details = {key: value for key, value in shown.body["error"].items() if key != "message"}
    body = {"error": {"code": bay_code(error), "message": error.message, "details": details}}
    return Problem(status=shown.status, body=body, headers=shown.headers)


__all__ = ["Answer", "bay", "bay_problem", "context", "principal", "run"]

bay = NinjaAPI(
    title="Boxyard: AstrBot's Bay API",
    version="1",
    description="The Bay API of AstrBot's `shipyard_neo` sandbox driver, served by Boxyard: "
    "set `shipyard_neo_endpoint` to `http://HOST:PORT/bay` and the access token to a "
    "pipeline's token.",
    urls_namespace="bay",
    openapi_url="/openapi.json",
    docs_url=None,
    auth=[BayToken()],
    parser=StrictJSON(),
)


def principal(request: HttpRequest) -> Principal:
    who = request.auth  # type: ignore[attr-defined]  # set by django-ninja's authentication
    assert isinstance(who, Principal) and who.pipeline is not None
    return who


def context(request: HttpRequest) -> Context:
    return Context(principal(request), request.build_absolute_uri("/").removesuffix("/"))


def run(
    request: HttpRequest,
    operation: Operation[Any, Any],
    call: Call[Any],
    shown: Callable[[Answer], Answer],
) -> Answer | Later:
    """An operation's record run for the caller, its answer (as the bot API shows it) turned
    into the Bay API's by `shown`; a long call's answer to come, with errors in Bay's shape."""
    answered = operation.run(context(request), call)
    if isinstance(answered, Awaited):
        return Later(answered.then(lambda done: shown(operation.shown(done))), bay_problem)
    return shown(operation.shown(answered))


def error_response(request: HttpRequest, error: BoxyardError) -> HttpResponse:
    return problem_response(bay, request, bay_problem(error))


@bay.exception_handler(BoxyardError)
def on_boxyard_error(request: HttpRequest, error: BoxyardError) -> HttpResponse:
    return error_response(request, error)


@bay.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, error: ValidationError) -> HttpResponse:
    first = error.errors[0] if error.errors else {}
    field = field_name(first.get("loc", ()))
    message = first.get("msg", "invalid input")
    if first.get("type") == "extra_forbidden":
        message = "is not a field of this call"
    return error_response(request, InvalidInput(field, message))


@bay.exception_handler(AuthenticationError)
def on_authentication_error(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    body = {
        "error": {
            "code": "unauthorized",
            "message": "a valid pipeline token is required (Authorization: Bearer ...)",
            "details": {},
        }
    }
    response = bay.create_response(request, body, status=401)
    response["WWW-Authenticate"] = "Bearer"
    return response


@bay.exception_handler(Http404)
def on_not_found(request: HttpRequest, error: Http404) -> HttpResponse:
    return error_response(request, NotFound(str(error) or "not found"))


@bay.exception_handler(RequestDataTooBig)
def on_too_big(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
    return error_response(request, TooLarge("the request body is larger than allowed"))


@bay.exception_handler(HttpError)
def on_http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    if isinstance(error.__cause__, BoxyardError):  # ninja wraps what the body parser raised
        return error_response(request, error.__cause__)
    if error.status_code == 400:
        return error_response(request, InvalidInput("body", str(error)))
    body = {"error": {"code": "error", "message": str(error), "details": {}}}
    return bay.create_response(request, body, status=error.status_code)
