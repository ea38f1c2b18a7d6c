"""Booting: a sandbox made ready to use. A running one is checked for health first (an
agent or a container that does not answer gets a new container on the same workspace); one
waiting for a container gets it, with the pipeline's managed processes started in it and
this process's channel to its agent opened ahead of the first command.

Every sandbox runs the current agent: one started without it, or with an older one
(`runtime.port.outdated`), is migrated when it is next opened or first used (`current`):
restarted with the current agent on the same workspace, as a failed health check is. This is
the one place that reads `Sandbox.agent` to choose what happens; a Boxyard without the agent
binary refuses to start a sandbox at all."""

from typing import Any

from django.db import transaction
from django.db.models import F

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, RuntimeFailure, RuntimeUnavailable
from hosts.engines import runtime_of
from sandboxes import events, lifecycle, metrics
from sandboxes.models import Sandbox, State
from sandboxes.runtime import agent, port
from sandboxes.services import containers, processes
from sandboxes.services.background import BOOT, later


def ready(
    sandbox: Sandbox, actor: Actor, *, check_health: bool = True, background: bool = False
) -> Sandbox:
    """The sandbox, running: checked (when it was running already) or given its container;
    with `background`, a worker gives it its container and it is returned `creating`."""
    if check_health and sandbox.state == State.RUNNING and not _answers(sandbox):
        failed = {"health_failures": F("health_failures") + 1}
        if _restart(sandbox, actor, "health check failed", "sandbox.health_failed", failed):
            metrics.count("boxyard_health_check_failures_total", sandbox.pipeline.slug)
        # else another open restarted it meanwhile: it is read again, and started below if
        # it still waits for its container (starting is idempotent: both converge).
    elif sandbox.state == State.RUNNING and _outdated(sandbox):
        _restart(sandbox, actor, "migrated to the current agent", "sandbox.agent_migrated")
    if sandbox.state not in (State.CREATING, State.UNKNOWN):
        return sandbox
    if background:
        later(BOOT, str(sandbox.pk), sandbox.generation, host=sandbox.host_id)
        return sandbox
    return start(sandbox, actor)


def current(sandbox: Sandbox, actor: Actor) -> Sandbox:
    """The sandbox, running the current agent: a running one without it, or with an older
    one, is migrated first (restarted with it, its workspace kept; the restart is an event,
    `sandbox.agent_migrated`). Any other sandbox is returned as it is."""
    if sandbox.state != State.RUNNING or not _outdated(sandbox):
        return sandbox
    _restart(sandbox, actor, "migrated to the current agent", "sandbox.agent_migrated")
    if sandbox.state in (State.CREATING, State.UNKNOWN):
        return start(sandbox, actor)
    return sandbox


def start(sandbox: Sandbox, actor: Actor, *, ready_agent: bool = True) -> Sandbox:
    """The container, the pipeline's managed processes in it, and (with `ready_agent`) this
    process's channel to its agent opened in the background for the first command. Raises
    RuntimeUnavailable, the row untouched, when this Boxyard has no agent binary (`bin/setup`
    builds it): a sandbox never starts without it."""
    if agent.agent_build() is None:
        raise RuntimeUnavailable(
            N_("the sandbox agent is not installed (BOXYARD_AGENT_BINARY): run bin/setup")
        )
    sandbox = containers.provision(sandbox, actor)
    processes.start_after_boot(sandbox)
    if ready_agent and sandbox.state == State.RUNNING:
        agent.prepare(sandbox)
    return sandbox


def _restart(
    sandbox: Sandbox, actor: Actor, reason: str, event: str, fields: dict[str, Any] | None = None
) -> bool:
    """Give a running sandbox a new container on its workspace (it waits for it in
    `creating`); True when this call made the change."""
    old_container, old_name = sandbox.container_id, sandbox.container_name
    with transaction.atomic():
        restarted = lifecycle.move(
            sandbox, lifecycle.RESTART, actor, reason=reason, container_id=old_container,
            fields=fields,
        )  # fmt: skip
        if restarted:
            events.record(actor, event, sandbox=sandbox, container=old_name)
    if restarted:
        containers.remove_replaced(old_container, sandbox.host_id)
    return restarted


def _outdated(sandbox: Sandbox) -> bool:
    """Whether the sandbox runs without the current agent; an agent that cannot be asked is
    not outdated here (the health check and the caller's own request see to it)."""
    try:
        return port.outdated(sandbox)
    except BoxyardError:
        return False


def _answers(sandbox: Sandbox) -> bool:
    """A cheap check: the agent answers on this process's open channel, or else the engine
    says the container runs (an agent killed by the sandbox's own code comes back with the
    next channel; that is no reason for a new container). An unreachable engine is not an
    answer either way: its RuntimeUnavailable goes to the caller."""
    if agent.is_open(sandbox.container_id):
        try:
            agent.channel(sandbox).call("ping", deadline=2)
            return True
        except RuntimeFailure:
            pass
    info = runtime_of(sandbox).inspect_container(sandbox.container_id)
    return info is not None and info.running
