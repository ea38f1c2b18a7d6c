"""The dashboard's websockets open only from a page of the very origin they are served on.

A websocket carries the admin's session cookie whatever page opens it, so the router compares
the `Origin` a browser sends with the scheme, host and port the socket itself was opened on
(a host of ALLOWED_HOSTS). The same host on another port or scheme is another origin (another
program, or a page that is not protected by TLS) and is refused, as are other hosts, `null`
(sandboxed frames, `file:` pages) and no origin at all.
"""

import asyncio
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

pytestmark = pytest.mark.django_db(transaction=True)  # the consumers' own connections


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver", "boxyard.example"]


@pytest.fixture
def cookie(django_user_model: Any) -> bytes:
    admin = Client()
    admin.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    return f"sessionid={admin.cookies['sessionid'].value}".encode()


def connects(
    cookie: bytes,
    origins: list[bytes],
    *,
    host: bytes = b"testserver",
    scheme: str = "ws",
    extra: list[tuple[bytes, bytes]] | None = None,
) -> bool:
    """Whether the fleet's websocket opens for an admin with these Origin headers."""
    from config.asgi import application

    async def attempt() -> bool:
        headers = [
            (b"host", host),
            (b"cookie", cookie),
            *[(b"origin", o) for o in origins],
            *(extra or []),
        ]
        communicator = WebsocketCommunicator(application, "/ws/fleet/", headers=headers)
        communicator.scope["scheme"] = scheme
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return bool(connected)

    return asyncio.run(attempt())


def test_the_exact_origin_is_accepted(cookie: bytes) -> None:
    assert connects(cookie, [b"http://testserver"])
    assert connects(cookie, [b"http://TestServer"])  # host names are not case-sensitive
    assert connects(cookie, [b"http://testserver:80"])  # the default port, spelled out
    assert connects(cookie, [b"http://boxyard.example"], host=b"boxyard.example")
    assert connects(cookie, [b"http://testserver:8000"], host=b"testserver:8000")
    assert connects(cookie, [b"https://testserver"], scheme="wss")


REFUSED = {
    "another scheme": b"https://testserver",
    "another port": b"http://testserver:8080",
    "another host": b"http://evil.example",
    "another allowed host": b"http://boxyard.example",
    "a subdomain": b"http://a.testserver",
    "null": b"null",
    "a path after the origin": b"http://testserver/page",
    "user information": b"http://alice@testserver",
    "not a URL": b"testserver",
    "no host": b"http://",
}


@pytest.mark.parametrize("case", REFUSED)
def test_another_origin_is_refused(cookie: bytes, case: str) -> None:
    assert not connects(cookie, [REFUSED[case]]), case


def test_port_and_scheme_are_compared_with_where_the_socket_was_opened(cookie: bytes) -> None:
    assert not connects(cookie, [b"http://testserver"], host=b"testserver:8000")
    assert not connects(cookie, [b"http://testserver:8000"], host=b"testserver:8001")
    assert not connects(cookie, [b"http://testserver"], scheme="wss")  # a page without TLS
    assert not connects(cookie, [b"https://testserver:8000"], host=b"testserver:8000")


def test_no_origin_two_origins_or_a_host_not_served_are_refused(cookie: bytes) -> None:
    assert not connects(cookie, [])
    assert not connects(cookie, [b"http://testserver", b"http://evil.example"])
    assert not connects(cookie, [b"http://elsewhere.example"], host=b"elsewhere.example")


def test_behind_a_proxy_that_ends_tls_the_https_origin_is_the_sites(
    cookie: bytes, settings: Any
) -> None:
    proto = [(b"x-forwarded-proto", b"https")]
    assert not connects(cookie, [b"https://testserver"], extra=proto)  # the proxy is not trusted
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert connects(cookie, [b"https://testserver"], extra=proto)
    assert not connects(cookie, [b"http://testserver"], extra=proto)


def test_an_operators_trusted_origin_is_accepted_exactly(cookie: bytes, settings: Any) -> None:
    """The origins the operator trusts for the dashboard's forms (BOXYARD_CSRF_TRUSTED_ORIGINS,
    for a proxy that changes the Host) are trusted for its websockets too, and only those."""
    settings.CSRF_TRUSTED_ORIGINS = ["https://boxyard.example"]
    assert connects(cookie, [b"https://boxyard.example"])
    assert not connects(cookie, [b"https://boxyard.example:8443"])
    assert not connects(cookie, [b"http://boxyard.example"])
