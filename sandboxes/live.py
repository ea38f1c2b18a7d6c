"""The one publisher of live updates: "this sandbox changed", said after the change commits.

Messages carry ids only, and the parts of a sandbox's page that the change touched (`PARTS`);
whoever listens (the dashboard's consumers) reads the rows again and renders the same partials
a page load renders, those parts alone. Every lifecycle change goes through
`sandboxes.events.record`, which calls `changed` here with the parts its kind of event touches,
so nothing is published twice by hand and nothing that records an event is left out; a
command's start and end, which are no events, are said by the exec service (`command_parts`).

Any thread may publish: from a request, a Celery task or the reconciler. With Redis (the
distributed mode) the message goes to the channel layer from the calling thread; with the
in-memory layer (the embedded mode) it is handed to the server's event loop, the only loop
whose consumers can receive it.
"""

import asyncio
import logging
import threading
import uuid
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from boxyard.threads import waiting

log = logging.getLogger(__name__)

FLEET = "fleet"
HOSTS = "hosts"

# The parts of a sandbox's page, each re-rendered when a change touches it: its status and
# lease (also its fleet row), commands, events, processes (managed and background), shell
# sessions, and the file browser.
STATUS, EXECS, EVENTS, PROCESSES, SESSIONS, FILES = (
    "status",
    "execs",
    "events",
    "processes",
    "sessions",
    "files",
)
PARTS = frozenset({STATUS, EXECS, EVENTS, PROCESSES, SESSIONS, FILES})
# What a command touches: its row when it starts; its row, the session it moved and the
# files it may have written when it ends; and the background commands, if it is one. Not the
# status: a fleet row hears it only as activity, which the fleet page gathers (see consumers).
COMMAND_STARTED = frozenset({EXECS})
COMMAND_ENDED = frozenset({EXECS, SESSIONS, FILES})


def command_parts(*, ended: bool, background: bool) -> frozenset[str]:
    parts = COMMAND_ENDED if ended else COMMAND_STARTED
    return parts | {PROCESSES} if background else parts


_server_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def sandbox_group(sandbox_id: object) -> str:
    return f"sandbox-{sandbox_id}"


def serve_from(loop: asyncio.AbstractEventLoop) -> None:
    """Record the event loop the server's consumers run on (called by each consumer)."""
    global _server_loop
    with _loop_lock:
        _server_loop = loop


def changed(sandbox_id: object, pipeline_id: object = None, parts: Iterable[str] = PARTS) -> None:
    """Say that a sandbox changed, and which parts of its page, once the current transaction
    commits."""
    # The id lets every consumer of a process render one message once (see consumers).
    message = {
        "type": "sandbox.changed",
        "sandbox": str(sandbox_id),
        "pipeline": pipeline_id,
        "parts": sorted(PARTS.intersection(parts)),
        "id": uuid.uuid4().hex,
    }
    transaction.on_commit(lambda: _send([FLEET, sandbox_group(sandbox_id)], message), robust=True)


def hosts_changed() -> None:
    """Say that a Docker host changed (added, edited, drained, down or back), once the
    transaction commits: the Hosts page and the fleet's host filter follow."""
    message = {"type": "hosts.changed", "id": uuid.uuid4().hex}
    transaction.on_commit(lambda: _send([HOSTS], message), robust=True)


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
    with waiting():
        for group in groups:
            async_to_sync(layer.group_send)(group, message)
