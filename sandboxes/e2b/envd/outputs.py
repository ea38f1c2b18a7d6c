"""What a process's stream says, for a command and for a pty alike: its pid, its events, and
its end as envd words it."""

from typing import Any
from uuid import UUID

from sandboxes.e2b.envd.connect import Message

_PID_BASE = 1000
_PID_RANGE = 2**31 - _PID_BASE


def pid_of(exec_id: UUID) -> int:
    """The E2B pid of an exec: a number of its id, the same in every web process and after a
    restart, unique in a sandbox for any practical count of processes."""
    return _PID_BASE + exec_id.int % _PID_RANGE


def event(kind: str, body: Message) -> Message:
    """A ProcessEvent: start, data, end or keepalive."""
    return {"event": {kind: body}}


def ended(exit_code: object, said: dict[str, Any]) -> Message:
    """An EndEvent: the exit code and status as envd words them."""
    if said.get("killed"):
        return {"exitCode": -1, "exited": False, "status": "signal: killed"}
    if said.get("timed_out"):
        return {"exitCode": -1, "exited": False, "status": "signal: killed", "error": "timed out"}
    if not isinstance(exit_code, int):
        reason = str(said.get("reason") or "the sandbox's agent went away")
        return {"exitCode": -1, "exited": False, "status": "unknown", "error": reason}
    return {"exitCode": exit_code, "exited": True, "status": f"exit status {exit_code}"}
