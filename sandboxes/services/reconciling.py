"""Reconciliation: the rows (what is meant) and the engine's containers (what runs) brought
together, whatever crashed and when.

One pass reads the state of both sides, not the events that led there, so it repairs any
mix of interrupted operations, and running it twice does nothing more. It runs when a worker
starts and periodically after. Anything younger than the grace period is left alone: an
operation may be in flight on it.

| row (generation g) | containers labelled with its id | action |
|---|---|---|
| none, or destroyed | any | remove them |
| of another host | any | kept: that host's (two hosts on one engine) |
| any | one of another generation | remove it (stale) |
| running | g, running | nothing (its id recorded if it differs) |
| running or unknown | g, not running (exited, killed, made but never started) | remove it; the sandbox is stopped, reason `lost` (workspace kept, lease released) |
| running or unknown | none | the sandbox is stopped, reason `lost` |
| unknown | g, running | adopted: running |
| creating (beyond the grace period) | whatever | booted again: the same deterministic name, so it adopts a container made before a crash |
| stopping (beyond the grace period) | whatever | the stop is finished, as it was meant |
| moving (beyond the grace period) | whatever | the move is cancelled: stopped where its workspace is (a copy half made on the other host is reported, kept) |
| stopped or error | g | remove it |

A workspace volume is removed only when its sandbox's row says destroyed: a volume without
any row is reported, never deleted, since it may be someone's data.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from boxyard.actors import SYSTEM
from boxyard.errors import BoxyardError, RuntimeUnavailable
from hosts.engines import get_runtime
from hosts.models import DockerHost
from sandboxes import lifecycle
from sandboxes.models import Sandbox, State
from sandboxes.runtime import (
    LABEL_GENERATION,
    LABEL_ROLE,
    LABEL_SANDBOX,
    ContainerInfo,
    Runtime,
    labels_for,
)
from sandboxes.runtime.agent import forget
from sandboxes.services import containers
from sandboxes.services.booting import start
from sandboxes.services.closing import finish_stop

log = logging.getLogger(__name__)

# A workspace's disk is made a moment before its volume: a disk younger than this is never taken
# for one whose volume is gone, whatever the grace (another deployment on the same engine, or
# a reconcile asked for with none, may be making one right now).
DISK_GRACE_SECONDS = 10.0


@dataclass
class Reconciled:
    """What one pass did, by kind (sandbox ids, or container and volume names)."""

    adopted: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    booted: list[str] = field(default_factory=list)
    stops_finished: list[str] = field(default_factory=list)
    containers_removed: list[str] = field(default_factory=list)
    volumes_removed: list[str] = field(default_factory=list)
    volumes_without_row: list[str] = field(default_factory=list)
    volumes_elsewhere: list[str] = field(default_factory=list)  # of a sandbox on another host
    elsewhere: list[str] = field(default_factory=list)  # containers another host's, kept
    moves_cancelled: list[str] = field(default_factory=list)
    hosts_skipped: list[str] = field(default_factory=list)  # did not answer
    disks_removed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def changed(self) -> bool:
        return any(
            (
                self.adopted,
                self.lost,
                self.booted,
                self.stops_finished,
                self.moves_cancelled,
                self.containers_removed,
                self.volumes_removed,
                self.disks_removed,
            )
        )


def reconcile(grace_seconds: float | None = None, host: int | None = None) -> Reconciled:
    """One pass over every container and live row of this deployment, host by host (or on
    Docker host `host` alone). A host that does not answer is skipped: its rows are left as
    they are until it comes back (a sandbox is never taken for lost because its host is)."""
    grace = timedelta(
        seconds=settings.BOXYARD_RECONCILE_GRACE_SECONDS if grace_seconds is None else grace_seconds
    )
    done = Reconciled()
    hosts = [host] if host is not None else list(DockerHost.objects.values_list("pk", flat=True))
    for host_id in hosts:
        try:
            _reconcile_host(host_id, grace, done)
        except RuntimeUnavailable as error:
            log.warning("reconciling Docker host %s skipped: %s", host_id, error)
            done.hosts_skipped.append(str(host_id))
    return done


def _reconcile_host(host: int, grace: timedelta, done: Reconciled) -> None:
    runtime = get_runtime(host)
    now = timezone.now()
    # Containers first, rows second: a container made between the two reads has a row that
    # is already there, where the other order could see a row's container as missing.
    found = runtime.list_containers(labels_for())
    by_sandbox: dict[str, list[ContainerInfo]] = {}
    leftovers: list[ContainerInfo] = []
    for info in found:
        sandbox_id = info.labels.get(LABEL_SANDBOX, "")
        if not sandbox_id or LABEL_ROLE in info.labels:
            leftovers.append(info)  # a helper (workspace preparation, agent installation)
        else:
            by_sandbox.setdefault(sandbox_id, []).append(info)

    rows = {
        str(row.pk): row
        for row in Sandbox.objects.select_related("pipeline").filter(
            pk__in=[_uuid(key) for key in by_sandbox if _uuid(key)], host=host
        )
    }
    for row in (
        Sandbox.objects.select_related("pipeline")
        .filter(host=host)
        .exclude(state__in=[State.DESTROYED, State.STOPPED])
    ):
        rows.setdefault(str(row.pk), row)

    for sandbox_id, row in rows.items():
        try:
            _reconcile_sandbox(runtime, row, by_sandbox.pop(sandbox_id, []), grace, now, done)
        except BoxyardError as error:
            log.warning("reconciling sandbox %s failed: %s", sandbox_id, error)
            done.failed.append(sandbox_id)
    # Containers of no row on this host. One whose sandbox is another host's is that host's
    # (two hosts that reach one engine, which hosts.services refuses but a row forced past
    # it could still make): never removed from here. Nor a helper, when the engine is shared.
    elsewhere = set(
        Sandbox.objects.filter(pk__in=[_uuid(key) for key in by_sandbox if _uuid(key)])
        .exclude(host=host)
        .values_list("pk", flat=True)
    )
    for sandbox_id, unclaimed in by_sandbox.items():
        if _uuid(sandbox_id) in elsewhere:
            done.elsewhere.extend(info.name for info in unclaimed)
        else:
            leftovers.extend(unclaimed)
    if _shared(host):
        done.elsewhere.extend(info.name for info in leftovers if LABEL_ROLE in info.labels)
        leftovers = [info for info in leftovers if LABEL_ROLE not in info.labels]
    for info in leftovers:
        if _older_than(info.created_at, grace, now):
            try:
                _remove_container(runtime, info, done)
            except BoxyardError as error:
                log.warning("removing container %s failed: %s", info.name, error)
                done.failed.append(info.name)
    _reconcile_volumes(runtime, host, done)
    try:
        done.disks_removed += runtime.remove_orphan_disks(
            max(grace.total_seconds(), DISK_GRACE_SECONDS)
        )
    except BoxyardError as error:
        log.warning("removing workspace disks left behind failed: %s", error)


def _reconcile_sandbox(
    runtime: Runtime,
    row: Sandbox,
    found: list[ContainerInfo],
    grace: timedelta,
    now: datetime,
    done: Reconciled,
) -> None:
    current = [info for info in found if info.labels.get(LABEL_GENERATION) == str(row.generation)]
    for info in found:
        if info not in current and _older_than(info.created_at, grace, now):
            _remove_container(runtime, info, done)  # a stale generation

    settled = _older_than(row.updated_at, grace, now)
    if row.state == State.DESTROYED:
        for info in current:
            _remove_container(runtime, info, done)
    elif row.state == State.CREATING:
        if settled:
            _boot_again(row, done)
    elif row.state == State.STOPPING:
        if settled:
            finish_stop(row, SYSTEM)
            done.stops_finished.append(str(row.pk))
    elif row.state == State.MOVING:
        if settled:  # its mover is gone: the sandbox stays where its workspace is, stopped
            lifecycle.move(row, lifecycle.CANCEL_MOVE, SYSTEM, reason="the move was interrupted")
            done.moves_cancelled.append(str(row.pk))
    elif row.state in (State.STOPPED, State.ERROR):
        for info in current:
            if _older_than(info.created_at, grace, now):
                _remove_container(runtime, info, done)
    else:  # running or unknown
        running = [info for info in current if info.running]
        if running:
            if row.state == State.UNKNOWN or row.container_id != running[0].id:
                _adopt(row, running[0], done)
            for extra in running[1:] + [info for info in current if not info.running]:
                _remove_container(runtime, extra, done)
        elif settled:  # else an open may be making its container right now
            for info in current:
                _remove_container(runtime, info, done)
            _mark_lost(row, done)


def _boot_again(row: Sandbox, done: Reconciled) -> None:
    """A create interrupted by a crash: provisioning is idempotent (the container's name is
    deterministic, so one made before the crash is adopted)."""
    start(row, SYSTEM, ready_agent=False)
    done.booted.append(str(row.pk))


def _adopt(row: Sandbox, info: ContainerInfo, done: Reconciled) -> None:
    fields = {"container_id": info.id, "container_name": info.name}
    if lifecycle.move(row, lifecycle.ADOPT, SYSTEM, fields=fields, detail={"container": info.name}):
        done.adopted.append(str(row.pk))


def _mark_lost(row: Sandbox, done: Reconciled) -> None:
    if containers.mark_lost(row, SYSTEM):
        done.lost.append(str(row.pk))


def _reconcile_volumes(runtime: Runtime, host: int, done: Reconciled) -> None:
    names = [
        name
        for name in runtime.list_volumes(labels_for())
        if name.startswith(lifecycle.VOLUME_PREFIX)
    ]
    ids = {name: _uuid(name.removeprefix(lifecycle.VOLUME_PREFIX)) for name in names}
    rows = {
        pk: (state, on)
        for pk, state, on in Sandbox.objects.filter(
            pk__in=[i for i in ids.values() if i]
        ).values_list("pk", "state", "host_id")
    }
    for name, sandbox_id in ids.items():
        state, on = rows.get(sandbox_id, (None, None)) if sandbox_id else (None, None)
        if state is not None and on != host:
            done.volumes_elsewhere.append(name)  # a copy left by a move: reported, kept
        elif state == State.DESTROYED:
            try:
                runtime.remove_volume(name)
            except BoxyardError as error:  # still in use by a container removed next pass
                log.warning("removing volume %s failed: %s", name, error)
                done.failed.append(name)
                continue
            done.volumes_removed.append(name)
        elif state is None:
            done.volumes_without_row.append(name)


def _remove_container(runtime: Runtime, info: ContainerInfo, done: Reconciled) -> None:
    forget(info.id)
    runtime.remove_container(info.id)
    done.containers_removed.append(info.name)


def _shared(host: int) -> bool:
    """Whether another host is recorded on this host's engine."""
    found = DockerHost.objects.filter(pk=host).values_list("engine_id", "engine_root").first()
    if found is None or not found[0]:
        return False
    engine_id, root = found
    return (
        DockerHost.objects.filter(engine_id=engine_id, engine_root=root).exclude(pk=host).exists()
    )


def _older_than(moment: datetime | None, grace: timedelta, now: datetime) -> bool:
    return moment is None or now - moment >= grace


def _uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None
