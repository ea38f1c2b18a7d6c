"""E2B's two APIs by host name, for the SDKs that are given only `E2B_DOMAIN`.

Without `E2B_API_URL` and `E2B_SANDBOX_URL` the SDKs address the control plane as
`https://api.<domain>` and a sandbox as `https://<port>-<sandboxID>.<domain>`. Where the
operator names that domain (BOXYARD_E2B_DOMAIN), a request to one of those names is given the
path it would have had under Boxyard's own URLs before anything else reads it: `api.<domain>/x`
becomes `/e2b/x` (the control plane, in Django), `<port>-<id>.<domain>/x` becomes
`/e2b/sandbox/x` with the sandbox and port the name gives (`E2b-Sandbox-Id`,
`E2b-Sandbox-Port`, whatever the request said of them), so the same two APIs answer, the
sandbox's `X-Access-Token` still required. Any other host passes as it came; so does every
request while the setting is unset.
"""

import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from django.conf import settings
from django.http.request import split_domain_port

from sandboxes.e2b.envd.app import PORT_HEADER, PREFIX, SANDBOX_HEADER

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTROL_PREFIX = "/e2b"
# `<port>-<sandboxID>`, the first label of a sandbox's name (E2B's `get_host`).
_SANDBOX_LABEL = re.compile(r"(?P<port>[0-9]{1,5})-(?P<sandbox>[a-z0-9-]+)")


class ByHostName:
    """ASGI middleware in front of the HTTP application: E2B's host names to the paths
    Boxyard serves E2B's APIs at."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        domain = settings.BOXYARD_E2B_DOMAIN
        if domain and scope["type"] == "http":
            scope = routed(scope, domain)
        await self.app(scope, receive, send)


def routed(scope: Scope, domain: str) -> Scope:
    """The request as Boxyard's own URLs would have it, when its host is one of E2B's names
    under `domain`; else the request unchanged."""
    name, dot, rest = _host(scope).partition(".")
    if not dot or rest != domain:
        return scope
    if name == "api":
        return _under(scope, CONTROL_PREFIX)
    if label := _SANDBOX_LABEL.fullmatch(name):
        named = {
            SANDBOX_HEADER: label["sandbox"].encode(),
            PORT_HEADER: label["port"].encode(),
        }
        headers = [(key, value) for key, value in scope.get("headers", ()) if key not in named]
        return {**_under(scope, PREFIX), "headers": [*headers, *named.items()]}
    return scope


def _host(scope: Scope) -> str:
    """The request's host name, lower case, without its port ("" for none, or for several)."""
    hosts = [value for key, value in scope.get("headers", ()) if key == b"host"]
    if len(hosts) != 1:
        return ""
    domain, _port = split_domain_port(hosts[0].decode("latin-1"))
    return domain


def _under(scope: Scope, prefix: str) -> Scope:
    raw = scope.get("raw_path") or scope["path"].encode()
    return {**scope, "path": prefix + scope["path"], "raw_path": prefix.encode() + raw}
