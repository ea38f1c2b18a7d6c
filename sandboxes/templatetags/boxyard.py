from datetime import UTC, datetime

from django import template
from django.utils.translation import gettext as _

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
    return str(value or "")
