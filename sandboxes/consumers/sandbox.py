"""A sandbox's page over its websocket: each change re-renders the parts of the page it
touched (`sandboxes.live.PARTS`) with the partials a page load renders; the CPU, memory and
workspace readings come every USAGE_SECONDS, and the managed processes, which the agent
restarts on its own, are looked at every PROCESSES_SECONDS while the page is open. Every
HOLD_SECONDS the page keeps its admin's lease (`leases.hold`): an open page keeps it alive, and
a takeover past the operator's ceiling ends then (an event, which re-renders the page)."""

import asyncio
import uuid
from collections.abc import Collection
from typing import Any

from channels.db import database_sync_to_async
from django.utils import translation
from django.utils.html import escape

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, NotFound
from sandboxes import dashboard, live
from sandboxes.consumers import usage
from sandboxes.consumers.base import CSRF_MARK, DashboardConsumer, shared
from sandboxes.services import leases

# Which partial shows which part of the page (the files are the browser's to fetch again).
PARTIALS = {
    live.STATUS: "sandboxes/_sandbox_status.html",
    live.EXECS: "sandboxes/_execs.html",
    live.EVENTS: "sandboxes/_events.html",
    live.PROCESSES: "sandboxes/_processes.html",
    live.SESSIONS: "sandboxes/_sessions.html",
}


class SandboxConsumer(DashboardConsumer):
    """One sandbox's page. Changes that come while a render is under way are gathered into
    the next one, so a burst of commands costs a few renders, each of the parts last touched."""

    USAGE_SECONDS = 2.0
    PROCESSES_SECONDS = 0.5
    HOLD_SECONDS = 5.0

    async def connect(self) -> None:
        self.sandbox_id = str(self.scope["url_route"]["kwargs"]["sandbox_id"])
        self.pending: set[str] = set()
        self.latest: str | None = None  # the id of the last change heard
        self.rendering: asyncio.Task[None] | None = None
        self.tasks: list[asyncio.Task[None]] = []
        await super().connect()
        if not self.admitted:
            return
        self.tasks = [
            asyncio.create_task(self.report_usage()),
            asyncio.create_task(self.keep_lease()),
        ]
        if await database_sync_to_async(dashboard.declares_processes)(self.admin, self.sandbox_id):
            self.tasks.append(asyncio.create_task(self.watch_processes()))

    async def disconnect(self, code: int) -> None:
        for task in [*self.tasks, self.rendering]:
            if task is not None:
                task.cancel()
        await super().disconnect(code)

    def joined_groups(self) -> list[str]:
        return [live.sandbox_group(self.sandbox_id)]

    def first_render(self) -> str:
        return self.render_parts(set(PARTIALS))

    async def sandbox_changed(self, message: dict[str, Any]) -> None:
        self.pending.update(message.get("parts", live.PARTS))
        self.latest = message.get("id")
        if self.rendering is None or self.rendering.done():
            self.rendering = asyncio.create_task(self.send_changes())

    async def send_changes(self) -> None:
        """Render what changed; the pages of this sandbox that have heard the same changes
        and show them the same way (language, admin) share one render."""
        while self.pending:
            parts, self.pending = frozenset(self.pending), set()
            key = ({"id": self.latest}, self.sandbox_id, parts, self.language, self.admin_name)
            self.latest = None  # a look of this page's own (processes) is not shared
            html = await shared(key, self.render_parts, parts, CSRF_MARK)
            await self.send_html(html.replace(CSRF_MARK, self.csrf_token))

    def render_parts(self, parts: Collection[str], csrf_token: str | None = None) -> str:
        sandbox = dashboard.fleet_row(self.admin, self.sandbox_id)
        if sandbox is None:
            return ""
        with translation.override(self.language):  # the actions' words, as the page says them
            context = dashboard.sandbox_page(sandbox, self.admin_name, parts)
        html = [
            self.render(PARTIALS[part], context, csrf_token) for part in PARTIALS if part in parts
        ]
        if live.FILES in parts:
            # The file browser fetches what it shows again (see boxyard.js).
            html.append(
                f'<div id="files-stale" hidden hx-swap-oob="true" data-at="{uuid.uuid4().hex}">'
                "</div>"
            )
        return "".join(html)

    async def keep_lease(self) -> None:
        actor = Actor.admin(self.admin_name)
        while True:
            try:
                await database_sync_to_async(self.hold)(actor)
            except BoxyardError:
                pass  # the sandbox is gone: the page says so
            await asyncio.sleep(self.HOLD_SECONDS)

    def hold(self, actor: Actor) -> None:
        """Keep the admin's lease (`leases.hold`) on the sandbox as the selector finds it."""
        sandbox = dashboard.fleet_row(self.admin, self.sandbox_id)
        if sandbox is None:
            raise NotFound(N_("no sandbox %(id)s", id=self.sandbox_id))
        leases.hold(sandbox, actor)

    async def report_usage(self) -> None:
        """The sandbox's CPU, memory and workspace, every USAGE_SECONDS: the CPU and memory
        from the container's reading shared by every page of it (`consumers.usage`)."""
        follower: usage.Follower | None = None
        previous = None
        try:
            while True:
                container = await database_sync_to_async(dashboard.running_container)(
                    self.admin, self.sandbox_id
                )
                if follower is not None and follower.at != container:
                    usage.unwatch(follower)
                    follower, previous = None, None
                if follower is None and container is not None:
                    follower = usage.watch(container)
                reading = follower.latest if follower is not None else None
                # Off the database's thread: the workspace's use is the agent's to say.
                workspace = await database_sync_to_async(
                    dashboard.workspace_of, thread_sensitive=False
                )(self.admin, self.sandbox_id)
                await self.send_html(self.render_usage(reading, previous, workspace))
                previous = reading
                await asyncio.sleep(self.USAGE_SECONDS)
        finally:
            if follower is not None:
                usage.unwatch(follower)

    def render_usage(self, reading: Any, previous: Any, workspace: Any = None) -> str:
        with translation.override(self.language):
            text = dashboard.usage_text(reading, previous, workspace)
        return (
            f'<p id="usage" class="usage" data-testid="usage" hx-swap-oob="true">{escape(text)}</p>'
        )

    async def watch_processes(self) -> None:
        """A managed process that dies and is started again by the agent says nothing: its
        state is read while the page is open, and the panel re-rendered when it moved."""
        seen = None
        while True:
            # In a thread of its own: the database's one thread is the pages' renders'.
            state = await database_sync_to_async(dashboard.processes_state, thread_sensitive=False)(
                self.admin, self.sandbox_id
            )
            if state is not None and seen is not None and state != seen:
                await self.sandbox_changed({"parts": [live.PROCESSES]})
            if state is not None:
                seen = state
            await asyncio.sleep(self.PROCESSES_SECONDS)
