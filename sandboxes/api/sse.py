"""Server-sent events: an exec's event stream (`services.exec_events`) as the bytes of a
`text/event-stream` answer. Only the wire format lives here; what the stream holds and where
it ends is the service's."""

import json
from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse


def event_stream(events: AsyncIterator[dict[str, Any]]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_encoded(events), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy must pass each event on as it comes
    return response


async def _encoded(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        kind = event["event"]
        if kind == "keepalive":
            yield b": keep-alive\n\n"  # a comment: clients ignore it, proxies see traffic
        else:
            fields = {name: value for name, value in event.items() if name != "event"}
            data = json.dumps(fields, separators=(",", ":"))
            yield f"event: {kind}\ndata: {data}\n\n".encode()
