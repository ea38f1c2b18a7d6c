"""Permission-checked fetches shared by the API, the dashboard and the consumers.

A principal sees its own pipeline's objects only; anything else is "not found", never
"forbidden", so ids of other pipelines' sandboxes leak nothing.
"""

from uuid import UUID

from boxyard.errors import N_, InvalidInput, Message, NotFound
from pipelines.selectors import Principal, pipeline_for, principal_for_token, principal_for_user
from sandboxes.models import Exec, Sandbox, SandboxQuerySet, State

__all__ = [
    "Principal",
    "exec_for",
    "find_sandbox",
    "pipeline_for",
    "principal_for_token",
    "principal_for_user",
    "sandbox_for",
    "sandboxes_for",
    "visible_sandboxes",
]


def _parse_id(value: object, missing: Message) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        raise NotFound(missing) from None


def visible_sandboxes(principal: Principal) -> SandboxQuerySet:
    """Every sandbox the principal may see: its pipeline's (an admin's: all of them). Every
    fetch of sandboxes for a caller starts from here."""
    if principal.pipeline is None:
        return Sandbox.objects.all()
    return Sandbox.objects.filter(pipeline=principal.pipeline)


def find_sandbox(principal: Principal, sandbox_id: object) -> Sandbox | None:
    """`sandbox_for` for a page or a websocket whose sandbox may have gone meanwhile: None
    when there is none the principal may see; read with its pipeline, lease and host."""
    try:
        pk = _parse_id(sandbox_id, N_("no sandbox %(id)r", id=sandbox_id))
    except NotFound:
        return None
    found = visible_sandboxes(principal).select_related("pipeline", "lease", "host")
    return found.filter(pk=pk).first()


def sandbox_for(principal: Principal, sandbox_id: object) -> Sandbox:
    """The sandbox, if the principal may see it; its lease is read when first used."""
    pk = _parse_id(sandbox_id, N_("no sandbox %(id)r", id=sandbox_id))
    visible = visible_sandboxes(principal)
    # A bot's pipeline is already loaded with its token: no join needed.
    pipeline = principal.pipeline
    try:
        sandbox = (visible if pipeline else visible.select_related("pipeline")).get(pk=pk)
    except Sandbox.DoesNotExist:
        raise NotFound(N_("no sandbox %(id)s", id=sandbox_id)) from None
    if pipeline is not None:
        sandbox.pipeline = pipeline
    return sandbox


def sandboxes_for(
    principal: Principal,
    *,
    status: str | None = None,
    scope_key: str | None = None,
    limit: int = 200,
) -> list[Sandbox]:
    queryset = visible_sandboxes(principal).select_related("pipeline", "lease")
    if status:
        if status not in State.values:
            raise InvalidInput(
                "status", N_("must be one of %(choices)s", choices=", ".join(State.values))
            )
        queryset = queryset.filter(state=status)
    else:
        queryset = queryset.live()
    if scope_key is not None:
        if "\x00" in scope_key:
            raise InvalidInput("scope_key", N_("must not contain NUL characters"))
        queryset = queryset.filter(scope_key=scope_key)
    return list(queryset.order_by("-created_at")[:limit])


def exec_for(principal: Principal, sandbox: Sandbox, exec_id: object) -> Exec:
    pk = _parse_id(exec_id, N_("no exec %(id)r", id=exec_id))
    record = Exec.objects.filter(sandbox=sandbox, pk=pk).first()
    if record is None:
        raise NotFound(N_("no exec %(id)s in this sandbox", id=exec_id))
    return record
