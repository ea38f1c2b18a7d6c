"""Reset: end every process in a sandbox and start its sessions and managed processes again,
keeping the workspace; for a sandbox that code has jammed (a fork bomb at the pids limit, a
process that ignores every signal, a session wedged by its own command).
"""

import logging
import time
from dataclasses import dataclass

from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, InvalidInput
from hosts.engines import runtime_of
from sandboxes import events
from sandboxes.guard import acting_on
from sandboxes.models import Sandbox
from sandboxes.runtime.port import AgentOutdated, SandboxPort, port_of
from sandboxes.services import booting, processes

log = logging.getLogger(__name__)

MAX_REASON = 200  # what an event's reason holds
# Opening a channel to the agent is an engine exec: at the pids limit there is no room for
# it, so the limit is raised by this much while the channel opens, then put back.
_HEADROOM_PIDS = 64


@dataclass(frozen=True)
class ResetResult:
    sandbox: Sandbox
    killed: int
    duration_ms: int


def reset_sandbox(
    sandbox: Sandbox,
    actor: Actor,
    *,
    reason: str | None = None,
    holder: str | None = None,
    epoch: int | None = None,
    force: bool = False,
) -> ResetResult:
    """Kill every process of the sandbox user in the sandbox, however it hid. Running
    commands end as killed; each session starts a new shell at its next command, with its
    cwd, exported variables and functions; managed processes start again at once. The
    workspace and /tmp are not touched. Works with the sandbox at its pids limit.

    An admin's reset (`force`) needs no lease, as an admin's restart needs none.

    A sandbox still on an older agent is migrated instead (`booting.current`): its new
    container runs nothing of the old one's.

    Raises InvalidState (not running), the lease's errors (LeaseBusy, TakenOver, StaleEpoch)
    and InvalidInput (`reason`).
    """
    why = _clean_reason(reason)
    with acting_on(
        sandbox, actor, N_("reset"), holder=holder, epoch=epoch, hold_lease=not force, activity=True
    ) as acting:
        sandbox = acting.sandbox
        acting_as = acting.lease.holder if acting.lease is not None else str(actor)
    started = time.monotonic()
    try:
        agent = _agent(sandbox)
    except AgentOutdated:  # migrated: its new container runs nothing of the old one's
        sandbox = booting.current(sandbox, actor)
        agent = _agent(sandbox)
    answer = agent.call("reset", deadline=10)
    killed = answer.get("killed")
    if not isinstance(killed, int):
        killed = 0
    try:
        processes.start_declared(sandbox, agent)
    except BoxyardError as error:  # the agent starts them again itself; this is a safety net
        log.warning("starting %s's processes after its reset failed: %s", sandbox.pk, error)
    duration_ms = int((time.monotonic() - started) * 1000)
    with transaction.atomic():
        events.record(
            actor,
            "sandbox.reset",
            sandbox=sandbox,
            reason=why,
            killed=killed,
            holder=acting_as,
            duration_ms=duration_ms,
        )
    return ResetResult(sandbox=sandbox, killed=killed, duration_ms=duration_ms)


def _clean_reason(reason: str | None) -> str:
    """What an event's reason holds: a line of at most MAX_REASON characters, for the API and
    the dashboard alike."""
    if reason is None:
        return ""
    if len(reason) > MAX_REASON or any(ord(ch) < 32 for ch in reason):
        raise InvalidInput(
            "reason", N_("must be at most %(count)s printable characters", count=MAX_REASON)
        )
    return reason.strip()


def _agent(sandbox: Sandbox) -> SandboxPort:
    """The sandbox's port, its channel opened with room made for it if the sandbox is at its
    pids limit (the agent itself needs no new process to kill the others)."""
    try:
        return port_of(sandbox)  # the open channel, or one opened now
    except BoxyardError as error:
        log.info("opening the agent of %s failed (%s); making room to reset it", sandbox.pk, error)
    runtime = runtime_of(sandbox)
    limit = sandbox.pipeline.pids_limit
    runtime.set_pids_limit(sandbox.container_id, limit + _HEADROOM_PIDS)
    try:
        return port_of(sandbox)
    finally:
        runtime.set_pids_limit(sandbox.container_id, limit)
