"""Server-sent events: an exec's event stream (`services.exec_events`) as the bytes of a
`text/event-stream` answer. Only the wire format lives here; what the stream holds and where
it ends is the service's."""

import json
from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse

from boxyard.slots import Held


def event_stream(
    events: AsyncIterator[dict[str, Any]], held: Held | None = None
) -> StreamingHttpResponse:
    """The stream's answer; `held` (the pipeline's long call) is given back when it closes."""
    response = StreamingHttpResponse(_encoded(events), content_type="text/event-stream")
    if held is not None:
        # Django calls these when it closes the response, whether or not it was streamed.
        response._resource_closers.append(held.release)  # type: ignore[attr-defined]
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
