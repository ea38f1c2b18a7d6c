"""The one publisher of live updates: "this sandbox changed", said after the change commits.

Messages carry ids only; whoever listens (the dashboard's consumers) reads the rows again and
renders the same partial a page load renders. Every lifecycle change goes through
`sandboxes.services.events.record`, which calls `changed` here, so nothing is published twice
by hand and nothing that records an event is left out.

Any thread may publish: from a request, a Celery task or the reconciler. With Redis (the
distributed mode) the message goes to the channel layer from the calling thread; with the
in-memory layer (the embedded mode) it is handed to the server's event loop, the only loop
whose consumers can receive it.
"""

import asyncio
import logging
import threading
import uuid
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

FLEET = "fleet"

_server_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def sandbox_group(sandbox_id: object) -> str:
    return f"sandbox-{sandbox_id}"


def serve_from(loop: asyncio.AbstractEventLoop) -> None:
    """Record the event loop the server's consumers run on (called by each consumer)."""
    global _server_loop
    with _loop_lock:
        _server_loop = loop


def changed(sandbox_id: object, pipeline_id: object = None) -> None:
    """Say that a sandbox changed, once the current transaction commits."""
    # The id lets every consumer of a process render one message once (see consumers).
    message = {
        "type": "sandbox.changed",
        "sandbox": str(sandbox_id),
        "pipeline": pipeline_id,
        "id": uuid.uuid4().hex,
    }
    transaction.on_commit(lambda: _send([FLEET, sandbox_group(sandbox_id)], message), robust=True)


def sampled() -> None:
    """Say that a new fleet sample was taken (the charts), once the transaction commits."""
    message = {"type": "fleet.sampled", "id": uuid.uuid4().hex}
    transaction.on_commit(lambda: _send([FLEET], message), robust=True)


def _send(groups: list[str], message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if isinstance(layer, InMemoryChannelLayer):
        loop = _server_loop
        if loop is None or loop.is_closed():
            return  # no consumer has ever listened in this process
        for group in groups:
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop)
        return
    for group in groups:
        async_to_sync(layer.group_send)(group, message)
