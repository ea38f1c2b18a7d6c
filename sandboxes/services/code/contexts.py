"""Code contexts: create, list, restart, delete.

A context's state (its interpreter's variables) lives in the sandbox; its row records how it
was created, so that a new container or agent brings it back (empty). Each language has a
default context that needs no row ("default" for Python, "default-javascript")."""

import uuid
from typing import Any

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, NotFound, QuotaExceeded
from sandboxes import events
from sandboxes.guard import LIVE, acting_on
from sandboxes.models import CodeContext, Sandbox, State
from sandboxes.runtime.port import port_of
from sandboxes.services import booting
from sandboxes.services.execs.requests import clean_context_name, clean_cwd, clean_language

# The agent runs at most 16 interpreters; the two default contexts are among them.
MAX_CONTEXTS = 14


def create_context(
    sandbox: Sandbox,
    actor: Actor,
    *,
    language: str | None = None,
    cwd: str | None = None,
    holder: str | None = None,
    epoch: int | None = None,
) -> dict[str, Any]:
    """A new context (its interpreter starts at its first run)."""
    named = clean_language(language or "python")
    start_cwd = clean_cwd(cwd) or sandbox.workdir
    sandbox = booting.current(sandbox, actor)
    name = uuid.uuid4().hex
    with acting_on(
        sandbox, actor, N_("create a code context"), holder=holder, epoch=epoch
    ) as acting:
        sandbox = acting.sandbox
        if CodeContext.objects.filter(sandbox=sandbox).count() >= MAX_CONTEXTS:
            raise QuotaExceeded(
                N_(
                    "a sandbox has at most %(count)s code contexts besides the default ones; "
                    "delete one first",
                    count=MAX_CONTEXTS,
                )
            )
        row = CodeContext.objects.create(
            sandbox=sandbox, name=name, language=named, cwd=start_cwd, actor=str(actor)
        )
        events.record(actor, "code_context.created", sandbox=sandbox, context=name, language=named)
    try:
        live = port_of(sandbox).call(
            "context.create",
            context=name,
            language=named,
            cwd=start_cwd,
        )
    except BoxyardError:
        row.delete()
        raise
    return _render(name, named, start_cwd, live)


def list_contexts(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The sandbox's contexts, the default ones first, with whether their interpreter runs."""
    live: dict[str, dict[str, Any]] = {}
    if sandbox.state == State.RUNNING:
        try:
            listed = port_of(sandbox).call("context.list").get("contexts")
        except BoxyardError:
            listed = []
        live = {
            str(item.get("context")): item
            for item in (listed if isinstance(listed, list) else [])
            if isinstance(item, dict)
        }
    found = [
        _render("default", "python", sandbox.workdir, live.get("default")),
        _render(
            "default-javascript", "javascript", sandbox.workdir, live.get("default-javascript")
        ),
    ]
    for row in CodeContext.objects.filter(sandbox=sandbox):
        found.append(_render(row.name, row.language, row.cwd, live.get(row.name)))
    return found


def context_of(sandbox: Sandbox, name: str) -> dict[str, Any]:
    """One context as `list_contexts` shows it (NotFound if there is none by that name)."""
    name = clean_context_name(name)
    for context in list_contexts(sandbox):
        if context["id"] == name:
            return context
    raise NotFound(N_("no code context %(name)r in this sandbox", name=name), context_id=name)


def restart_context(
    sandbox: Sandbox,
    name: str,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> dict[str, Any]:
    """End the context's interpreter and what its code started: the next run starts afresh."""
    context = context_of(sandbox, name)
    with acting_on(
        sandbox, actor, N_("restart a code context"), holder=holder, epoch=epoch, states=LIVE
    ) as acting:
        sandbox = acting.sandbox
        events.record(actor, "code_context.restarted", sandbox=sandbox, context=context["id"])
    if sandbox.state == State.RUNNING:
        try:
            port_of(sandbox).call("context.restart", context=context["id"])
        except NotFound:
            pass  # the agent never started it: there is nothing to end
    return {**context, "running": False}


def delete_context(
    sandbox: Sandbox,
    name: str,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> None:
    """End a context's interpreter and forget the context (a default one is only ended: it
    comes back at its language's next run)."""
    name = clean_context_name(name)
    with acting_on(
        sandbox, actor, N_("delete a code context"), holder=holder, epoch=epoch, states=LIVE
    ) as acting:
        sandbox = acting.sandbox
        deleted, _ = CodeContext.objects.filter(sandbox=sandbox, name=name).delete()
        if not deleted and name not in ("default", "default-javascript"):
            raise NotFound(
                N_("no code context %(name)r in this sandbox", name=name), context_id=name
            )
        events.record(actor, "code_context.deleted", sandbox=sandbox, context=name)
    if sandbox.state == State.RUNNING:
        try:
            port_of(sandbox).call("context.delete", context=name)
        except NotFound:
            pass  # the agent never started it, or lost it with a restart


def _render(name: str, language: str, cwd: str, live: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": name,
        "language": language,
        "cwd": cwd,
        "running": bool(live and live.get("running") is True),
        "busy": bool(live and live.get("busy") is True),
        "runs": live.get("runs") if live and isinstance(live.get("runs"), int) else 0,
        # The run it is busy with (an exec: read, wait for or kill it like any other).
        "exec_id": live.get("exec") if live and isinstance(live.get("exec"), str) else None,
    }
