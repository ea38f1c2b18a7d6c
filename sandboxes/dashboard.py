"""What the dashboard shows, as the views and the consumers both need it: the fleet's rows for
a filter, one sandbox's page, one chat's history. Reads only; every change goes through the
services."""

from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from sandboxes.models import Event, Exec, Sandbox, State

FLEET_LIMIT = 500


@dataclass(frozen=True)
class FleetFilter:
    """The fleet page's filter: a pipeline's slug, a state ("live": all but destroyed), and
    text found in the scope key."""

    pipeline: str = ""
    state: str = "live"
    text: str = ""

    @classmethod
    def from_query(cls, query: Any) -> "FleetFilter":
        state = query.get("state", "live") or "live"
        if state != "all" and state != "live" and state not in State.values:
            state = "live"
        return cls(
            pipeline=(query.get("pipeline") or "")[:50],
            state=state,
            text=(query.get("q") or "")[:200],
        )

    def apply(self, sandboxes: QuerySet[Sandbox]) -> QuerySet[Sandbox]:
        if self.pipeline:
            sandboxes = sandboxes.filter(pipeline__slug=self.pipeline)
        if self.state == "live":
            sandboxes = sandboxes.exclude(state=State.DESTROYED)
        elif self.state != "all":
            sandboxes = sandboxes.filter(state=self.state)
        if self.text:
            sandboxes = sandboxes.filter(scope_key__icontains=self.text)
        return sandboxes

    def matches(self, sandbox: Sandbox) -> bool:
        return self.apply(Sandbox.objects.filter(pk=sandbox.pk)).exists()

    def query_string(self) -> str:
        from urllib.parse import urlencode

        return urlencode({"pipeline": self.pipeline, "state": self.state, "q": self.text})


def fleet_rows(chosen: FleetFilter) -> list[Sandbox]:
    sandboxes = Sandbox.objects.select_related("pipeline", "lease").order_by("-created_at")
    return list(chosen.apply(sandboxes)[:FLEET_LIMIT])


def fleet_row(sandbox_id: object) -> Sandbox | None:
    return Sandbox.objects.select_related("pipeline", "lease").filter(pk=sandbox_id).first()


def state_counts() -> dict[str, int]:
    counts = {state: 0 for state in State.values if state != State.DESTROYED}
    for state in Sandbox.objects.exclude(state=State.DESTROYED).values_list("state", flat=True):
        counts[state] += 1
    return counts


def sandbox_page(sandbox: Sandbox) -> dict[str, Any]:
    return {
        "sandbox": sandbox,
        "events": Event.objects.filter(sandbox=sandbox).order_by("-created_at", "-id")[:100],
        "execs": Exec.objects.filter(sandbox=sandbox).order_by("-started_at")[:50],
    }


def find_sessions(text: str) -> QuerySet[Sandbox]:
    """Sandboxes whose scope key or chat variables (launcher, sender, conversation...) hold
    `text`, newest first: what did the bot do in this conversation?"""
    sandboxes = Sandbox.objects.select_related("pipeline", "lease").order_by("-created_at")
    if not text:
        return sandboxes.none()
    return sandboxes.filter(Q(scope_key__icontains=text) | Q(variables__icontains=text))
