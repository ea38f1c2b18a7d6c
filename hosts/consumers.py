"""The Hosts page's websocket (and one host's page's): re-rendered when a host changes (added,
edited, drained, down or back: `sandboxes.live.HOSTS`) and when the load moves (a sandbox's
state changes: `sandboxes.live.FLEET`), at most once every LOAD_SECONDS for the load, and
every REFRESH_SECONDS while open, so that "last seen" says what the health checks saw.

Pages share renders: a page that heard a change at time t takes any render of its view (its
host, its language) started after t, which read the rows after the change committed; only
when there is none does it start one. So a burst of changes heard by many pages costs a few
renders, and no page keeps a render older than what it heard."""

import asyncio
import time
from collections import OrderedDict
from typing import Any

from channels.db import database_sync_to_async

from hosts import dashboard
from sandboxes import live
from sandboxes.consumers.base import CSRF_MARK, DashboardConsumer

# A render of a view: when it started, and the HTML it gives (with CSRF_MARK for the token).
_renders: OrderedDict[tuple[str, str], tuple[float, "asyncio.Future[str]"]] = OrderedDict()
_RENDERS_KEPT = 256


class HostsConsumer(DashboardConsumer):
    """The Hosts page (no host in the URL), or one host's page: its facts and its events."""

    LOAD_SECONDS = 1.0
    REFRESH_SECONDS = 10.0

    async def connect(self) -> None:
        self.name: str = self.scope["url_route"]["kwargs"].get("name", "")
        self.heard = 0.0  # when the last change of the load was heard
        self.sent_for = 0.0  # and when the one the last push shows was
        self.sent_at = 0.0
        self.shown = 0.0  # when the render shown last started
        self.html = ""  # and what it showed
        self.load: asyncio.Task[None] | None = None
        self.refresh: asyncio.Task[None] | None = None
        await super().connect()
        if self.admitted:
            self.refresh = asyncio.create_task(self.refresh_now_and_then())

    async def disconnect(self, code: int) -> None:
        for task in (self.load, self.refresh):
            if task is not None:
                task.cancel()
        await super().disconnect(code)

    def joined_groups(self) -> list[str]:
        return [live.HOSTS, live.FLEET]

    def first_render(self) -> str:
        self.shown = time.monotonic()
        self.html = self.render_view()
        return self.html

    def render_view(self, csrf_token: str | None = None) -> str:
        if not self.name:
            rows = dashboard.host_rows()
            return self.render("hosts/_hosts.html", {"rows": rows}, csrf_token)
        page = dashboard.host_page(self.name)
        if page is None:
            return ""
        return self.render("hosts/_host_status.html", page, csrf_token) + self.render(
            "hosts/_host_events.html", page, csrf_token
        )

    async def hosts_changed(self, message: dict[str, Any]) -> None:
        await self.send_view(time.monotonic())

    async def sandbox_changed(self, message: dict[str, Any]) -> None:
        """A sandbox's state may move a host's load; its commands and files do not."""
        if live.STATUS not in message.get("parts", live.PARTS):
            return
        self.heard = time.monotonic()
        if self.load is None or self.load.done():
            self.load = asyncio.create_task(self.send_load())

    async def fleet_sampled(self, message: dict[str, Any]) -> None:
        """The fleet's charts: nothing on these pages."""

    async def send_load(self) -> None:
        """The view again, at most once every LOAD_SECONDS, until it shows every change of the
        load heard."""
        while self.heard > self.sent_for:
            wait = self.sent_at + self.LOAD_SECONDS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            heard, self.sent_at = self.heard, time.monotonic()
            await self.send_view(heard)
            self.sent_for = heard

    async def refresh_now_and_then(self) -> None:
        """Any render at most half a period old will do: the health checks' readings."""
        while True:
            await asyncio.sleep(self.REFRESH_SECONDS)
            await self.send_view(time.monotonic() - self.REFRESH_SECONDS / 2)

    async def send_view(self, heard: float) -> None:
        """A render of this view started after `heard`, with this page's CSRF token, unless
        the page shows a later one already, or the same."""
        started, html = await self.render_after(heard)
        html = html.replace(CSRF_MARK, self.csrf_token)
        if started < self.shown or html == self.html:
            return
        self.shown, self.html = started, html
        await self.send_html(html)

    async def render_after(self, heard: float) -> tuple[float, str]:
        key = (self.language, self.name)
        kept = _renders.get(key)
        if kept is None or kept[0] < heard or _failed(kept[1]):
            future = asyncio.ensure_future(database_sync_to_async(self.render_view)(CSRF_MARK))
            kept = _renders[key] = (time.monotonic(), future)
            _renders.move_to_end(key)
            while len(_renders) > _RENDERS_KEPT:
                _renders.popitem(last=False)
        # Shielded: a page that leaves meanwhile cancels nothing the others wait for.
        return kept[0], await asyncio.shield(kept[1])


def _failed(future: "asyncio.Future[str]") -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)
