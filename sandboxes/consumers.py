"""The dashboard's websockets: a fleet table and a sandbox page that change as the sandboxes do.

A consumer listens to "this sandbox changed" (see `sandboxes.live`), reads the rows again and
sends the same partials a page load renders, marked for htmx to swap in place (its websocket
extension applies `hx-swap-oob` elements as they arrive). Only logged-in staff are let in;
origins are checked by the router (`config.asgi`).
"""

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.html import escape

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from boxyard.web import is_admin, parse_int
from sandboxes import dashboard, live, metrics
from sandboxes.charts import fleet_charts as charts_for
from sandboxes.services import terminal as terminal_service

REFUSED = 4403


class DashboardConsumer(AsyncWebsocketConsumer):
    """Staff only; renders in the admin's language."""

    groups_to_join: list[str] = []

    async def connect(self) -> None:
        if not is_admin(self.scope.get("user")):
            await self.close(code=REFUSED)
            return
        live.serve_from(asyncio.get_running_loop())
        self.language = _language(self.scope)
        self.csrf_token = _csrf_token(self.scope)
        for group in self.joined_groups():
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_html(await database_sync_to_async(self.first_render)())

    async def disconnect(self, code: int) -> None:
        for group in self.joined_groups():
            await self.channel_layer.group_discard(group, self.channel_name)

    async def sandbox_changed(self, message: dict[str, Any]) -> None:
        html = await database_sync_to_async(self.render_change)(message["sandbox"])
        await self.send_html(html)

    async def send_html(self, html: str) -> None:
        if html:
            await self.send(text_data=html)

    def render(self, template: str, context: dict[str, Any]) -> str:
        """A partial as the page renders it: in the admin's language, its forms carrying the
        admin's CSRF token."""
        with translation.override(self.language):
            return render_to_string(
                template, {**context, "oob": True, "csrf_token": self.csrf_token}
            )

    def joined_groups(self) -> list[str]:
        raise NotImplementedError

    def first_render(self) -> str:
        raise NotImplementedError

    def render_change(self, sandbox_id: str) -> str:
        raise NotImplementedError


class FleetConsumer(DashboardConsumer):
    """The fleet table of one filter: rows change, appear and leave as sandboxes do.

    Every fleet page of this process hears the same message: the sandbox is read and its row
    rendered once per message and language (`_shared`), and each page only decides whether the
    row replaces, joins or leaves its table. The charts, too, are drawn once per sample,
    language and pipeline filter.
    """

    def joined_groups(self) -> list[str]:
        return [live.FLEET]

    def first_render(self) -> str:
        query = {
            key: values[-1] for key, values in parse_qs(self.scope["query_string"].decode()).items()
        }
        self.filter = dashboard.FleetFilter.from_query(query)
        rows = dashboard.fleet_rows(self.filter)
        self.shown = {str(row.pk) for row in rows}
        self.counters = self._counters()
        return (
            self.render("sandboxes/_fleet_rows.html", {"rows": rows})
            + self.render("sandboxes/_fleet_empty.html", {"rows": rows})
            + self.counters
        )

    async def sandbox_changed(self, message: dict[str, Any]) -> None:
        sandbox_id = message["sandbox"]
        change = await _shared((message, self.language), self.render_change_for_all, sandbox_id)
        # The counters and totals go only when they moved: most changes (a lease, an activity)
        # move none, and the page then swaps the row alone.
        counters = "" if change.counters == self.counters else change.counters
        self.counters = change.counters
        if change.row is None or not self.filter.matches(change.sandbox):
            if sandbox_id not in self.shown:
                await self.send_html(counters)
                return
            self.shown.discard(sandbox_id)
            empty = "" if self.shown else change.empty
            await self.send_html(
                f'<tr id="sandbox-{sandbox_id}" hx-swap-oob="delete"></tr>{empty}{counters}'
            )
            return
        if sandbox_id in self.shown:
            await self.send_html(change.row + counters)
            return
        self.shown.add(sandbox_id)
        inserted = change.row.replace(' hx-swap-oob="true"', "", 1)
        not_empty = change.not_empty if len(self.shown) == 1 else ""
        await self.send_html(
            f'<tbody hx-swap-oob="afterbegin:#fleet-rows">{inserted}</tbody>{not_empty}{counters}'
        )

    def render_change_for_all(self, sandbox_id: str) -> "RenderedChange":
        sandbox = dashboard.fleet_row(sandbox_id)
        row = (
            self.render("sandboxes/_fleet_row.html", {"sandbox": sandbox})
            if sandbox is not None
            else None
        )
        return RenderedChange(
            sandbox=sandbox,
            row=row,
            counters=self._counters(),
            empty=self.render("sandboxes/_fleet_empty.html", {"rows": []}),
            not_empty=self.render("sandboxes/_fleet_empty.html", {"rows": [sandbox]}),
        )

    def _counters(self) -> str:
        """The counts by state and the totals since the start, as they are after a change."""
        counts = self.render("sandboxes/_fleet_counters.html", {"counts": dashboard.state_counts()})
        return counts + self._totals()

    async def fleet_sampled(self, message: dict[str, Any]) -> None:
        await self.send_html(
            await _shared((message, self.language, self.filter.pipeline), self.render_charts)
        )

    def render_charts(self) -> str:
        """The charts, new with each fleet sample, and the totals."""
        with translation.override(self.language):
            charts = charts_for(self.filter.pipeline)
        return self.render("sandboxes/_charts.html", {"charts": charts}) + self._totals()

    def _totals(self) -> str:
        return self.render(
            "sandboxes/_totals.html", {"totals": metrics.snapshot(write=False)["overall"]}
        )


@dataclass(frozen=True)
class RenderedChange:
    """One sandbox's change as every fleet page in one language shows it (no per-admin part:
    a fleet row holds no form)."""

    sandbox: Any
    row: str | None
    counters: str
    empty: str  # the "No sandboxes." line shown, for a table whose last row left
    not_empty: str  # and hidden, for a table that gets its first row


_rendered: OrderedDict[tuple[Any, ...], asyncio.Future[Any]] = OrderedDict()
_RENDERED_KEPT = 256


async def _shared(key: tuple[Any, ...], render: Callable[..., Any], *args: Any) -> Any:
    """`render(*args)` once for all the pages that ask with the same key, a message (by its
    id) and what else makes the result differ: the first page to ask starts it (a task of its
    own, in a thread, so a page that leaves meanwhile cancels nothing); the others wait for it."""
    message, *rest = key
    key = (message.get("id") or object(), *rest)  # a message without an id is not shared
    task = _rendered.get(key)
    if task is None:
        task = asyncio.ensure_future(database_sync_to_async(render)(*args))
        _rendered[key] = task
        while len(_rendered) > _RENDERED_KEPT:
            _rendered.popitem(last=False)
    return await asyncio.shield(task)


class SandboxConsumer(DashboardConsumer):
    """One sandbox's page: its status, lease, commands and events, and its CPU and memory
    every USAGE_SECONDS while the page is open."""

    USAGE_SECONDS = 2.0

    async def connect(self) -> None:
        await super().connect()
        self.usage_task = asyncio.create_task(self.report_usage())

    async def disconnect(self, code: int) -> None:
        if getattr(self, "usage_task", None) is not None:
            self.usage_task.cancel()
        await super().disconnect(code)

    async def report_usage(self) -> None:
        sandbox_id = str(self.scope["url_route"]["kwargs"]["sandbox_id"])
        previous = None
        while True:
            reading = await database_sync_to_async(dashboard.usage_of)(sandbox_id)
            workspace = await database_sync_to_async(dashboard.workspace_of)(sandbox_id)
            await self.send_html(self.render_usage(reading, previous, workspace))
            previous = reading
            await asyncio.sleep(self.USAGE_SECONDS)

    def render_usage(self, reading: Any, previous: Any, workspace: Any = None) -> str:
        with translation.override(self.language):
            text = dashboard.usage_text(reading, previous, workspace)
        return (
            f'<p id="usage" class="usage" data-testid="usage" hx-swap-oob="true">{escape(text)}</p>'
        )

    def joined_groups(self) -> list[str]:
        return [live.sandbox_group(self.scope["url_route"]["kwargs"]["sandbox_id"])]

    def first_render(self) -> str:
        return self.render_change(str(self.scope["url_route"]["kwargs"]["sandbox_id"]))

    def render_change(self, sandbox_id: str) -> str:
        sandbox = dashboard.fleet_row(sandbox_id)
        if sandbox is None:
            return ""
        context = dashboard.sandbox_page(sandbox)
        return "".join(
            self.render(template, context)
            for template in (
                "sandboxes/_sandbox_status.html",
                "sandboxes/_execs.html",
                "sandboxes/_events.html",
            )
        )


def _csrf_token(scope: Mapping[str, Any]) -> str:
    """A CSRF token for the forms in pushed partials, from the admin's CSRF cookie (masked, as
    a page gets it)."""
    secret = (scope.get("cookies") or {}).get(settings.CSRF_COOKIE_NAME, "")
    if not secret:
        return ""
    request = HttpRequest()
    request.META["CSRF_COOKIE"] = secret
    return get_token(request)


def _language(scope: Mapping[str, Any]) -> str:
    """The language the admin chose (its cookie), else the browser's, else the default."""
    chosen: str = (scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME, "")
    supported = {code for code, _name in settings.LANGUAGES}
    if chosen in supported:
        return chosen
    headers = dict(scope.get("headers") or [])
    accepted: str = headers.get(b"accept-language", b"").decode("latin-1")
    for part in accepted.split(","):
        code = part.split(";")[0].strip().lower()
        if code in supported:
            return code
        if code.split("-")[0] in supported:
            return code.split("-")[0]
    return settings.LANGUAGE_CODE


class TerminalConsumer(AsyncWebsocketConsumer):
    """A terminal in a sandbox for an admin holding its lease.

    The browser sends JSON ({"type": "input", "data": "..."} or {"type": "resize", "cols",
    "rows"}); the terminal's screen comes back as binary frames. The pseudo-terminal's socket is
    read and written on the event loop, so a terminal costs no thread while it is quiet.
    """

    TRANSCRIPT_BYTES = 1024 * 1024
    ACTIVITY_SECONDS = 5.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not is_admin(user):
            await self.close(code=REFUSED)
            return
        self.actor = Actor("admin", user.get_username())
        self.sandbox_id = str(self.scope["url_route"]["kwargs"]["sandbox_id"])
        self.terminal: Any = None
        self.transcript = bytearray()
        self.last_activity = 0.0
        await self.accept()
        query = {
            key: values[-1] for key, values in parse_qs(self.scope["query_string"].decode()).items()
        }
        sandbox = await database_sync_to_async(dashboard.fleet_row)(self.sandbox_id)
        if sandbox is None:
            await self.refuse("no such sandbox")
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
            await self.refuse(error.message)
            return
        self.socket = self.terminal.socket
        self.socket.setblocking(False)
        self.pump = asyncio.create_task(self.relay_screen())

    async def refuse(self, why: str) -> None:
        await self.send(text_data=f"\r\n\x1b[31m{why}\x1b[0m\r\n")
        await self.close(code=REFUSED)

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
            await database_sync_to_async(terminal_service.typed)(self.sandbox_id)

    async def disconnect(self, code: int) -> None:
        if self.terminal is None:
            return
        terminal, self.terminal = self.terminal, None
        if getattr(self, "pump", None) is not None:
            self.pump.cancel()
        await database_sync_to_async(terminal_service.close_terminal)(
            self.record, terminal, bytes(self.transcript), self.actor
        )
