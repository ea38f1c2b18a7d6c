"""The dashboard's websockets as a browser reaches them: through the whole ASGI application
(sessions, origin check, routing), with an admin's session cookie."""

import time
from collections.abc import Callable
from typing import Any

from channels.testing import WebsocketCommunicator
from django.test import Client


def websocket(path: str, client: Client | None, **cookies: str) -> WebsocketCommunicator:
    from config.asgi import application

    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if client is not None:
        cookies["sessionid"] = client.cookies["sessionid"].value
    if cookies:
        headers.append(
            (b"cookie", "; ".join(f"{name}={value}" for name, value in cookies.items()).encode())
        )
    return WebsocketCommunicator(application, path, headers=headers)


async def receive_until(
    page: WebsocketCommunicator, wanted: Callable[[str], bool], seconds: float = 10
) -> list[str]:
    """The messages a page gets until one is `wanted` (it last); fails after `seconds`."""
    deadline = time.monotonic() + seconds
    got: list[str] = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"not pushed within {seconds} s; got: {[m[:300] for m in got]}"
        message: Any = await page.receive_from(timeout=left)
        got.append(message)
        if wanted(message):
            return got
