"""A terminal in a sandbox, over a websocket, for an admin holding its lease."""

import asyncio
import json
import time
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import translation
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, NotFound
from boxyard.web import is_admin, parse_int
from sandboxes import dashboard
from sandboxes.consumers.base import REFUSED, language_of
from sandboxes.selectors import principal_for_user
from sandboxes.services import leases as lease_service
from sandboxes.services import terminal as terminal_service

# The close code of a terminal whose lease was lost (4000-4999: the application's own).
LEASE_LOST = 4423


class TerminalConsumer(AsyncWebsocketConsumer):
    """A terminal in a sandbox for an admin holding its lease.

    The browser sends JSON ({"type": "input", "data": "..."} or {"type": "resize", "cols",
    "rows"}); the terminal's screen comes back as binary frames. The pseudo-terminal's socket is
    read and written on the event loop, so a terminal costs no thread while it is quiet.

    Every HOLD_SECONDS the terminal keeps the admin's lease (`leases.hold`, fenced by the epoch
    it was opened under): a lease that was lost meanwhile (its takeover reached the operator's
    ceiling, another admin took it over, someone released it, the sandbox stopped) closes the
    terminal, saying why.
    """

    TRANSCRIPT_BYTES = 1024 * 1024
    ACTIVITY_SECONDS = 5.0
    HOLD_SECONDS = 5.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not is_admin(user):
            await self.close(code=REFUSED)
            return
        self.actor = Actor.admin(user)
        admin = principal_for_user(user)
        assert admin is not None  # is_admin let only an admin in
        self.admin = admin  # whose sandboxes the terminal may fetch (the selector's)
        self.language = language_of(self.scope)
        self.sandbox_id = str(self.scope["url_route"]["kwargs"]["sandbox_id"])
        self.terminal: Any = None
        self.holding: asyncio.Task[None] | None = None
        self.lost: BoxyardError | None = None
        self.transcript = bytearray()
        self.last_activity = 0.0
        await self.accept()
        query = {
            key: values[-1] for key, values in parse_qs(self.scope["query_string"].decode()).items()
        }
        sandbox = await database_sync_to_async(dashboard.fleet_row)(self.admin, self.sandbox_id)
        if sandbox is None:
            await self.refuse(_("No such sandbox."))
            return
        try:
            self.terminal, self.record = await database_sync_to_async(
                terminal_service.open_terminal
            )(
                sandbox,
                self.actor,
                cols=parse_int(query.get("cols")),
                rows=parse_int(query.get("rows")),
            )
        except BoxyardError as error:
            await self.refuse(error)
            return
        self.socket = self.terminal.socket
        self.socket.setblocking(False)
        self.pump = asyncio.create_task(self.relay_screen())
        self.holding = asyncio.create_task(self.keep_lease())

    async def refuse(self, why: BoxyardError | Promise) -> None:
        """Say why on the terminal's screen, in the admin's language, and close."""
        with translation.override(self.language):
            text = why.localized() if isinstance(why, BoxyardError) else str(why)
        await self.send(text_data=f"\r\n\x1b[31m{text}\x1b[0m\r\n")
        await self.close(code=REFUSED)

    def hold(self) -> None:
        """Keep the admin's lease under the terminal's epoch (`leases.hold`), on the sandbox
        as the selector finds it."""
        sandbox = dashboard.fleet_row(self.admin, self.sandbox_id)
        if sandbox is None:
            raise NotFound(N_("no sandbox %(id)s", id=self.sandbox_id))
        lease_service.hold(sandbox, self.actor, epoch=self.record.epoch)

    async def keep_lease(self) -> None:
        """Keep the lease while the terminal is open; close it, saying why, once it is lost."""
        while True:
            await asyncio.sleep(self.HOLD_SECONDS)
            try:
                await database_sync_to_async(self.hold)()
            except BoxyardError as error:
                self.lost = error
                with translation.override(self.language):
                    text = _("The lease is lost (%(why)s): the terminal is closed.") % {
                        "why": error.localized()
                    }
                await self.send(text_data=f"\r\n\x1b[31m{text}\x1b[0m\r\n")
                await self.close(code=LEASE_LOST)
                await self.disconnect(LEASE_LOST)
                return

    async def relay_screen(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(self.socket, 65536)
                if not data:
                    break
                self.transcript += data
                del self.transcript[: max(0, len(self.transcript) - self.TRANSCRIPT_BYTES)]
                await self.send(bytes_data=data)
        except OSError:
            pass
        await self.close()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.terminal is None:
            return
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("type") == "input" and isinstance(message.get("data"), str):
            await asyncio.get_running_loop().sock_sendall(self.socket, message["data"].encode())
            await self.note_activity()
        elif message.get("type") == "resize":
            cols, rows = parse_int(message.get("cols")), parse_int(message.get("rows"))
            if cols and rows:
                await asyncio.get_running_loop().run_in_executor(
                    None, self.terminal.resize, min(cols, 500), min(rows, 500)
                )

    async def note_activity(self) -> None:
        now = time.monotonic()
        if now - self.last_activity >= self.ACTIVITY_SECONDS:
            self.last_activity = now
            await database_sync_to_async(self.typed)()

    def typed(self) -> None:
        """Typing is activity, on the sandbox as the selector finds it (gone: nothing)."""
        sandbox = dashboard.fleet_row(self.admin, self.sandbox_id)
        if sandbox is not None:
            terminal_service.typed(sandbox)

    async def disconnect(self, code: int) -> None:
        if self.terminal is None:
            return
        terminal, self.terminal = self.terminal, None
        if getattr(self, "pump", None) is not None:
            self.pump.cancel()
        if self.holding is not None and self.holding is not asyncio.current_task():
            self.holding.cancel()
        lost = self.lost
        await database_sync_to_async(terminal_service.close_terminal)(
            self.record,
            terminal,
            bytes(self.transcript),
            self.actor,
            reason=f"the lease is lost: {lost.message}" if lost is not None else "",
        )
