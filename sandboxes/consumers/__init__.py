"""The dashboard's websockets: a fleet table and a sandbox page that change as the sandboxes
do, and a terminal.

A consumer listens to "this sandbox changed" (see `sandboxes.live`), reads the rows again and
sends the same partials a page load renders, marked for htmx to swap in place (its websocket
extension applies `hx-swap-oob` elements as they arrive). Only logged-in staff are let in;
origins are checked by the router (`config.asgi`).
"""

from sandboxes.consumers.base import REFUSED
from sandboxes.consumers.fleet import FleetConsumer
from sandboxes.consumers.sandbox import SandboxConsumer
from sandboxes.consumers.terminal import TerminalConsumer

__all__ = ["REFUSED", "FleetConsumer", "SandboxConsumer", "TerminalConsumer"]
