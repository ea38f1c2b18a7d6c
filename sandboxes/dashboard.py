"""What the dashboard shows, as the views and the consumers both need it: the fleet's rows for
a filter, one sandbox's page, one chat's history. Reads only; every change goes through the
services."""

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from boxyard.errors import BoxyardError
from sandboxes.models import Event, Exec, Sandbox, State
from sandboxes.runtime import Usage, get_runtime
from sandboxes.services.workspaces import WorkspaceUsage, workspace_usage

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

    def matches(self, sandbox: Sandbox | None) -> bool:
        """`apply` for one sandbox already read with its pipeline, without asking the database."""
        if sandbox is None:
            return False
        if self.pipeline and sandbox.pipeline.slug != self.pipeline:
            return False
        if self.state == "live" and sandbox.state == State.DESTROYED:
            return False
        if self.state not in ("live", "all") and sandbox.state != self.state:
            return False
        return not self.text or self.text.lower() in sandbox.scope_key.lower()

    def query_string(self) -> str:
        from urllib.parse import urlencode

        return urlencode({"pipeline": self.pipeline, "state": self.state, "q": self.text})


def fleet_rows(chosen: FleetFilter) -> list[Sandbox]:
    sandboxes = Sandbox.objects.select_related("pipeline", "lease").order_by("-created_at")
    return list(chosen.apply(sandboxes)[:FLEET_LIMIT])


def fleet_row(sandbox_id: UUID | str) -> Sandbox | None:
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


def running_background(sandbox: Sandbox) -> list[Exec]:
    return list(
        Exec.objects.filter(sandbox=sandbox, background=True, state="running")
        .exclude(session="terminal")
        .order_by("-started_at")[:20]
    )


def usage_of(sandbox_id: UUID | str) -> Usage | None:
    """The container's CPU and memory counters now, or None (not running, or no engine)."""
    sandbox = (
        Sandbox.objects.filter(pk=sandbox_id, state=State.RUNNING).only("container_id").first()
    )
    if sandbox is None or not sandbox.container_id:
        return None
    try:
        return get_runtime().usage(sandbox.container_id)
    except BoxyardError:
        return None


def workspace_of(sandbox_id: UUID | str) -> WorkspaceUsage | None:
    """The workspace's size and use now, or None (not running)."""
    sandbox = Sandbox.objects.filter(pk=sandbox_id, state=State.RUNNING).first()
    return workspace_usage(sandbox) if sandbox is not None else None


def usage_text(
    reading: Usage | None, previous: Usage | None, workspace: WorkspaceUsage | None = None
) -> str:
    """ "CPU 3.2% · memory 12 MiB of 1024 MiB · workspace 3 MiB of 2048 MiB": the CPU share
    between two readings."""
    if reading is None:
        return ""
    parts = [
        _("memory %(used)s MiB of %(limit)s MiB")
        % {
            "used": round(reading.memory_bytes / 2**20, 1),
            "limit": round(reading.memory_limit_bytes / 2**20),
        }
    ]
    if previous is not None and reading.system_ns > previous.system_ns:
        share = (reading.cpu_ns - previous.cpu_ns) / (reading.system_ns - previous.system_ns)
        parts.insert(
            0,
            _("CPU %(percent)s%%")
            % {"percent": round(max(share, 0) * reading.online_cpus * 100, 1)},
        )
    if workspace is not None and workspace.used_bytes is not None and workspace.limit_bytes:
        parts.append(
            _("workspace %(used)s MiB of %(limit)s MiB")
            % {
                "used": round(workspace.used_bytes / 2**20, 1),
                "limit": round(workspace.limit_bytes / 2**20),
            }
        )
    return " · ".join(parts)
