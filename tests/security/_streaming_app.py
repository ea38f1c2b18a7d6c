"""An ASGI application for test_memory, served by the real server (`config.serving`): a 64 MiB
body sent in 64 KiB parts, each starting with the moment it was made (`time.monotonic()`,
shared by every process of the machine)."""

import struct
import time
from typing import Any

PART = 64 * 1024
PARTS = 1024


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(PART * PARTS).encode()),
            ],
        }
    )
    filler = bytes(PART - 8)
    for _ in range(PARTS):
        stamp = struct.pack(">d", time.monotonic())
        await send({"type": "http.response.body", "body": stamp + filler, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
