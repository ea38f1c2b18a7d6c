"""Every change of a Docker host's row: added, edited, drained and undrained by an admin,
found down and back by the health check (a host holding sandboxes is not removed: its rows
keep their history). Each records its event; the dashboards hear of it.

A host that comes back is reconciled (its containers and rows brought together) by the
caller of `seen`, the keeper, once the change is committed."""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import N_, InvalidInput, NotFound
from hosts.engines import forget_all
from hosts.models import DockerHost, HostState
from sandboxes import events, live
from sandboxes.runtime import EngineFacts

# A host that no health check has reached for this long is down: with checks every 2 s
# that give up after 2 s, a host that stops answering is marked down within 10 s.
DOWN_AFTER = timedelta(seconds=5)
EDITABLE = ("url", "tls_ca", "tls_cert", "tls_key", "labels", "cpus", "memory_mb", "max_sandboxes")


def add_host(actor: Actor, name: str, **fields: Any) -> DockerHost:
    """A new host (active; placement uses it once a health check has reached it)."""
    _editable(fields)
    host = DockerHost(name=name, **fields)
    _validate(host)
    with transaction.atomic():
        if DockerHost.objects.filter(name=name).exists():
            raise InvalidInput("name", N_("a Docker host named %(host)s exists already", host=name))
        host.save()
        events.record(actor, "host.added", host_id=host.pk, host=name, url=host.url)
    live.hosts_changed()
    return host


def edit_host(host: DockerHost, actor: Actor, **fields: Any) -> DockerHost:
    """Change what an admin may change of a host; the event names the fields that changed
    (the TLS material as `tls`, never its content). Nothing changed: nothing recorded."""
    _editable(fields)
    changed = sorted(
        {
            "tls" if name.startswith("tls_") else name
            for name, value in fields.items()
            if getattr(host, name) != value
        }
    )
    if not changed:
        return host
    for name, value in fields.items():
        setattr(host, name, value)
    _validate(host)
    with transaction.atomic():
        host.save()
        events.record(actor, "host.changed", host_id=host.pk, host=host.name, fields=changed)
    forget_all()  # a new URL or TLS material: engines are made again
    live.hosts_changed()
    return host


def drain(host: DockerHost, actor: Actor) -> DockerHost:
    """No new sandbox goes to the host; those on it stay until moved or closed."""
    return _set_state(host, HostState.DRAINING, actor, "host.draining")


def undrain(host: DockerHost, actor: Actor) -> DockerHost:
    return _set_state(host, HostState.ACTIVE, actor, "host.active")


def seen(host: DockerHost, facts: EngineFacts) -> bool:
    """A health check reached the host: its reading is kept; True if it was down (it is
    back, and its sandboxes are to be reconciled)."""
    now = timezone.now()
    reading = {
        "last_seen_at": now,
        "last_error": "",
        "engine_version": facts.version[:50],
        "engine_cpus": facts.cpus,
        "engine_memory_mb": facts.memory_bytes // (1024 * 1024),
        "images": facts.images,
        "updated_at": now,
    }
    with transaction.atomic():
        back = bool(
            DockerHost.objects.filter(pk=host.pk, down_since__isnull=False).update(
                down_since=None, **reading
            )
        )
        if back:
            events.record(
                SYSTEM, "host.up", host_id=host.pk, host=host.name,
                down_since=host.down_since.isoformat() if host.down_since else None,
            )  # fmt: skip
        else:
            DockerHost.objects.filter(pk=host.pk).update(**reading)
    if back:
        live.hosts_changed()
    return back


def unreachable(host: DockerHost, error: BaseException) -> bool:
    """A health check did not reach the host: down once nothing has reached it for
    DOWN_AFTER. True if this call marked it down."""
    now = timezone.now()
    since = host.last_seen_at or host.created_at
    with transaction.atomic():
        DockerHost.objects.filter(pk=host.pk).update(last_error=str(error)[:500])
        down = now - since >= DOWN_AFTER and bool(
            DockerHost.objects.filter(pk=host.pk, down_since__isnull=True)
            .filter(last_seen_at=host.last_seen_at)  # no other check reached it meanwhile
            .update(down_since=now, updated_at=now)
        )
        if down:
            events.record(
                SYSTEM, "host.down", host_id=host.pk, host=host.name,
                reason=str(error)[:200],
            )  # fmt: skip
    if down:
        live.hosts_changed()
    return down


def find(name: str) -> DockerHost:
    host = DockerHost.objects.filter(name=name).first()
    if host is None:
        raise NotFound(N_("no Docker host named %(host)s", host=name))
    return host


def _set_state(host: DockerHost, state: str, actor: Actor, action: str) -> DockerHost:
    with transaction.atomic():
        if (
            DockerHost.objects.filter(pk=host.pk)
            .exclude(state=state)
            .update(state=state, updated_at=timezone.now())
        ):
            events.record(actor, action, host_id=host.pk, host=host.name)
    host.refresh_from_db()
    live.hosts_changed()
    return host


def _editable(fields: dict[str, Any]) -> None:
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise InvalidInput(
            sorted(unknown)[0],
            N_("not a field of a Docker host (%(fields)s)", fields=", ".join(EDITABLE)),
        )


def _validate(host: DockerHost) -> None:
    from django.core.exceptions import ValidationError

    try:  # a name taken is add_host's to say, in its own words
        host.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as error:
        field, messages = next(iter(error.message_dict.items()))
        raise InvalidInput(field, " ".join(str(message) for message in messages)) from None
