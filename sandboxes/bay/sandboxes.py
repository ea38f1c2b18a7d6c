"""The Bay API's sandboxes: create, look, list, the profiles, stop, delete, keep alive, extend
the time to live.

A Bay sandbox is a Boxyard sandbox of the token's pipeline, with the same id. Its cargo (Bay's
persistent volume) is the sandbox's workspace, named by its scope key: a create without a
cargo gets a sandbox of its own (`services.open_own_sandbox`); a create naming the cargo of an existing
sandbox gets that sandbox, with its files (one live sandbox per key, as for the bot API). Stop
keeps the workspace, and the next call starts the sandbox again; delete destroys it.
"""

from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Field as Given
from ninja import Query, Router, Schema

from boxyard.errors import N_, InvalidInput, InvalidState, NotFound
from pipelines.models import Pipeline
from pipelines.scope import Scope
from sandboxes import selectors, services
from sandboxes.bay.api import Answer, SandboxExpired, context, principal, run
from sandboxes.bay.idempotency import idempotent
from sandboxes.bay.schemas import CreateIn, ExtendIn
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.operations import Call
from sandboxes.operations import sandboxes as operations

router = Router(tags=["bay"])
SANDBOX = "/sandboxes/{sandbox_id}"

# The one profile a pipeline offers: its own sandboxes, with what they can do. Python runs
# in the pipeline's image (`boxyard/default:1` has it); a browser is not there yet.
PROFILE = "python-default"
CAPABILITIES = ("python", "shell", "filesystem")

_STATUS = {
    State.CREATING: "starting",
    State.UNKNOWN: "starting",
    State.MOVING: "starting",
    State.RUNNING: "ready",
    State.STOPPING: "idle",
    State.STOPPED: "idle",
    State.ERROR: "failed",
}


class ListQuery(Schema):
    limit: int = Given(50, ge=1, le=200)
    cursor: str | None = Given(None, pattern=r"^\d{1,9}$", description="From the last page.")
    status: str | None = Given(None, pattern="^(idle|starting|ready|failed|expired)$")


def bay_status(sandbox: Sandbox) -> str:
    if sandbox.state in (State.STOPPING, State.STOPPED) and sandbox.stop_reason == StopReason.TTL:
        return "expired"
    return _STATUS.get(State(sandbox.state), "failed")


def sandbox_out(sandbox: Sandbox) -> Answer:
    running = sandbox.state == State.RUNNING
    return {
        "id": str(sandbox.pk),
        "status": bay_status(sandbox),
        "profile": PROFILE,
        "cargo_id": sandbox.scope_key,
        "capabilities": list(CAPABILITIES),
        "created_at": sandbox.created_at.isoformat(),
        "expires_at": sandbox.expires_at.isoformat() if sandbox.expires_at else None,
        "idle_expires_at": sandbox.idle_deadline.isoformat()
        if running and sandbox.idle_deadline
        else None,
    }


def profile_out(pipeline: Pipeline) -> Answer:
    return {
        "id": PROFILE,
        "image": pipeline.effective_image,
        "resources": {
            "cpus": pipeline.cpus,
            "memory": f"{pipeline.memory_mb}Mi",
            "disk": f"{pipeline.workspace_mb}Mi",
        },
        "capabilities": list(CAPABILITIES),
        "idle_timeout": pipeline.idle_timeout_seconds,
        "description": f"The sandboxes of pipeline {pipeline.slug}",
    }


def bay_sandbox(request: HttpRequest, sandbox_id: str) -> Sandbox:
    """The caller's sandbox; a destroyed one is gone for Bay's clients (404)."""
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    if sandbox.state == State.DESTROYED:
        raise NotFound(N_("no sandbox %(id)s", id=sandbox_id))
    return sandbox


def _cargo_key(request: HttpRequest, cargo_id: str) -> str:
    """The scope key of the workspace a create names."""
    if not selectors.sandboxes_for(principal(request), scope_key=cargo_id, limit=1):
        raise NotFound(N_("no cargo %(cargo)r in this pipeline", cargo=cargo_id), field="cargo_id")
    return cargo_id


@router.post("/sandboxes", summary="Create a sandbox (or attach one to a cargo)")
@idempotent
def create_sandbox(request: HttpRequest, body: CreateIn) -> Answer:
    who = principal(request)
    pipeline = who.pipeline
    assert pipeline is not None
    if body.profile != PROFILE:
        raise InvalidInput(
            "profile",
            N_(
                "no profile %(profile)r; this pipeline offers %(offered)r",
                profile=body.profile,
                offered=PROFILE,
            ),
        )
    if body.ttl:
        services.check_lifetime(pipeline, body.ttl, field="ttl")
    if body.cargo_id is None:
        opened = services.open_own_sandbox(pipeline, {}, who.actor)
    else:
        key = _cargo_key(request, body.cargo_id)
        opened = services.open_scope(pipeline, Scope(key=key, variables={}), who.actor)
    sandbox = opened.sandbox
    if body.ttl:
        sandbox = services.set_lifetime(sandbox, who.actor, body.ttl, field="ttl")
    return sandbox_out(selectors.sandbox_for(who, sandbox.pk))


@router.get("/sandboxes", summary="The pipeline's sandboxes, a page at a time")
def list_sandboxes(request: HttpRequest, query: Query[ListQuery]) -> Answer:
    start = int(query.cursor or 0)
    found = [
        sandbox
        for sandbox in selectors.sandboxes_for(principal(request), limit=1000)
        if query.status in (None, bay_status(sandbox))
    ]
    page = found[start : start + query.limit]
    more = start + query.limit < len(found)
    return {
        "items": [sandbox_out(sandbox) for sandbox in page],
        "next_cursor": str(start + query.limit) if more else None,
    }


@router.get(SANDBOX, summary="One sandbox: its status (ready once it runs)")
def get_sandbox(request: HttpRequest, sandbox_id: str) -> Answer:
    return sandbox_out(bay_sandbox(request, sandbox_id))


@router.get("/profiles", summary="The profiles the pipeline offers")
def list_profiles(request: HttpRequest, detail: bool = False) -> Answer:
    pipeline = principal(request).pipeline
    assert pipeline is not None
    return {"items": [profile_out(pipeline)]}


@router.post(SANDBOX + "/stop", summary="Stop the sandbox; its workspace is kept")
def stop_sandbox(request: HttpRequest, sandbox_id: str) -> Any:
    sandbox = bay_sandbox(request, sandbox_id)
    call = Call(operations.CLOSE.parse({"delete_workspace": False}), str(sandbox.pk))
    return run(request, operations.CLOSE, call, lambda _closed: {})


@router.delete(SANDBOX, summary="Destroy the sandbox and its workspace")
def delete_sandbox(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    sandbox = bay_sandbox(request, sandbox_id)
    call = Call(operations.CLOSE.parse({"delete_workspace": True}), str(sandbox.pk))
    run(request, operations.CLOSE, call, lambda closed: closed)
    return HttpResponse(status=204)


@router.post(SANDBOX + "/keepalive", summary="Count as activity now (the idle deadline moves)")
def keep_alive(request: HttpRequest, sandbox_id: str) -> Any:
    sandbox = bay_sandbox(request, sandbox_id)
    if sandbox.state != State.RUNNING:
        return {}  # Bay's keepalive starts nothing: a stopped sandbox stays as it is
    return run(
        request,
        operations.KEEP_ALIVE,
        Call(operations.KEEP_ALIVE.parse({}), str(sandbox.pk)),
        lambda _: {},
    )


@router.post(SANDBOX + "/extend_ttl", summary="Move the end of the sandbox's lifetime later")
@idempotent
def extend_ttl(request: HttpRequest, sandbox_id: str, body: ExtendIn) -> Answer:
    sandbox = bay_sandbox(request, sandbox_id)
    if bay_status(sandbox) == "expired":
        raise SandboxExpired(N_("the sandbox reached its time to live; create another"))
    if sandbox.state != State.RUNNING or sandbox.expires_at is None:
        raise InvalidState(
            f"cannot extend the time to live: the sandbox is {sandbox.state}", state=sandbox.state
        )
    left = max(0, int((sandbox.expires_at - timezone.now()) / timedelta(seconds=1)))
    who = context(request).principal
    extended = services.set_lifetime(sandbox, who.actor, left + body.extend_by, field="extend_by")
    return sandbox_out(extended)
