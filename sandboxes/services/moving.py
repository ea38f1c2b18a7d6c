"""Moving a sandbox to another Docker host (a host being drained, or an admin's choice): its
container removed, its workspace carried across as an archive, a new container started
there. The row stays the same sandbox: its id, scope key, lease (holder and epoch), history,
sessions' saved state and files.

    running, stopped, ...  ──begin_move──▶ moving ──(carried)──▶ moved: creating on the new
    host ──▶ running (if it ran before; else stopped there, started by its next open)

While it moves, the sandbox refuses work (409, "moving"); a bot's next open after the move
finds it on its new host. The copy on the old host is removed only once the new one is
whole; if the carrying fails, the move is cancelled: the sandbox is stopped where it was, its
workspace untouched, and what was half written on the other host removed. A move cut short
by a crash is cancelled by the reconciler the same way (a half copy it cannot remove is
reported, never deleted).
"""

import logging
import time
from dataclasses import dataclass

from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, BoxyardError, InvalidInput, InvalidState, NoRoom
from hosts.engines import get_runtime
from hosts.models import DockerHost, HostState
from sandboxes import lifecycle
from sandboxes.guard import acting_on
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.runtime.agent import forget
from sandboxes.services import booting, specs
from sandboxes.services.background import MOVE, MOVE_ALL, later
from sandboxes.services.placing import Load, loads_of, place, refusal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Moved:
    sandbox: Sandbox
    source: str
    target: str
    seconds: float


def move_sandbox(sandbox: Sandbox, target: DockerHost | None, actor: Actor) -> Moved:
    """Move `sandbox` to `target` (None: where placement would put a new one of its pipeline,
    its own host aside). Raises InvalidInput (the target), InvalidState, NoRoom, and the
    engines' errors (the move is then cancelled)."""
    started = time.monotonic()
    with acting_on(
        sandbox, actor, N_("move the sandbox"), states=lifecycle.BEGIN_MOVE.sources,
        hold_lease=False,
    ) as acting:  # fmt: skip
        locked = acting.sandbox
        source = locked.host
        chosen = _target(locked, target)
        was_running = locked.state == State.RUNNING
        stopped_for = locked.stop_reason or StopReason.ADMIN  # a stopped one's own reason
        old_container = locked.container_id
        lifecycle.move(
            locked, lifecycle.BEGIN_MOVE, actor, reason=f"to {chosen.name}",
            detail={"from": source.name, "to": chosen.name},
        )  # fmt: skip
    try:
        _carry(locked, old_container, source, chosen)
    except BoxyardError as error:
        lifecycle.move(locked, lifecycle.CANCEL_MOVE, actor, reason=error.message)
        raise
    with transaction.atomic():
        lifecycle.move(
            locked, lifecycle.MOVED, actor, fields={"host": chosen},
            detail={"from": source.name, "to": chosen.name},
        )  # fmt: skip
    try:  # the new copy is whole and the row points to it: the old one goes
        get_runtime(source.pk).remove_workspace(locked.volume_name)
    except BoxyardError as error:
        log.warning("removing the moved workspace %s from %s: %s", locked.pk, source.name, error)
    if was_running:
        booting.start(locked, actor)
    else:
        stop_where_it_is(locked, actor, stopped_for)
    return Moved(locked, source.name, chosen.name, time.monotonic() - started)


def move_later(sandbox: Sandbox, target: str | None, actor: Actor) -> str:
    """Have a worker of the sandbox's host move it to host `target` (a name; None: where
    placement puts it): checked here first, so that what cannot be done is said now. Returns
    the target's name, or "" for placement's choice."""
    if not lifecycle.allows(sandbox, lifecycle.BEGIN_MOVE):
        raise InvalidState(
            N_("cannot move the sandbox: it is %(state)s", state=sandbox.state),
            state=sandbox.state,
        )
    chosen = None
    if target:
        chosen = DockerHost.objects.filter(name=target).first()
        if chosen is None:
            raise InvalidInput("to", N_("no Docker host named %(host)s", host=target))
        if chosen.pk == sandbox.host_id:
            raise InvalidInput("to", N_("the sandbox is on %(host)s already", host=target))
    later(MOVE, str(sandbox.pk), chosen.pk if chosen else None, str(actor), host=sandbox.host_id)
    return chosen.name if chosen else ""


def move_all_later(host: DockerHost, actor: Actor) -> int:
    """Have a worker of a draining host move all its sandboxes elsewhere; returns how many
    there are to move."""
    if host.state != HostState.DRAINING:
        raise InvalidState(
            N_("drain the Docker host %(host)s before moving all its sandboxes", host=host.name)
        )
    count = lifecycle.allowing(Sandbox.objects.filter(host=host), lifecycle.BEGIN_MOVE).count()
    later(MOVE_ALL, host.pk, str(actor), host=host.pk)
    return count


def move_all(host: DockerHost, actor: Actor) -> list[Moved]:
    """Move every sandbox of a draining host elsewhere, one at a time; a sandbox that cannot
    move now (no room, busy moving or stopping) is left for the next call."""
    if host.state != HostState.DRAINING:
        raise InvalidState(
            N_("drain the Docker host %(host)s before moving all its sandboxes", host=host.name)
        )
    moved = []
    on_host = Sandbox.objects.select_related("pipeline", "host").filter(host=host)
    for sandbox in lifecycle.allowing(on_host, lifecycle.BEGIN_MOVE):
        try:
            moved.append(move_sandbox(sandbox, None, actor))
        except (NoRoom, InvalidState) as error:
            log.info("sandbox %s stays on %s for now: %s", sandbox.pk, host.name, error)
    return moved


def stop_where_it_is(sandbox: Sandbox, actor: Actor, reason: str) -> None:
    """A sandbox that was stopped before its move is stopped on its new host too, for the
    reason it was stopped (the row waits, creating, for no container): its workspace kept."""
    with transaction.atomic():
        lifecycle.move(sandbox, lifecycle.BEGIN_STOP, actor, reason=reason)
        lifecycle.move(sandbox, lifecycle.STOP, actor, reason=reason)


def _target(sandbox: Sandbox, target: DockerHost | None) -> DockerHost:
    if target is None:
        return place(sandbox.pipeline, excluding=sandbox.host_id)
    if target.pk == sandbox.host_id:
        raise InvalidInput("host", N_("the sandbox is on %(host)s already", host=target.name))
    target = DockerHost.objects.select_for_update().get(pk=target.pk)
    load = loads_of([target.pk]).get(target.pk, Load(0, 0.0, 0))
    why = refusal(target, sandbox.pipeline, load)
    if why:
        raise NoRoom(
            N_(
                "the Docker host %(host)s cannot take the sandbox now (%(why)s)",
                host=target.name,
                why=why,
            )
        )
    return target


def _carry(sandbox: Sandbox, container: str, source: DockerHost, target: DockerHost) -> None:
    """The container removed on `source`, the workspace written on `target` (made there with
    the same size and labels); a half-made copy is removed when this fails."""
    there, here = get_runtime(source.pk), get_runtime(target.pk)
    if container:
        forget(container)
        there.remove_container(container)
    size_mb = (
        sandbox.workspace_limit_bytes // (1024 * 1024)
        if sandbox.workspace_limit_bytes
        else sandbox.pipeline.workspace_mb
    )
    labels = specs.workspace_labels(sandbox)
    there.ensure_workspace(sandbox.volume_name, labels, size_mb)  # its disk attached
    here.ensure_workspace(sandbox.volume_name, labels, size_mb)
    try:
        here.write_workspace(
            sandbox.volume_name,
            sandbox.image,
            there.read_workspace(sandbox.volume_name, sandbox.image),
        )
    except BoxyardError:
        try:
            here.remove_workspace(sandbox.volume_name)
        except BoxyardError as error:
            log.warning("removing the half-carried workspace of %s: %s", sandbox.pk, error)
        raise
