"""What the fleet page shows, as its view and its websocket both need it: one page of the
sandboxes that a filter, a search and a sort choose, the cards and counts above them. Reads
only."""

import json
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy

from sandboxes.models import Exec, Sandbox, State
from sandboxes.selectors import Principal, visible_sandboxes

PAGE_SIZE = 50
MAX_PAGE = 100_000

# The columns a page may be sorted by, and the field each sorts on.
SORTS: dict[str, str] = {
    "pipeline": "pipeline__slug",
    "key": "scope_key",
    "state": "state",
    "host": "host__name",
    "holder": "lease__holder",
    "idle": "idle_deadline",
    "ttl": "expires_at",
    "activity": "last_activity_at",
    "created": "created_at",
}
COLUMNS = [  # the table's sortable columns, in order, with their headers
    ("pipeline", gettext_lazy("Pipeline")),
    ("key", gettext_lazy("Scope key")),
    ("state", gettext_lazy("State")),
    ("host", gettext_lazy("Host")),
    ("holder", gettext_lazy("Lease holder")),
    ("idle", gettext_lazy("Idle deadline")),
    ("ttl", gettext_lazy("TTL")),
    ("activity", gettext_lazy("Last activity")),
]
DEFAULT_SORT = "created"
_HEX = frozenset("0123456789abcdef-")


@dataclass(frozen=True)
class FleetFilter:
    """The fleet page's view: a pipeline's slug, a state ("live": all but destroyed), a
    Docker host's name, text searched in the scope key, the lease holder, the chat variables
    and the id's beginning, a sort column and direction, and the page."""

    pipeline: str = ""
    state: str = "live"
    host: str = ""
    text: str = ""
    sort: str = DEFAULT_SORT
    descending: bool = True
    page: int = 1

    @classmethod
    def from_query(cls, query: Any) -> "FleetFilter":
        state = query.get("state", "live") or "live"
        if state != "all" and state != "live" and state not in State.values:
            state = "live"
        sort = query.get("sort") or f"-{DEFAULT_SORT}"
        descending = sort.startswith("-")
        if sort.lstrip("-") not in SORTS:
            sort, descending = DEFAULT_SORT, True
        try:
            page = min(max(int(query.get("page") or 1), 1), MAX_PAGE)
        except ValueError:
            page = 1
        return cls(
            pipeline=(query.get("pipeline") or "")[:50],
            state=state,
            host=(query.get("host") or "")[:50],
            text=(query.get("q") or "").strip()[:200],
            sort=sort.lstrip("-"),
            descending=descending,
            page=page,
        )

    def apply(self, sandboxes: QuerySet[Sandbox]) -> QuerySet[Sandbox]:
        if self.pipeline:
            sandboxes = sandboxes.filter(pipeline__slug=self.pipeline)
        if self.state == "live":
            sandboxes = sandboxes.exclude(state=State.DESTROYED)
        elif self.state != "all":
            sandboxes = sandboxes.filter(state=self.state)
        if self.host:
            sandboxes = sandboxes.filter(host__name=self.host)
        if self.text:
            found = Q(scope_key__icontains=self.text) | Q(lease__holder__icontains=self.text)
            for needle in _json_needles(self.text):
                found |= Q(variables__icontains=needle)
            if self._id_prefix():
                found |= Q(id__istartswith=self.text)
            sandboxes = sandboxes.filter(found)
        return sandboxes

    def ordered(self, sandboxes: QuerySet[Sandbox]) -> QuerySet[Sandbox]:
        """Sorted by the column chosen (empty values last either way), ties by creation."""
        field = F(SORTS[self.sort])
        first = field.desc(nulls_last=True) if self.descending else field.asc(nulls_last=True)
        tie = "-" if self.descending else ""
        return sandboxes.order_by(first, f"{tie}created_at", f"{tie}id")

    def matches(self, sandbox: Sandbox | None) -> bool:
        """`apply` for one sandbox already read with its pipeline, lease and host, without
        asking the database."""
        if sandbox is None:
            return False
        if self.pipeline and sandbox.pipeline.slug != self.pipeline:
            return False
        if self.state == "live" and sandbox.state == State.DESTROYED:
            return False
        if self.state not in ("live", "all") and sandbox.state != self.state:
            return False
        if self.host and sandbox.host.name != self.host:
            return False
        if not self.text:
            return True
        text = self.text.lower()
        holder = sandbox.lease.holder if hasattr(sandbox, "lease") else ""
        return (
            text in sandbox.scope_key.lower()
            or text in holder.lower()
            or any(
                needle.lower() in variables.lower()
                for needle in _json_needles(self.text)
                for variables in _variables_texts(sandbox)
            )
            or (self._id_prefix() and sandbox.pk.hex.startswith(text.replace("-", "")))
        )

    def _id_prefix(self) -> bool:
        return len(self.text) >= 4 and set(self.text.lower()) <= _HEX

    @property
    def default_order(self) -> bool:
        """Newest first: where a new sandbox belongs at the top of the first page."""
        return self.sort == DEFAULT_SORT and self.descending

    def query_string(self, **changes: Any) -> str:
        """This view's query, with `changes` (a sort, a page): what a link to it carries."""
        view = replace(self, **changes)
        query: dict[str, Any] = {
            "pipeline": view.pipeline,
            "state": view.state,
            "host": view.host,
            "q": view.text,
        }
        if not view.default_order:
            query["sort"] = f"{'-' if view.descending else ''}{view.sort}"
        if view.page > 1:
            query["page"] = view.page
        return urlencode({name: value for name, value in query.items() if value})

    def sort_query(self, column: str) -> str:
        """The link of a column's header: sorted by it, or the other way if it is already."""
        if column == self.sort:
            return self.query_string(descending=not self.descending, page=1)
        return self.query_string(sort=column, descending=False, page=1)

    def headers(self) -> list[dict[str, Any]]:
        return [
            {
                "column": column,
                "label": label,
                "query": self.sort_query(column),
                "sorted": (
                    ("descending" if self.descending else "ascending")
                    if column == self.sort
                    else ""
                ),
            }
            for column, label in COLUMNS
        ]


def _json_needles(text: str) -> set[str]:
    """What to look for in chat variables stored as JSON text: the text as typed, and as JSON
    writes it with its non-ASCII letters escaped (as SQLite keeps them; PostgreSQL does not)."""
    return {text, json.dumps(text)[1:-1]}


def _variables_texts(sandbox: Sandbox) -> list[str]:
    """The chat variables as the databases' text search sees them, escaped or not."""
    variables = sandbox.variables or {}
    return [json.dumps(variables), json.dumps(variables, ensure_ascii=False)]


@dataclass(frozen=True)
class FleetPage:
    """One page of the fleet, and the links to its neighbours (empty where there is none)."""

    rows: list[Sandbox]
    number: int
    pages: int
    total: int
    previous_query: str = ""
    next_query: str = ""

    @property
    def first_row(self) -> int:
        return (self.number - 1) * PAGE_SIZE + 1 if self.total else 0

    @property
    def last_row(self) -> int:
        return (self.number - 1) * PAGE_SIZE + len(self.rows)


def fleet_page(admin: Principal, chosen: FleetFilter) -> FleetPage:
    """The page of the sandboxes `admin` may see that the view chooses (the last one, if it
    asks past the end)."""
    sandboxes = chosen.apply(visible_sandboxes(admin))
    total = sandboxes.count()
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(chosen.page, pages)
    start = (number - 1) * PAGE_SIZE
    rows = chosen.ordered(sandboxes.select_related("pipeline", "lease", "host"))
    rows = rows[start : start + PAGE_SIZE]
    return FleetPage(
        rows=list(rows),
        number=number,
        pages=pages,
        total=total,
        previous_query=chosen.query_string(page=number - 1) if number > 1 else "",
        next_query=chosen.query_string(page=number + 1) if number < pages else "",
    )


def state_counts() -> dict[str, int]:
    counts = {state: 0 for state in State.values if state != State.DESTROYED}
    for state, number in (
        Sandbox.objects.exclude(state=State.DESTROYED)
        .values_list("state")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        counts[state] += number
    return counts


def fleet_cards(counts: dict[str, int]) -> list[dict[str, Any]]:
    """The cards above the fleet: running, creating, in error, ready in the warm pools, and
    commands started in the last minute."""
    pool_ready = Sandbox.objects.filter(state=State.RUNNING, pooled=True).count()
    a_minute_ago = timezone.now() - timedelta(minutes=1)
    per_minute = Exec.objects.filter(started_at__gte=a_minute_ago).count()
    return [
        {"name": "running", "label": gettext_lazy("Running"), "value": counts[State.RUNNING]},
        {"name": "creating", "label": gettext_lazy("Creating"), "value": counts[State.CREATING]},
        {
            "name": "errors",
            "label": gettext_lazy("Errors"),
            "value": counts[State.ERROR] + counts[State.UNKNOWN],
        },
        {"name": "pool", "label": gettext_lazy("Pool ready"), "value": pool_ready},
        {"name": "commands", "label": gettext_lazy("Commands a minute"), "value": per_minute},
    ]
