"""The chat's sandbox, for a protocol whose caller may leave the sandbox out: the sandbox of the
chat's scope key, found or opened; or, where the pipeline's scope gives every open a sandbox
of its own, the one the caller's session opened.

What a session opened is a row (`SessionSandbox`), so any web process finds it again, also
after a restart. A pipeline keeps at most `BOXYARD_MCP_SESSIONS_PER_PIPELINE` of them (the
least recently used go first); a row goes when its session ends (`forget_session`), or once
unused for `BOXYARD_MCP_SESSION_IDLE_SECONDS` (the next row of its pipeline takes it away).
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput, NotFound
from pipelines import scope
from pipelines.models import Pipeline
from sandboxes.models import Sandbox, SessionSandbox, State
from sandboxes.services.opening import Opened, open_own_sandbox, open_sandbox

# A found row's `used_at` moves on at most this often (a part of the idle time), not at
# every call.
_TOUCH_PART = 10


def chat_sandbox(
    pipeline: Pipeline,
    variables: dict[str, str],
    actor: Actor,
    *,
    session: str | None = None,
    open_it: bool = True,
) -> str:
    """The id of the chat's sandbox: its scope key's running sandbox, or the sandbox its
    `session` opened; or (`open_it`) a sandbox opened now, remembered for the session.

    Raises `InvalidInput` (`sandbox_id`) where the scope gives every open a sandbox of its own
    and there is no session to remember it by; `NotFound` where there is none and `open_it`
    is false.
    """
    if scope.generates(pipeline.scope_template, variables):
        remembered = _remembered(session, pipeline)
        if remembered is not None:
            return remembered
        if session is None:
            raise InvalidInput(
                "sandbox_id",
                N_(
                    "this pipeline's sandbox scope gives every open a sandbox of its own: "
                    "call sandbox_open and pass the sandbox_id it returns"
                ),
            )
    else:
        key = scope.resolve(pipeline.scope_template, variables)
        running = (
            Sandbox.objects.filter(pipeline=pipeline, scope_key=key, state=State.RUNNING)
            .values_list("pk", flat=True)
            .first()
        )
        if running is not None:
            return str(running)
    if not open_it:
        raise NotFound(
            N_("this chat has no open sandbox: run a command or call sandbox_open first")
        )
    opened = open_sandbox(pipeline, variables, actor)
    sandbox_id = str(opened.sandbox.pk)
    if session is not None:
        remember_session_sandbox(session, pipeline, sandbox_id)
    return sandbox_id


def chat_or_own_sandbox(
    pipeline: Pipeline, variables: dict[str, str], actor: Actor, holder: str | None = None
) -> Opened:
    """The chat's sandbox when the variables name any of the pipeline's scope (all it needs,
    else InvalidInput naming the one missing), found or opened; a new sandbox of its own
    when they name none of them (a caller that knows nothing of chats)."""
    named = scope.variables_used(pipeline.scope_template) & set(scope.clean_variables(variables))
    if named:
        return open_sandbox(pipeline, variables, actor, holder)
    return open_own_sandbox(pipeline, variables, actor, holder)


def remember_session_sandbox(session: str, pipeline: Pipeline, sandbox_id: str) -> None:
    """The session opened this sandbox: its later calls without one act on it. The
    pipeline's rows past their idle time, and past its cap, go."""
    now = timezone.now()
    with transaction.atomic():
        SessionSandbox.objects.update_or_create(
            session=session,
            defaults={"pipeline": pipeline, "sandbox_id": sandbox_id, "used_at": now},
        )
        rows = SessionSandbox.objects.filter(pipeline=pipeline)
        rows.filter(used_at__lt=now - _idle()).delete()
        kept = settings.BOXYARD_MCP_SESSIONS_PER_PIPELINE
        past_cap = list(rows.order_by("-used_at").values_list("pk", flat=True)[kept:])
        if past_cap:
            SessionSandbox.objects.filter(pk__in=past_cap).delete()


def forget_session(session: str) -> None:
    """The session ended: the sandbox it opened is no longer its own."""
    SessionSandbox.objects.filter(pk=session).delete()


def _remembered(session: str | None, pipeline: Pipeline) -> str | None:
    if session is None:
        return None
    row = SessionSandbox.objects.filter(pk=session, pipeline=pipeline).first()
    if row is None:
        return None
    now = timezone.now()
    if row.used_at < now - _idle() / _TOUCH_PART:
        SessionSandbox.objects.filter(pk=session).update(used_at=now)
    return str(row.sandbox_id)


def _idle() -> timedelta:
    return timedelta(seconds=settings.BOXYARD_MCP_SESSION_IDLE_SECONDS)
