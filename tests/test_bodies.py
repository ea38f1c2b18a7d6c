"""Request bodies read as they arrive (config.bodies): the upload routes' body goes to the view
a part at a time, a few parts ahead at most, and whatever the client does (send everything at
once, stop, go away) the server never holds more than that."""

import asyncio
import threading
from typing import Any

import pytest
from django.core.exceptions import RequestAborted

from config.bodies import PART_BYTES, PARTS_AHEAD, StreamedBody, streams

MESSAGE = 64 * 1024


def test_only_the_upload_routes_stream_their_body() -> None:
    upload = {"method": "PUT", "path": "/api/v1/sandboxes/abc/files/raw"}
    assert streams(upload)
    assert streams({**upload, "path": "/api/v1/sandboxes/abc/files/archive"})
    assert streams({**upload, "path": "/links/a-signed-token"})
    dashboard = {
        "method": "PUT",
        "path": "/sandboxes/0b7e4c1a-5d6f-4e3b-9a2c-1f0e8d7c6b5a/files/upload",
    }
    assert streams(dashboard)
    assert not streams({**dashboard, "method": "POST"})
    assert not streams({**upload, "method": "GET"})
    assert not streams({**upload, "path": "/api/v1/sandboxes/abc/files"})
    assert not streams({**upload, "path": "/api/v1/sandboxes/abc/files/raw/more"})


def run(client: Any, reader: Any) -> Any:
    """The view's side (`reader(body)`, in a thread) against the server's (`client`, feeding
    `receive`), on one event loop; what the reader returned."""

    async def scenario() -> Any:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        taken = [0]

        async def receive() -> dict[str, Any]:
            message = await inbox.get()
            taken[0] += len(message.get("body", b""))
            return message

        body = StreamedBody(receive, asyncio.get_running_loop())
        feeding = asyncio.create_task(client(inbox))
        result = await asyncio.to_thread(reader, body, taken)
        feeding.cancel()
        body.close()
        return result

    return asyncio.run(scenario())


def test_a_client_that_sends_everything_at_once_is_taken_a_few_parts_ahead() -> None:
    total = 64 * 1024 * 1024

    async def client(inbox: asyncio.Queue[dict[str, Any]]) -> None:
        for sent in range(0, total, MESSAGE):
            more = sent + MESSAGE < total
            await inbox.put({"type": "http.request", "body": b"x" * MESSAGE, "more_body": more})

    def reader(body: StreamedBody, taken: list[int]) -> tuple[int, int, int]:
        first = body.read(PART_BYTES)
        stalled = threading.Event()
        stalled.wait(0.5)  # a view busy elsewhere: the body waits
        ahead = taken[0]
        rest = 0
        while data := body.read(PART_BYTES):
            rest += len(data)
        return len(first) + rest, ahead, taken[0]

    got, ahead, taken = run(client, reader)
    assert got == total == taken
    # What the view had not read was taken from the server only a few parts ahead.
    assert ahead <= (PARTS_AHEAD + 2) * PART_BYTES, ahead


def test_a_client_that_goes_away_ends_the_read() -> None:
    async def client(inbox: asyncio.Queue[dict[str, Any]]) -> None:
        await inbox.put({"type": "http.request", "body": b"x" * MESSAGE, "more_body": True})
        await inbox.put({"type": "http.disconnect"})

    def reader(body: StreamedBody, taken: list[int]) -> str:
        with pytest.raises(RequestAborted, match="went away"):
            while body.read(PART_BYTES):
                pass
        return "ended"

    assert run(client, reader) == "ended"


def test_after_the_body_the_rest_of_the_request_is_the_servers() -> None:
    async def scenario() -> list[str]:
        messages = [
            {"type": "http.request", "body": b"abc", "more_body": False},
            {"type": "http.disconnect"},
        ]

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        body = StreamedBody(receive, asyncio.get_running_loop())
        listening = asyncio.create_task(body.after())
        await asyncio.sleep(0)  # the listener's first step has run, to its first wait
        # The disconnect listener waits while the body is read: it took no message.
        assert not listening.done() and len(messages) == 2
        assert await asyncio.to_thread(body.read, -1) == b"abc"
        return [(await listening)["type"]]

    assert asyncio.run(scenario()) == ["http.disconnect"]
