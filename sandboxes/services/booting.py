"""Booting: a sandbox made ready to use. A running one is checked for health first (an
agent or a container that does not answer gets a new container on the same workspace); one
waiting for a container gets it, with the pipeline's managed processes started in it and
this process's channel to its agent opened ahead of the first command."""

from django.db import transaction
from django.db.models import F

from boxyard.actors import Actor
from boxyard.errors import RuntimeFailure
from sandboxes import events, lifecycle, metrics
from sandboxes.models import Sandbox, State
from sandboxes.runtime import agent, runtime_of
from sandboxes.services import containers, processes
from sandboxes.services.background import BOOT, later


def ready(
    sandbox: Sandbox, actor: Actor, *, check_health: bool = True, background: bool = False
) -> Sandbox:
    """The sandbox, running: checked (when it was running already) or given its container;
    with `background`, a worker gives it its container and it is returned `creating`."""
    if check_health and sandbox.state == State.RUNNING and not _answers(sandbox):
        old_container, old_name = sandbox.container_id, sandbox.container_name
        with transaction.atomic():
            restarted = lifecycle.move(
                sandbox, lifecycle.RESTART, actor, reason="health check failed",
                container_id=old_container, fields={"health_failures": F("health_failures") + 1},
            )  # fmt: skip
            if restarted:
                events.record(actor, "sandbox.health_failed", sandbox=sandbox, container=old_name)
        if restarted:
            metrics.count("boxyard_health_check_failures_total", sandbox.pipeline.slug)
            containers.remove_replaced(old_container, sandbox.host_id)
        # else another open restarted it meanwhile: it is read again, and started below if
        # it still waits for its container (starting is idempotent: both converge).
    if sandbox.state not in (State.CREATING, State.UNKNOWN):
        return sandbox
    if background:
        later(BOOT, str(sandbox.pk), sandbox.generation, host=sandbox.host_id)
        return sandbox
    return start(sandbox, actor)


def start(sandbox: Sandbox, actor: Actor, *, ready_agent: bool = True) -> Sandbox:
    """The container, the pipeline's managed processes in it, and (with `ready_agent`) this
    process's channel to its agent opened in the background for the first command."""
    sandbox = containers.provision(sandbox, actor)
    processes.start_after_boot(sandbox)
    if ready_agent and sandbox.state == State.RUNNING and sandbox.agent:
        agent.prepare(sandbox)
    return sandbox


def _answers(sandbox: Sandbox) -> bool:
    """A cheap check: the agent answers on this process's open channel, or else the engine
    says the container runs (an agent killed by the sandbox's own code comes back with the
    next channel; that is no reason for a new container). An unreachable engine is not an
    answer either way: its RuntimeUnavailable goes to the caller."""
    if sandbox.agent and agent.is_open(sandbox.container_id):
        try:
            agent.channel(sandbox).call("ping", deadline=2)
            return True
        except RuntimeFailure:
            pass
    info = runtime_of(sandbox).inspect_container(sandbox.container_id)
    return info is not None and info.running
