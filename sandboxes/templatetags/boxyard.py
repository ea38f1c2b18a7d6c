from datetime import UTC, datetime

from django import template
from django.db import models
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from sandboxes.models import ExecState, State, StopReason

register = template.Library()


@register.filter
def unixtime(value: object) -> datetime | None:
    """Seconds since the epoch (a file's mtime in the sandbox) as an aware datetime."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return datetime.fromtimestamp(value, tz=UTC)


@register.filter
def actor(value: object) -> str:
    """Who an actor is ("bot:support/token-3", "admin:alice"), as the dashboard says it."""
    kind, _colon, name = str(value or "").partition(":")
    if kind == "bot":
        pipeline, _slash, token = name.partition("/")
        if token.startswith("token-"):
            return _("the token %(token)s of %(pipeline)s") % {
                "token": token.removeprefix("token-"),
                "pipeline": pipeline,
            }
        if name.startswith("link:"):
            return _("a signed link")
        return _("the bot %(name)s") % {"name": name}
    if kind == "admin":
        return _("the admin %(name)s") % {"name": name}
    if kind == "system":
        return "Boxyard"
    if kind == "command":
        return _("the command %(name)s") % {"name": name}
    return str(value or "")


# What each kind of event is called on the dashboard's pages (its code stays in its title).
EVENTS = {
    "sandbox.created": gettext_lazy("Created"),
    "sandbox.started": gettext_lazy("Started"),
    "sandbox.claimed": gettext_lazy("Taken from the warm pool"),
    "sandbox.adopted": gettext_lazy("Adopted after a restart"),
    "sandbox.restarting": gettext_lazy("Restarting"),
    "sandbox.stopping": gettext_lazy("Stopping"),
    "sandbox.stopped": gettext_lazy("Stopped"),
    "sandbox.stop_failed": gettext_lazy("Could not stop"),
    "sandbox.destroyed": gettext_lazy("Destroyed"),
    "sandbox.error": gettext_lazy("Failed"),
    "sandbox.container_lost": gettext_lazy("Container lost"),
    "sandbox.health_failed": gettext_lazy("Health check failed"),
    "sandbox.agent_migrated": gettext_lazy("Moved to the current agent"),
    "sandbox.reset": gettext_lazy("Reset"),
    "sandbox.lifetime_set": gettext_lazy("Lifetime set"),
    "lease.acquired": gettext_lazy("Lease taken"),
    "lease.released": gettext_lazy("Lease released"),
    "lease.taken_over": gettext_lazy("Taken over"),
    "session.created": gettext_lazy("Shell session created"),
    "session.deleted": gettext_lazy("Shell session deleted"),
    "file.written": gettext_lazy("File written"),
    "file.deleted": gettext_lazy("File deleted"),
    "file.moved": gettext_lazy("File moved"),
    "file.directory_made": gettext_lazy("Directory made"),
    "file.link_created": gettext_lazy("Link made"),
    "file.link_used": gettext_lazy("Link used"),
    "files.extracted": gettext_lazy("Archive extracted"),
    "process.restarted": gettext_lazy("Process restarted"),
    "process.start_failed": gettext_lazy("Processes did not start"),
    "terminal.opened": gettext_lazy("Terminal opened"),
    "terminal.closed": gettext_lazy("Terminal closed"),
    "pool.missed": gettext_lazy("Warm pool empty"),
    "pipeline.created": gettext_lazy("Pipeline created"),
    "pipeline.changed": gettext_lazy("Pipeline changed"),
    "pipeline.deleted": gettext_lazy("Pipeline deleted"),
    "skill.added": gettext_lazy("Skill added"),
    "skill.changed": gettext_lazy("Skill changed"),
    "skill.removed": gettext_lazy("Skill removed"),
    "token.issued": gettext_lazy("Token created"),
    "token.revoked": gettext_lazy("Token revoked"),
    "host.added": gettext_lazy("Host added"),
    "host.changed": gettext_lazy("Host changed"),
    "host.draining": gettext_lazy("Draining"),
    "host.active": gettext_lazy("Active again"),
    "host.down": gettext_lazy("Went down"),
    "host.up": gettext_lazy("Came back"),
    "host.removed": gettext_lazy("Host removed"),
}


@register.filter
def event(action: object) -> str:
    """An event's action ("lease.taken_over") as the dashboard names it."""
    return str(EVENTS.get(str(action), action))


@register.filter
def state_label(value: object) -> str:
    """A sandbox's state ("running") as the dashboard names it."""
    return _choice(State, value)


@register.filter
def reason_label(value: object) -> str:
    """Why a sandbox stopped ("idle") as the dashboard names it."""
    return _choice(StopReason, value)


@register.filter
def exec_label(value: object) -> str:
    """How a command ended ("timed_out") as the dashboard names it."""
    return _choice(ExecState, value)


def _choice(choices: type[models.TextChoices], value: object) -> str:
    try:
        return str(choices(str(value)).label)
    except ValueError:
        return str(value)


# A managed process's state, as the agent reports it, as the dashboard names it.
PROCESS_STATES = {
    "starting": gettext_lazy("starting"),
    "running": gettext_lazy("running"),
    "backoff": gettext_lazy("waiting to start again"),
    "exited": gettext_lazy("exited"),
    "stopped": gettext_lazy("stopped"),
}


@register.filter
def process_label(value: object) -> str:
    return str(PROCESS_STATES.get(str(value), value))
