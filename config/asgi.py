import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import django

from boxyard import heap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from config.handlers import PooledASGIHandler  # noqa: E402  (needs the apps loaded)

django_asgi_app = PooledASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import WebsocketDenier  # noqa: E402
from django.conf import settings  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402

from config.gate import Gate  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from sandboxes.e2b.envd import app as envd  # noqa: E402
from sandboxes.e2b.hostnames import ByHostName  # noqa: E402
from sandboxes.mcp.app import McpApplication, serves  # noqa: E402

if TYPE_CHECKING:
    from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable
    from channels.consumer import _ChannelScope
    from channels.utils import _ChannelApplication

_DEFAULT_PORTS = {"http": 80, "https": 443}


class SameOriginWebsockets:
    """Websockets only from a page of the very origin they are opened on.

    A websocket carries the admin's session cookie whatever page opens it, so its `Origin`
    must be exactly the scheme, host and port of the socket itself (a host of ALLOWED_HOSTS;
    wss, or an https proxy named by SECURE_PROXY_SSL_HEADER, means https), or one of
    CSRF_TRUSTED_ORIGINS, which the operator already trusts with the dashboard's forms. The
    same host on another port or scheme is another origin. Settings are read as each socket
    connects.
    """

    def __init__(self, application: "_ChannelApplication") -> None:
        self.application = application

    async def __call__(
        self, scope: "_ChannelScope", receive: "ASGIReceiveCallable", send: "ASGISendCallable"
    ) -> None:
        if _same_origin(scope):
            # A channels stack is an ASGI 3 application; types-channels' type for it admits
            # ASGI 2 ones too (called with the scope alone).
            await cast("ASGI3Application", self.application)(scope, receive, send)
        else:
            await WebsocketDenier()(scope, receive, send)


def _same_origin(scope: Mapping[str, Any]) -> bool:
    headers = [(name.lower(), value.decode("latin1")) for name, value in scope.get("headers", [])]
    origins = [value for name, value in headers if name == b"origin"]
    hosts = [value for name, value in headers if name == b"host"]
    if len(origins) != 1 or len(hosts) != 1:
        return False
    origin = _origin(origins[0])
    if origin is None:
        return False
    if origin in {_origin(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS}:
        return True
    domain, _port = split_domain_port(hosts[0])
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    return origin == _origin(f"{'https' if _secure(scope, headers) else 'http'}://{hosts[0]}")


def _origin(text: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin such as `https://boxyard.example:8443`; None for
    `null` or anything that is not an origin alone."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not parts.hostname
        or parts.username is not None
        or parts.path
        or parts.query
        or parts.fragment
    ):
        return None
    return parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme]


def _secure(scope: Mapping[str, Any], headers: list[tuple[bytes, str]]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, expected = settings.SECURE_PROXY_SSL_HEADER
        name = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode()
        values = [value for header, value in headers if header == name]
        return bool(values) and values[0].split(",")[0].strip() == expected
    return False


class HttpRouter:
    """`/mcp` to the MCP application, `/e2b/sandbox` to the E2B sandbox API (envd), every
    other path to Django."""

    def __init__(
        self, django: PooledASGIHandler, mcp: McpApplication, envd: envd.EnvdApplication
    ) -> None:
        self.django = django
        self.mcp = mcp
        self.envd = envd

    async def __call__(
        self, scope: dict[str, Any], receive: "ASGIReceiveCallable", send: "ASGISendCallable"
    ) -> None:
        if serves(scope["path"]):
            await self.mcp(scope, receive, send)  # type: ignore[arg-type]  # the same ASGI callables
        elif self.envd.serves(scope["path"]):
            await self.envd(scope, receive, send)  # type: ignore[arg-type]  # the same ASGI callables
        else:
            await self.django(scope, receive, send)  # type: ignore[arg-type]  # the same ASGI callables


# E2B's sandbox API proves its callers by a sandbox's access token: the gate asks it whose.
_envd = envd.EnvdApplication()
application = ProtocolTypeRouter(
    {
        # E2B's host names first: the gate reads the path they give.
        "http": ByHostName(
            Gate(HttpRouter(django_asgi_app, McpApplication(), _envd), doors=(_envd,))  # type: ignore[arg-type]  # the same ASGI callables
        ),
        "websocket": SameOriginWebsockets(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))  # type: ignore[arg-type]  # types-channels' own URLPattern type
        ),
    }
)

# Load the URL conf (and with it every view) now rather than on the first request, then take
# everything start-up made out of the garbage collector's way, and give back what bursts of
# traffic leave behind (see boxyard.heap).
from django.urls import get_resolver  # noqa: E402

_ = get_resolver().url_patterns  # resolved now, not at the first request
heap.settle()
heap.start_trimming()
