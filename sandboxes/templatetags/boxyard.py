from datetime import UTC, datetime

from django import template

register = template.Library()


@register.filter
def unixtime(value: object) -> datetime | None:
    """Seconds since the epoch (a file's mtime in the sandbox) as an aware datetime."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return datetime.fromtimestamp(value, tz=UTC)
