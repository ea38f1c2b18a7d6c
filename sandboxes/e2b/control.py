"""E2B's control plane at `/e2b`, so that E2B's SDKs (`E2B_API_URL=http://HOST:PORT/e2b`) create,
find, list, pause, resume, time and kill Boxyard sandboxes, unchanged.

A door, not a house: each route parses what the SDK sends (`shapes`), fetches what the
pipeline may see (`selectors`), runs the operation's record where it has one (close) or calls
the services every door calls (opening, labels, lifetimes, usage), and answers in the shapes
the SDK's models parse. The key (`X-API-KEY`, or a bearer token) is a pipeline's token, looked up as every token is; an error
is E2B's `{"code": <status>, "message": ...}` with Boxyard's own status, which the SDK turns
into its exceptions (404 not found, 401 authentication, 429 rate limit).

The chat: a create's `metadata` are the chat's variables. Naming any of the pipeline's scope
variables, it gets the chat's sandbox (found, or opened, as the bot API's open does), all of
them needed; naming none, a sandbox of its own. The metadata are kept on the sandbox.
"""

import urllib.parse
from datetime import datetime
from typing import Any, cast

from django.db.models import TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.dateparse import parse_datetime
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import APIKeyHeader, HttpBearer

from boxyard.errors import N_, BoxyardError, Conflict, InvalidInput, Message, NotFound, problem
from pipelines.models import Pipeline
from sandboxes import selectors, services
from sandboxes.e2b import shapes
from sandboxes.models import Sandbox, SandboxQuerySet, State
from sandboxes.operations import Call, Context
from sandboxes.operations.sandboxes import CLOSE
from sandboxes.schemas.sandboxes import CloseQuery
from sandboxes.selectors import Principal, principal_for_token
from sandboxes.services.labels import clean_environment, clean_labels

MAX_PAGE = 100
MAX_METRICS_IDS = 100


class ApiKey(APIKeyHeader):
    """`X-API-KEY: <a pipeline's token>`, as the SDKs send their `E2B_API_KEY`."""

    param_name = "X-API-KEY"

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:
        return principal_for_token(key) if key else None


class Bearer(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        return principal_for_token(token)


api = NinjaAPI(
    title="Boxyard's E2B control plane",
    version="1",
    description="E2B's sandbox API over Boxyard sandboxes, for E2B's SDKs.",
    urls_namespace="e2b",
    docs_url=None,
    auth=[ApiKey(), Bearer()],
)


def _caller(request: HttpRequest) -> tuple[Principal, Pipeline]:
    who = cast(Principal, request.auth)  # type: ignore[attr-defined]  # set by ninja's auth
    assert who.pipeline is not None  # a token's principal always has its pipeline
    return who, who.pipeline


def _sandbox(who: Principal, sandbox_id: str) -> Sandbox:
    """The pipeline's sandbox; a destroyed one is gone, as E2B's killed sandboxes are."""
    sandbox = selectors.sandbox_for(who, sandbox_id)
    if sandbox.state == State.DESTROYED:
        raise NotFound(N_("no sandbox %(id)s", id=sandbox_id))
    return sandbox


def _json(body: Any, status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, safe=False)


# --- create and connect ---------------------------------------------------------------------------


@api.post("/v2/sandboxes")
def create(request: HttpRequest, body: shapes.NewSandbox) -> HttpResponse:
    who, pipeline = _caller(request)
    shapes.check_new(body, pipeline.effective_image)
    metadata = clean_labels(body.metadata, "metadata")
    env = clean_environment(body.env_vars, "envVars")
    if body.timeout is not None:
        services.check_lifetime(pipeline, body.timeout, field="timeout")
    try:
        opened = services.chat_or_own_sandbox(pipeline, metadata, who.actor)
    except InvalidInput as error:
        raise _as_metadata(error) from None
    sandbox = services.label_sandbox(opened.sandbox, who.actor, metadata=metadata, env=env)
    if body.timeout is not None:
        sandbox = services.set_lifetime(sandbox, who.actor, body.timeout, field="timeout")
    return _json(shapes.created(sandbox), 201)


def _as_metadata(error: InvalidInput) -> InvalidInput:
    """A chat variable the scope misses, named as the SDK's caller sent it: in `metadata`."""
    if not error.field.startswith("variables.") or not isinstance(error.words, Message):
        return error
    extra = {key: value for key, value in error.extra.items() if key != "field"}
    said = cast(Message, error.words.params["message"])  # InvalidInput's "field: message"
    return InvalidInput("metadata." + error.field.removeprefix("variables."), said, **extra)


@api.post("/v2/sandboxes/{sandbox_id}/connect")
def connect(request: HttpRequest, sandbox_id: str, body: shapes.ConnectSandbox) -> HttpResponse:
    """Connect to a running sandbox, or resume a paused one (201) on its kept workspace."""
    who, pipeline = _caller(request)
    sandbox = _sandbox(who, sandbox_id)
    if body.timeout is not None:
        services.check_lifetime(pipeline, body.timeout, field="timeout")
    was = shapes.state_of(sandbox)
    sandbox = services.resume_sandbox(sandbox, who.actor).sandbox
    if body.timeout is not None:
        sandbox = services.set_lifetime(sandbox, who.actor, body.timeout, field="timeout")
    return _json(shapes.created(sandbox), 201 if was == shapes.PAUSED else 200)


@api.post("/sandboxes/{sandbox_id}/resume")
def resume(request: HttpRequest, sandbox_id: str, body: shapes.ConnectSandbox) -> HttpResponse:
    """The first version's resume: connect, for a paused sandbox (409 for a running one)."""
    who, _ = _caller(request)
    if shapes.state_of(_sandbox(who, sandbox_id)) != shapes.PAUSED:
        raise Conflict(N_("sandbox %(id)s is not paused", id=sandbox_id))
    return connect(request, sandbox_id, body)


# --- look -----------------------------------------------------------------------------------------


@api.get("/sandboxes/metrics")
def metrics_of_many(request: HttpRequest, sandbox_ids: str) -> HttpResponse:
    """The latest reading of each of these sandboxes that runs (unknown ids are left out)."""
    who, _ = _caller(request)
    ids = [value.strip() for value in sandbox_ids.split(",") if value.strip()]
    if len(ids) > MAX_METRICS_IDS:
        raise InvalidInput("sandbox_ids", N_("at most %(count)s ids", count=MAX_METRICS_IDS))
    readings = {}
    for sandbox_id in ids:
        sandbox = selectors.find_sandbox(who, sandbox_id)
        if sandbox is not None and sandbox.state == State.RUNNING:
            readings[str(sandbox.pk)] = _reading(sandbox)
    return _json({"sandboxes": readings})


@api.get("/sandboxes/{sandbox_id}")
def get_info(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    who, _ = _caller(request)
    return _json(shapes.detail(_sandbox(who, sandbox_id)))


@api.get("/sandboxes/{sandbox_id}/metrics")
def metrics(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """The sandbox's reading now, as a list of one (none while it is paused)."""
    who, _ = _caller(request)
    sandbox = _sandbox(who, sandbox_id)
    return _json([_reading(sandbox)] if sandbox.state == State.RUNNING else [])


def _reading(sandbox: Sandbox) -> dict[str, Any]:
    usage = services.container_usage(sandbox)
    return shapes.metric(sandbox, usage, services.workspace_usage(sandbox).used_bytes)


@api.get("/v2/sandboxes")
def list_sandboxes(
    request: HttpRequest,
    metadata: str | None = None,
    state: str | None = None,
    limit: int | None = None,
    nextToken: str | None = None,  # the SDK's names
    order: str | None = None,
    startedAfter: str | None = None,
    template: str | None = None,
) -> HttpResponse:
    """A page of the pipeline's sandboxes (`x-next-token` names the next), filtered by their
    metadata (`k=v&k2=v2`, each part quoted), state (`running,paused`), start and template."""
    who, pipeline = _caller(request)
    found = selectors.visible_sandboxes(who).filter(state__in=shapes.state_filter(state))
    for name, value in _metadata_filter(metadata).items():
        found = _with_label(found, name, value)
    if startedAfter:
        found = found.filter(started_at__gte=_moment(startedAfter, "startedAfter"))
    if template and not shapes.is_pipeline_template(template, pipeline.effective_image):
        found = found.none()
    if order not in (None, "asc", "desc"):
        raise InvalidInput("order", N_("must be asc or desc"))
    size = MAX_PAGE if limit is None else limit
    if not 1 <= size <= MAX_PAGE:
        raise InvalidInput("limit", N_("must be from 1 to %(most)s", most=MAX_PAGE))
    start = _offset(nextToken)
    ordering = ["created_at", "id"] if order == "asc" else ["-created_at", "-id"]
    page = list(found.select_related("pipeline").order_by(*ordering)[start : start + size + 1])
    response = _json([shapes.listed(sandbox) for sandbox in page[:size]])
    if len(page) > size:
        response["x-next-token"] = str(start + size)
    return response


@api.get("/sandboxes")
def list_running(request: HttpRequest, metadata: str | None = None) -> HttpResponse:
    """The first version's list: the running sandboxes, filtered by metadata."""
    who, _ = _caller(request)
    found = selectors.visible_sandboxes(who).filter(state__in=shapes.state_filter("running"))
    for name, value in _metadata_filter(metadata).items():
        found = _with_label(found, name, value)
    page = found.select_related("pipeline").order_by("-created_at")[: MAX_PAGE * 10]
    return _json([shapes.listed(sandbox) for sandbox in page])


def _metadata_filter(text: str | None) -> dict[str, str]:
    """`k=v&k2=v2` with each name and value quoted once more by the SDK."""
    if not text:
        return {}
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise InvalidInput("metadata", N_("must be key=value pairs joined by &")) from None
    return {urllib.parse.unquote(name): urllib.parse.unquote(value) for name, value in pairs}


def _with_label(found: SandboxQuerySet, name: str, value: str) -> SandboxQuerySet:
    alias = f"label_{len(found.query.annotations)}"
    # Compared as text: the key's value read out of the JSON, whatever characters its name has.
    label = Cast(KeyTextTransform(name, "metadata"), output_field=TextField())
    return found.alias(**{alias: label}).filter(**{alias: value})


def _moment(text: str, field: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        raise InvalidInput(field, N_("must be an ISO 8601 date and time"))
    return moment


def _offset(token: str | None) -> int:
    if token is None or token == "":
        return 0
    if not token.isdigit() or len(token) > 9:
        raise InvalidInput("nextToken", N_("is not a token this list gave"))
    return int(token)


# --- change ---------------------------------------------------------------------------------------


@api.post("/sandboxes/{sandbox_id}/timeout")
def set_timeout(request: HttpRequest, sandbox_id: str, body: shapes.TimeoutRequest) -> HttpResponse:
    who, _ = _caller(request)
    services.set_lifetime(_sandbox(who, sandbox_id), who.actor, body.timeout, field="timeout")
    return HttpResponse(status=204)


@api.post("/sandboxes/{sandbox_id}/pause")
def pause(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Stop the container, keep the workspace (a paused sandbox resumes on connect); 409 when
    it is paused already."""
    who, _ = _caller(request)
    sandbox = _sandbox(who, sandbox_id)
    if shapes.state_of(sandbox) == shapes.PAUSED:
        raise Conflict(N_("sandbox %(id)s is already paused", id=sandbox_id))
    _close(who, sandbox, delete_workspace=False)
    return HttpResponse(status=204)


@api.delete("/sandboxes/{sandbox_id}")
def kill(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Destroy the sandbox with its workspace."""
    who, _ = _caller(request)
    _close(who, _sandbox(who, sandbox_id), delete_workspace=True)
    return HttpResponse(status=204)


def _close(who: Principal, sandbox: Sandbox, *, delete_workspace: bool) -> None:
    """The bot API's and MCP's close, run from its record: as the sandbox's default holder."""
    query = CloseQuery(delete_workspace=delete_workspace, holder=None, epoch=None)
    CLOSE.service(Context(principal=who), Call(query, sandbox_id=str(sandbox.pk)))


# --- errors, as E2B shapes them -------------------------------------------------------------------


def _error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"code": status, "message": message, **extra}, status=status)


@api.exception_handler(BoxyardError)
def on_boxyard_error(request: HttpRequest, error: BoxyardError) -> HttpResponse:
    answer = problem(error)
    response = _error(answer.status, error.message, reason=error.code)
    for name, value in answer.headers.items():
        response[name] = value
    return response


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, error: ValidationError) -> HttpResponse:
    first = error.errors[0] if error.errors else {}
    where = [str(part) for part in first.get("loc", ())]
    field = ".".join(part for part in where[1:] if part != "body") or (where[0] if where else "")
    return _error(400, f"{field}: {first.get('msg', 'invalid input')}", reason="invalid_input")


@api.exception_handler(AuthenticationError)
def on_authentication_error(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
    return _error(
        401,
        "a valid API key is required (X-API-KEY: a pipeline's token, such as the e2b_... key "
        "its page issues)",
        reason="unauthorized",
    )


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
    if isinstance(error.__cause__, BoxyardError):
        return on_boxyard_error(request, error.__cause__)
    message = f"body: {error}" if error.status_code == 400 else str(error)
    return _error(error.status_code, message)
