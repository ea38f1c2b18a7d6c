"""An admin's terminal in a sandbox: a shell on a pseudo-terminal, for whoever holds the lease.

A terminal changes the sandbox as any command does, so it needs the lease (an admin takes the
sandbox over first, and the bot's calls are refused meanwhile). It is recorded like a command
of the admin: an exec row in the sandbox's history, open while the terminal is, closed with
the end of its transcript; opening and closing it are events; typing in it is activity.
"""

from django.db import transaction
from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, ContainerGone, Message
from hosts.engines import runtime_of
from sandboxes import events
from sandboxes.guard import acting_on
from sandboxes.models import Exec, ExecState, Sandbox, State, stored_size
from sandboxes.runtime import AGENT_PATH, ROOT, Terminal
from sandboxes.runtime.port import port_of
from sandboxes.services import booting, containers
from sandboxes.services.execs.ending import end

# The sandbox's own shell: bash where the image has it.
SHELL = ["/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -i; else exec /bin/sh -i; fi"]
MAX_SIZE = 500


def open_terminal(
    sandbox: Sandbox,
    actor: Actor,
    *,
    cols: int | None = 100,
    rows: int | None = 30,
    holder: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[Terminal, Exec]:
    """The terminal and its record, under the lease of `holder` (default: the actor itself,
    an admin who took the sandbox over; a bot's door names the pipeline's holder), with `env`
    on top of the sandbox's. Raises LeaseBusy or TakenOver (take the sandbox over first),
    InvalidState (not running) and the runtime's errors."""
    cols, rows = _size(cols, rows)
    sandbox = booting.current(sandbox, actor)
    holder = holder if holder is not None else str(actor)
    with acting_on(sandbox, actor, N_("open a terminal"), holder=holder) as acting:
        locked, lease = acting.sandbox, acting.lease
        assert lease is not None
        record = Exec.objects.create(
            sandbox=locked,
            session="terminal",
            command="terminal",
            cwd="/workspace",
            env={},
            background=True,
            actor=str(actor),
            holder=lease.holder,
            epoch=lease.epoch,
            timeout_seconds=0,
        )
        events.record(actor, "terminal.opened", sandbox=locked, exec=str(record.pk))
        locked.record_activity(force=True)
    env = {
        "TERM": "xterm-256color",
        "HOME": "/workspace",
        "LANG": "C.UTF-8",
        **(locked.pipeline.env or {}),
        **(env or {}),
    }
    # The agent runs the shell as the sandbox user, and everything it starts ends with it.
    argv, user = [AGENT_PATH, "terminal", str(record.pk), "--", *SHELL], ROOT
    try:
        terminal = runtime_of(locked).open_terminal(
            locked.container_id, argv, env=env, cols=cols, rows=rows, user=user
        )
    except ContainerGone as error:
        _end(record, ExecState.FAILED, b"", None, str(error))
        raise containers.gone(locked, error, actor) from error
    return terminal, record


def close_terminal(
    record: Exec, terminal: Terminal, transcript: bytes, actor: Actor, *, reason: str = ""
) -> None:
    """Record the terminal's end: its exit code and the last of what it showed, and why it
    closed when it was not the admin's doing (`reason`: the lease was lost). Whatever it left
    running ends with it."""
    terminal.close()
    sandbox = Sandbox.objects.get(pk=record.sandbox_id)
    if sandbox.state == State.RUNNING:
        try:
            port_of(sandbox).call("terminal.end", exec=str(record.pk), deadline=10)
        except BoxyardError:
            pass  # the sandbox went away meanwhile, and its processes with it
    _end(record, ExecState.COMPLETED, transcript, terminal.exit_code(), "")
    with transaction.atomic():
        events.record(actor, "terminal.closed", sandbox=sandbox, exec=str(record.pk), reason=reason)


def act_in_terminal(
    sandbox: Sandbox, actor: Actor, operation: Message, *, holder: str | None = None
) -> None:
    """A change through a terminal that is open (typing in it, resizing it, ending it) by
    `actor` as `holder`, who opened it: refused as every change is when the lease is no
    longer theirs (LeaseBusy, TakenOver: an admin took the sandbox over), counted as activity.
    A terminal outlives the lease it was opened under, so each change asks again."""
    with acting_on(sandbox, actor, operation, holder=holder, activity=True):
        pass  # the lease says whether the caller may; the terminal's socket does the rest


def typed(sandbox: Sandbox) -> None:
    """Typing in a terminal of `sandbox` (as the caller's selector found it) is activity,
    stamped at most about once a second."""
    if sandbox.state == State.RUNNING:
        sandbox.record_activity()


def _end(
    record: Exec, state: ExecState, transcript: bytes, exit_code: int | None, error: str
) -> None:
    limit = (
        Sandbox.objects.select_related("pipeline")
        .get(pk=record.sandbox_id)
        .pipeline.output_limit_bytes
    )
    tail = transcript[-limit:]
    stdout = tail.decode("utf-8", errors="replace")
    end(
        record,
        state,
        said=False,
        exit_code=exit_code,
        stdout=stdout,
        output_size=stored_size(stdout, ""),
        stdout_bytes=len(transcript),
        stdout_truncated=len(transcript) > len(tail),
        error=error[:2000],
        duration_ms=int((timezone.now() - record.started_at).total_seconds() * 1000),
    )


def _size(cols: int | None, rows: int | None) -> tuple[int, int]:
    """A terminal's size within 1 to MAX_SIZE, whatever the browser asked (None: the default)."""

    def clamp(value: int | None, default: int) -> int:
        return default if value is None else max(1, min(MAX_SIZE, value))

    return clamp(cols, 100), clamp(rows, 30)
