"""Writing to a running exec's stdin: a background command started with its stdin open
(`ExecRequest.stdin`) reads what is written, in order, and sees its end once closed."""

import base64

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, InvalidInput, NotFound
from sandboxes.guard import acting_on
from sandboxes.models import Exec, ExecState
from sandboxes.services.execs.reading import _live_agent
from sandboxes.services.processes import MAX_STDIN_BYTES

# What the agent says when the exec has no stdin to write to (never opened, closed, or its
# process stopped reading): the caller's mistake, in the agent's own words.
_NO_STDIN = ("no_stdin", "finished")


def write_exec_stdin(
    record: Exec,
    data: bytes,
    actor: Actor,
    *,
    eof: bool = False,
    holder: str | None = None,
    epoch: int | None = None,
) -> None:
    """Write `data` to the exec's stdin; `eof` closes it after them. Writing is activity."""
    if len(data) > MAX_STDIN_BYTES:
        raise InvalidInput("data", N_("at most %(count)s bytes per write", count=MAX_STDIN_BYTES))
    with acting_on(
        record.sandbox, actor, N_("write to a process"), holder=holder, epoch=epoch, activity=True
    ):
        pass  # the lease says whether the caller may; the agent writes
    agent = _live_agent(record)
    if agent is None or record.state != ExecState.RUNNING:
        raise NotFound(N_("process %(name)r is not running in this sandbox", name=str(record.pk)))
    try:
        agent.call("stdin", exec=str(record.pk), data=base64.b64encode(data).decode(), eof=eof)
    except BoxyardError as error:
        if getattr(error, "agent_code", None) in _NO_STDIN:
            raise InvalidInput("stdin", error.message) from error
        raise
