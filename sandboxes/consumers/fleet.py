"""The fleet page's websocket: its table's rows change, appear and leave as sandboxes do, and
its counters, totals and charts follow."""

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext, ngettext

from sandboxes import dashboard, fleet, live, metrics
from sandboxes.charts import fleet_charts as charts_for
from sandboxes.consumers.base import DashboardConsumer, shared
from sandboxes.services import pruning


class FleetConsumer(DashboardConsumer):
    """The fleet table of one filter: rows change, appear and leave as sandboxes do.

    Every fleet page of this process hears the same message: the sandbox is read and its row
    rendered once per message and language (`shared`), and each page only decides whether the
    row replaces, joins or leaves its table. The charts, too, are drawn once per sample,
    language and pipeline filter.

    A change that leaves a sandbox's status as it was (a command, a file) is activity: a
    row's last activity and the totals' commands move with it, gathered for ACTIVITY_SECONDS
    so that a burst of commands redraws them once.
    """

    ACTIVITY_SECONDS = 1.0

    def joined_groups(self) -> list[str]:
        return [live.FLEET]

    def first_render(self) -> str:
        query = {
            key: values[-1] for key, values in parse_qs(self.scope["query_string"].decode()).items()
        }
        self.filter = fleet.FleetFilter.from_query(query)
        rows = fleet.fleet_page(self.admin, self.filter).rows
        # The first page in the default order takes new sandboxes at its top; any other
        # page counts them and offers to show them (its rows would move under the reader).
        self.takes_new = self.filter.page == 1 and self.filter.default_order
        self.new = 0
        self.shown = {str(row.pk) for row in rows}
        self.counters = self._counters()
        self.active: set[str] = set()
        self.activity: asyncio.Task[None] | None = None
        self.activity_sent = 0.0
        return (
            self.render("sandboxes/_fleet_rows.html", {"rows": rows})
            + self.render("sandboxes/_fleet_empty.html", {"rows": rows})
            + self.counters
        )

    async def sandbox_changed(self, message: dict[str, Any]) -> None:
        sandbox_id = message["sandbox"]
        if live.STATUS not in message.get("parts", live.PARTS):
            self.active.add(sandbox_id)
            if self.activity is None or self.activity.done():
                self.activity = asyncio.create_task(self.send_activity())
            return
        change = await shared((message, self.language), self.render_change_for_all, sandbox_id)
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
            pager = await database_sync_to_async(self.render_pager)()
            await self.send_html(
                f'<tr id="sandbox-{sandbox_id}" hx-swap-oob="delete"></tr>{empty}{pager}{counters}'
            )
            return
        if sandbox_id in self.shown:
            await self.send_html(change.row + counters)
            return
        if not self.takes_new:
            self.new += 1
            await self.send_html(self.render_new() + counters)
            return
        self.shown.add(sandbox_id)
        inserted = change.row.replace(' hx-swap-oob="true"', "", 1)
        not_empty = change.not_empty if len(self.shown) == 1 else ""
        pager = await database_sync_to_async(self.render_pager)()
        await self.send_html(
            f'<tbody hx-swap-oob="afterbegin:#fleet-rows">{inserted}</tbody>{not_empty}{pager}'
            f"{counters}"
        )

    def render_pager(self) -> str:
        """The pager again, once the page gained or lost a row (its count moved)."""
        page = fleet.fleet_page(self.admin, self.filter)
        return self.render("sandboxes/_fleet_pager.html", {"page": page, "filter": self.filter})

    async def send_activity(self) -> None:
        """The rows shown of the sandboxes active since the last time, the cards and the
        totals, at most once every ACTIVITY_SECONDS (rendered once per period and language for
        every page)."""
        wait = self.activity_sent + self.ACTIVITY_SECONDS - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self.activity_sent = time.monotonic()
        period = {"id": f"activity-{int(self.activity_sent / self.ACTIVITY_SECONDS)}"}
        active, self.active = self.active & self.shown, set()
        html = [
            await shared((period, self.language, sandbox_id), self.render_row, sandbox_id)
            for sandbox_id in sorted(active)
        ]
        counters = await shared((period, self.language), self._counters)
        if counters != self.counters:
            self.counters = counters
            html.append(counters)
        await self.send_html("".join(html))

    def render_row(self, sandbox_id: str) -> str:
        sandbox = dashboard.fleet_row(self.admin, sandbox_id)
        if sandbox is None:
            return ""
        return self.render("sandboxes/_fleet_row.html", {"sandbox": sandbox})

    async def disconnect(self, code: int) -> None:
        if getattr(self, "activity", None) is not None:
            self.activity.cancel()  # type: ignore[union-attr]  # checked just above
        await super().disconnect(code)

    def render_new(self) -> str:
        with translation.override(self.language):
            words = ngettext(
                "%(count)s new sandbox matches this view.",
                "%(count)s new sandboxes match this view.",
                self.new,
            ) % {"count": self.new}
            show = gettext("Show them")
        link = f"?{escape(self.filter.query_string(page=1))}"
        return (
            f'<p id="fleet-new" class="notice" role="status" hx-swap-oob="true">{escape(words)} '
            f'<a href="{link}">{escape(show)}</a></p>'
        )

    def render_change_for_all(self, sandbox_id: str) -> "RenderedChange":
        sandbox = dashboard.fleet_row(self.admin, sandbox_id)
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
        """The cards, the counts by state and the totals since the start, as they are now."""
        counts = fleet.state_counts()
        cards = fleet.fleet_cards(counts)
        summary = self.render("sandboxes/_fleet_counters.html", {"counts": counts, "cards": cards})
        return summary + self._totals()

    async def fleet_sampled(self, message: dict[str, Any]) -> None:
        await self.send_html(
            await shared((message, self.language, self.filter.pipeline), self.render_charts)
        )

    def render_charts(self) -> str:
        """The charts, new with each fleet sample, and the totals."""
        with translation.override(self.language):
            charts = charts_for(self.filter.pipeline)
        return self.render("sandboxes/_charts.html", {"charts": charts}) + self._totals()

    def _totals(self) -> str:
        return self.render(
            "sandboxes/_totals.html",
            {"totals": metrics.snapshot()["overall"], "stored": pruning.stored()},
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
