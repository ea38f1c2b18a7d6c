import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from config.handlers import PooledASGIHandler  # noqa: E402  (needs the apps loaded)

django_asgi_app = PooledASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from sandboxes.routing import websocket_urlpatterns  # noqa: E402


class SameOriginWebsockets:
    """Websockets only from a page of one of ALLOWED_HOSTS (Channels' origin check, with the
    setting read as each socket connects rather than once at start-up)."""

    def __init__(self, application: object) -> None:
        self.application = application
        self.allowed: tuple[list[str], object] | None = None

    async def __call__(self, scope: dict, receive: object, send: object) -> object:
        hosts = list(settings.ALLOWED_HOSTS)
        if self.allowed is None or self.allowed[0] != hosts:
            self.allowed = (hosts, AllowedHostsOriginValidator(self.application))
        return await self.allowed[1](scope, receive, send)  # type: ignore[operator]


application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginWebsockets(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Load the URL conf (and with it every view) now rather than on the first request, then take
# everything start-up made out of the garbage collector's way (see boxyard.heap).
from django.urls import get_resolver  # noqa: E402

from boxyard import heap  # noqa: E402

get_resolver().url_patterns
heap.settle()
