"""A sandbox's workspace: how big its disk is and how much of it is used; and what its
container uses now."""

from dataclasses import dataclass

from boxyard.errors import BoxyardError
from hosts.engines import runtime_of
from sandboxes.models import Sandbox, State
from sandboxes.runtime import Usage
from sandboxes.runtime.port import port_of


@dataclass(frozen=True)
class WorkspaceUsage:
    """`limit_bytes`: the size of its disk (None: a workspace made before workspaces had
    disks, with no limit); `used_bytes`: what its files take now (None when that cannot be
    asked: the sandbox is not running, or its agent does not answer)."""

    limit_bytes: int | None
    used_bytes: int | None

    @property
    def enforced(self) -> bool:
        return self.limit_bytes is not None


def workspace_usage(sandbox: Sandbox) -> WorkspaceUsage:
    limit = sandbox.workspace_limit_bytes
    used = None
    if limit is not None and sandbox.state == State.RUNNING:
        try:
            answer = port_of(sandbox).call("statfs", deadline=5)
            value = answer.get("used_bytes")
            used = value if isinstance(value, int) and value >= 0 else None
        except BoxyardError:
            used = None
    return WorkspaceUsage(limit_bytes=limit, used_bytes=used)


def container_usage(sandbox: Sandbox) -> Usage | None:
    """The counters of its container now (CPU time, memory); None when it is not running or
    its engine does not answer."""
    if sandbox.state != State.RUNNING or not sandbox.container_id:
        return None
    try:
        return runtime_of(sandbox).usage(sandbox.container_id)
    except BoxyardError:
        return None
