"""A sandbox's workspace: how big its disk is and how much of it is used."""

from dataclasses import dataclass

from boxyard.errors import BoxyardError
from sandboxes.models import Sandbox, State
from sandboxes.runtime.agent import CONTAINED_SINCE_VERSION, channel


@dataclass(frozen=True)
class WorkspaceUsage:
    """`limit_bytes`: the size of its disk (None: a workspace made before workspaces had
    disks, with no limit); `used_bytes`: what its files take now (None when that cannot be
    asked: the sandbox is not running, or its agent is older than this)."""

    limit_bytes: int | None
    used_bytes: int | None

    @property
    def enforced(self) -> bool:
        return self.limit_bytes is not None


def workspace_usage(sandbox: Sandbox) -> WorkspaceUsage:
    limit = sandbox.workspace_limit_bytes
    used = None
    if limit is not None and sandbox.state == State.RUNNING and sandbox.agent:
        try:
            agent = channel(sandbox)
            if agent.version >= CONTAINED_SINCE_VERSION:
                answer = agent.call("statfs", deadline=5)
                value = answer.get("used_bytes")
                used = value if isinstance(value, int) and value >= 0 else None
        except BoxyardError:
            used = None
    return WorkspaceUsage(limit_bytes=limit, used_bytes=used)
