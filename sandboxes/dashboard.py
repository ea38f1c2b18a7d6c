"""What the dashboard shows, as the views and the consumers both need it: one sandbox's page
and its row, one chat's history (the fleet's page is `sandboxes.fleet`). Reads only; every
change goes through the services."""

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from hosts.models import DockerHost, HostState
from sandboxes import lifecycle, live
from sandboxes.models import Event, Exec, Sandbox, State
from sandboxes.runtime import Usage
from sandboxes.runtime.agent import At
from sandboxes.selectors import Principal, find_sandbox, visible_sandboxes
from sandboxes.services.processes import read_processes
from sandboxes.services.sessions import list_sessions
from sandboxes.services.workspaces import WorkspaceUsage, workspace_usage


def fleet_row(admin: Principal, sandbox_id: UUID | str) -> Sandbox | None:
    return find_sandbox(admin, sandbox_id)


def sandbox_page(
    sandbox: Sandbox, admin_name: str, parts: Collection[str] = live.PARTS
) -> dict[str, Any]:
    """What the parts of a sandbox's page show, for the admin looking at it; only the parts
    asked for are read (a push re-renders only what a change touched)."""
    context: dict[str, Any] = {"sandbox": sandbox}
    if live.STATUS in parts:
        context["actions"] = sandbox_actions(sandbox, admin_name)
        holder = sandbox.lease.holder if hasattr(sandbox, "lease") else ""
        context["lease_mine"] = bool(holder) and holder == str(Actor.admin(admin_name))
    if live.EVENTS in parts:
        context["events"] = Event.objects.filter(sandbox=sandbox).order_by("-created_at", "-id")[
            :100
        ]
    if live.EXECS in parts:
        context["execs"] = Exec.objects.filter(sandbox=sandbox).order_by("-started_at")[:50]
    if live.PROCESSES in parts:
        context.update(processes_of(sandbox))
    if live.SESSIONS in parts:
        context["sessions"] = sessions_of(sandbox)
    return context


@dataclass(frozen=True)
class Action:
    """A button of the sandbox page: what it does, whether it applies now (and why not), and
    the question it asks before it acts (empty: it acts at once)."""

    name: str
    label: str
    enabled: bool = True
    reason: str = ""
    confirm: str = ""
    danger: bool = False
    choices: tuple[tuple[str, str], ...] = ()  # a select the form sends as `to`


def sandbox_actions(sandbox: Sandbox, admin_name: str) -> list[Action]:
    """The sandbox page's actions as they apply to this sandbox, for this admin, now."""
    key = sandbox.scope_key
    holder = sandbox.lease.holder if hasattr(sandbox, "lease") else ""
    mine = holder == str(Actor.admin(admin_name))  # how an admin holds a lease
    running = sandbox.state == State.RUNNING
    gone = sandbox.state == State.DESTROYED
    # What the state table allows from this state (the services refuse the rest).
    startable = lifecycle.allows(sandbox, lifecycle.RESTART)
    stoppable = lifecycle.allows(sandbox, lifecycle.BEGIN_STOP)
    stopped = sandbox.state == State.STOPPED  # stopping it again would change nothing
    not_running = _("The sandbox is %(state)s.") % {"state": sandbox.get_state_display()}
    return [
        Action(
            "takeover",
            _("Take over"),
            enabled=not gone and not mine,
            reason=_("You hold its lease already.") if mine else not_running if gone else "",
            confirm=_(
                "Take over %(key)s? Its lease becomes yours: the bot's calls that change it "
                "are refused (423) until you release it."
            )
            % {"key": key},
        ),
        Action(
            "release",
            _("Release"),
            enabled=bool(holder),
            reason="" if holder else _("Nobody holds its lease."),
            confirm=(
                ""
                if mine or not holder
                else _("Release the lease of %(holder)s on %(key)s? Whoever calls next takes it.")
                % {"holder": holder, "key": key}
            ),
        ),
        Action(
            "renew",
            _("Renew"),
            enabled=mine,
            reason="" if mine else _("Only the holder renews a lease: take it over first."),
        ),
        Action(
            "restart",
            _("Restart") if running else _("Start"),
            enabled=startable,
            reason="" if startable else not_running,
            confirm=_(
                "Restart %(key)s? Its processes end and its container starts again; the "
                "workspace stays."
            )
            % {"key": key}
            if running
            else "",
        ),
        Action(
            "reset",
            _("Reset"),
            enabled=running,
            reason="" if running else not_running,
            confirm=_(
                "End every process in %(key)s? Sessions and managed processes start again; "
                "the files stay."
            )
            % {"key": key},
        ),
        Action(
            "stop",
            _("Stop (keep the workspace)"),
            enabled=stoppable and not stopped,
            reason="" if stoppable and not stopped else not_running,
            confirm=_("Stop %(key)s? Its processes end; the workspace is kept.") % {"key": key},
        ),
        _move_action(sandbox),
        Action(
            "destroy",
            _("Destroy"),
            enabled=stoppable,
            reason="" if stoppable else not_running,
            confirm=_(
                "Destroy %(key)s and its workspace? Its files are deleted and cannot be "
                "brought back."
            )
            % {"key": key},
            danger=True,
        ),
    ]


def _move_action(sandbox: Sandbox) -> Action:
    """Moving to another Docker host: where placement puts it, or a host the admin picks."""
    others = [
        name
        for pk, name in DockerHost.objects.filter(
            state=HostState.ACTIVE, down_since__isnull=True
        ).values_list("pk", "name")
        if pk != sandbox.host_id
    ]
    movable = lifecycle.allows(sandbox, lifecycle.BEGIN_MOVE)
    reason = (
        _("The sandbox is %(state)s.") % {"state": sandbox.get_state_display()}
        if not movable
        else _("No other Docker host takes sandboxes now.")
        if not others
        else ""
    )
    return Action(
        "move",
        _("Move to another host"),
        enabled=movable and bool(others),
        reason=reason,
        confirm=_(
            "Move %(key)s to another Docker host? Its container stops, its workspace is "
            "carried across and it starts there; its lease, history and files stay."
        )
        % {"key": sandbox.scope_key},
        choices=(("", _("where there is most room")), *((name, name) for name in others)),
    )


def processes_of(sandbox: Sandbox) -> dict[str, Any]:
    """The Processes panel: the pipeline's managed processes (read, none started) and the
    background commands running."""
    context: dict[str, Any] = {"background": running_background(sandbox), "processes": []}
    try:
        context["processes"] = read_processes(sandbox)
    except BoxyardError as error:
        context["processes_error"] = error.localized()
    return context


def sessions_of(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The shell sessions with their working directories now (none once destroyed)."""
    try:
        return list_sessions(sandbox)
    except BoxyardError:
        return []


def declares_processes(admin: Principal, sandbox_id: UUID | str) -> bool:
    sandbox = visible_sandboxes(admin).select_related("pipeline").filter(pk=sandbox_id).first()
    return sandbox is not None and bool(sandbox.pipeline.processes)


def processes_state(admin: Principal, sandbox_id: UUID | str) -> list[tuple[Any, ...]] | None:
    """What the Processes panel shows of the managed processes, to compare with an earlier
    look (None: it cannot be read now)."""
    sandbox = (
        visible_sandboxes(admin)
        .select_related("pipeline")
        .filter(pk=sandbox_id, state=State.RUNNING)
        .first()
    )
    if sandbox is None:
        return None
    try:
        processes = read_processes(sandbox)
    except BoxyardError:
        return None
    return [
        (p["name"], p["state"], p["generation"], p["restarts"], p["last_exit_code"])
        for p in processes
    ]


def find_sessions(admin: Principal, text: str) -> QuerySet[Sandbox]:
    """The sandboxes `admin` may see whose scope key or chat variables (launcher, sender,
    conversation...) hold `text`, newest first: what did the bot do in this conversation?"""
    visible = visible_sandboxes(admin).select_related("pipeline", "lease")
    sandboxes = visible.order_by("-created_at")
    if not text:
        return sandboxes.none()
    return sandboxes.filter(Q(scope_key__icontains=text) | Q(variables__icontains=text))


def running_background(sandbox: Sandbox) -> list[Exec]:
    return list(
        Exec.objects.filter(sandbox=sandbox, background=True, state="running")
        .exclude(session="terminal")
        .order_by("-started_at")[:20]
    )


def running_container(admin: Principal, sandbox_id: UUID | str) -> At | None:
    """The container of the sandbox, and its host, if it runs."""
    found = (
        visible_sandboxes(admin)
        .filter(pk=sandbox_id, state=State.RUNNING)
        .values_list("container_id", "host_id")
        .first()
    )
    return At(*found) if found is not None and found[0] else None


def workspace_of(admin: Principal, sandbox_id: UUID | str) -> WorkspaceUsage | None:
    """The workspace's size and use now, or None (not running)."""
    sandbox = visible_sandboxes(admin).filter(pk=sandbox_id, state=State.RUNNING).first()
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
