"""Shell sessions: create, list, delete.

A session's live state is the agent's (in the sandbox); its row records how it was created,
so the session can be brought back if the container is recreated.
"""

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, Conflict, InvalidInput, InvalidState, NotFound
from sandboxes import events
from sandboxes.guard import LIVE, acting_on
from sandboxes.models import Sandbox, ShellSession, State
from sandboxes.runtime.port import port_of
from sandboxes.scripts import WORKSPACE
from sandboxes.services import booting
from sandboxes.services.execs import clean_cwd, clean_env, clean_session_name

MAX_SESSIONS = 32


def create_session(
    sandbox: Sandbox,
    name: str,
    actor: Actor,
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    holder: str | None = None,
    epoch: int | None = None,
) -> dict[str, Any]:
    """Start a named shell session with its own cwd and environment."""
    name = clean_session_name(name)
    start_cwd = clean_cwd(cwd) or WORKSPACE
    start_env = clean_env(env)
    if name == "default":
        raise Conflict(N_("the default session always exists"))
    sandbox = booting.current(sandbox, actor)
    with acting_on(sandbox, actor, N_("create a session"), holder=holder, epoch=epoch) as acting:
        sandbox = acting.sandbox
        if ShellSession.objects.filter(sandbox=sandbox).count() >= MAX_SESSIONS:
            raise Conflict(
                N_(
                    "a sandbox has at most %(count)s sessions besides the default one",
                    count=MAX_SESSIONS,
                )
            )
        try:
            with transaction.atomic():
                ShellSession.objects.create(
                    sandbox=sandbox, name=name, cwd=start_cwd, env=start_env, actor=str(actor)
                )
        except IntegrityError:
            raise Conflict(N_("session %(name)r already exists", name=name), session=name) from None
        events.record(actor, "session.created", sandbox=sandbox, session=name, cwd=start_cwd)
    try:
        live = port_of(sandbox).call(
            "session.ensure", session=name, init={"cwd": start_cwd, "env": start_env}
        )
    except BoxyardError:
        ShellSession.objects.filter(sandbox=sandbox, name=name).delete()
        raise
    return _render(name, live)


def list_sessions(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The sandbox's sessions with their live cwd and environment (as created, when the
    sandbox is not running)."""
    if sandbox.state == State.DESTROYED:
        raise InvalidState(N_("the sandbox is destroyed"), state=sandbox.state)
    rows = {row.name: row for row in ShellSession.objects.filter(sandbox=sandbox)}
    live: dict[str, dict[str, Any]] = {}
    if sandbox.state == State.RUNNING:
        try:
            answer = port_of(sandbox).call("session.list")
        except BoxyardError:
            answer = {"sessions": []}
        listed = answer.get("sessions")
        live = {
            session["name"]: session
            for session in (listed if isinstance(listed, list) else [])
            if isinstance(session, dict) and isinstance(session.get("name"), str)
        }
    found = [_render("default", live.get("default"), WORKSPACE, {})]
    for name, row in sorted(rows.items()):
        found.append(_render(name, live.get(name), row.cwd, row.env))
    return found


def _render(
    name: str, live: dict[str, Any] | None, cwd: str = WORKSPACE, env: dict[str, str] | None = None
) -> dict[str, Any]:
    if live is None:
        return {"name": name, "cwd": cwd, "env": env or {}, "busy": False, "started": False}
    # Read from the sandbox: only what has the right shape is shown.
    live_env = live.get("env")
    return {
        "name": name,
        "cwd": live["cwd"] if isinstance(live.get("cwd"), str) else cwd,
        "env": {
            key: value
            for key, value in live_env.items()
            if isinstance(key, str) and isinstance(value, str)
        }
        if isinstance(live_env, dict)
        else {},
        "busy": live.get("busy") is True,
        "started": True,
    }


def delete_session(
    sandbox: Sandbox,
    name: str,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> None:
    """End a session's shell (and whatever runs in it) and forget it."""
    name = clean_session_name(name)
    if name == "default":
        raise InvalidInput("session", N_("the default session cannot be deleted"))
    with acting_on(
        sandbox, actor, N_("delete a session"), holder=holder, epoch=epoch, states=LIVE
    ) as acting:
        sandbox = acting.sandbox
        deleted, _ = ShellSession.objects.filter(sandbox=sandbox, name=name).delete()
        if not deleted:
            raise NotFound(N_("no shell session %(name)r in this sandbox", name=name), session=name)
        events.record(actor, "session.deleted", sandbox=sandbox, session=name)
    if sandbox.state == State.RUNNING:
        try:
            port_of(sandbox).call("session.delete", session=name)
        except NotFound:
            pass  # the agent never started it, or lost it with a restart
