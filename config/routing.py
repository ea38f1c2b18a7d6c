"""The websocket routes of every app: the dashboard's fleet, a sandbox, its terminal, the Docker
hosts."""

from collections.abc import Awaitable, Callable

from django.urls import URLPattern, path

from hosts.consumers import HostsConsumer
from sandboxes import consumers


def _consumer(route: str, application: Callable[..., Awaitable[None]]) -> URLPattern:
    """`path` for a consumer, as channels routes them."""
    return path(route, application)  # type: ignore[arg-type]  # django-stubs' path() takes views


websocket_urlpatterns = [
    _consumer("ws/fleet/", consumers.FleetConsumer.as_asgi()),
    _consumer("ws/sandboxes/<uuid:sandbox_id>/", consumers.SandboxConsumer.as_asgi()),
    _consumer("ws/sandboxes/<uuid:sandbox_id>/terminal/", consumers.TerminalConsumer.as_asgi()),
    _consumer("ws/hosts/", HostsConsumer.as_asgi()),
    _consumer("ws/hosts/<slug:name>/", HostsConsumer.as_asgi()),
]
