"""Every change of a Docker host's row: added, edited, drained, undrained and removed by an
admin, found down and back by the health check. Each records its event; the dashboards hear
of it.

One engine is one host's: the reconciler removes the containers of this deployment that an
engine has and its host's rows do not claim, so a second host reaching the same engine
(another address of it) would take the first one's containers for leftovers. Each host's
engine identity (`docker info`'s ID and data root: two engines of one machine may share an
ID, which Docker 20.10 derives from the machine's key) is recorded when it is added and at
each health check; an engine that is already another host's is refused when added or edited, and
a host found on one (forced past that) is marked down at once, which the reconciler skips.

A host that comes back is reconciled (its containers and rows brought together) by the
caller of `seen`, the keeper, once the change is committed."""

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from boxyard.actors import SYSTEM, Actor
from boxyard.errors import N_, Conflict, InvalidInput, NotFound
from hosts.engines import forget_all, identify, remove_tls_files
from hosts.models import DEFAULT_NAME, DockerHost, HostState
from sandboxes import events, live
from sandboxes.models import Sandbox, State
from sandboxes.runtime import EngineFacts

# A host that no health check has reached for this long is down: with checks every 2 s
# that give up after 2 s, a host that stops answering is marked down within 10 s.
DOWN_AFTER = timedelta(seconds=5)
EDITABLE = ("url", "tls_ca", "tls_cert", "tls_key", "labels", "cpus", "memory_mb", "max_sandboxes")


def ensure_default_host() -> DockerHost:
    """This machine's engine as the default host, made again if its row is gone (the
    migrations make it; a database emptied since has none). Called where Boxyard starts: the
    server, a worker, the tests' database."""
    host, _created = DockerHost.objects.get_or_create(
        is_default=True, defaults={"name": DEFAULT_NAME}
    )
    return host


def add_host(actor: Actor, name: str, **fields: Any) -> DockerHost:
    """A new host (active; placement uses it once a health check has reached it)."""
    _editable(fields)
    host = DockerHost(name=name, **fields)
    _validate(host)
    if DockerHost.objects.filter(name=name).exists():
        raise InvalidInput("name", N_("a Docker host named %(host)s exists already", host=name))
    try:
        refuse_taken_engine(host)
    except BaseException:
        remove_tls_files(name)  # written to ask its engine: nothing keeps them now
        raise
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
    if "url" in changed or "tls" in changed:  # another engine, perhaps: whose is it?
        try:
            refuse_taken_engine(host)
        finally:
            remove_tls_files(host.name, keep=DockerHost.objects.get(pk=host.pk))
    with transaction.atomic():
        host.save()
        events.record(actor, "host.changed", host_id=host.pk, host=host.name, fields=changed)
    forget_all()  # a new URL or TLS material: engines are made again
    if "tls" in changed:
        remove_tls_files(host.name, keep=host)  # the material it had, gone from the disk too
    live.hosts_changed()
    return host


def remove_host(host: DockerHost, actor: Actor) -> int:
    """Remove a host that holds no sandbox (`local`, this machine's engine, never): its row,
    its TLS files, and its engine from this process. The rows of its destroyed sandboxes are
    kept for their history, under the default host; their count is returned."""
    with transaction.atomic():
        locked = DockerHost.objects.select_for_update().filter(pk=host.pk).first()
        if locked is None:
            raise NotFound(N_("no Docker host named %(host)s", host=host.name))
        refused = removal_refused(locked)
        if refused is not None:
            raise refused
        default = DockerHost.objects.get(is_default=True)
        kept = Sandbox.objects.filter(host=locked).update(host=default)
        events.record(
            actor, "host.removed", host=locked.name, url=locked.url, destroyed_sandboxes=kept
        )
        locked.delete()
    forget_all()
    remove_tls_files(locked.name)
    live.hosts_changed()
    return kept


def removal_refused(host: DockerHost) -> Conflict | None:
    """Why `host` cannot be removed now (None: it can)."""
    if host.is_default:
        return Conflict(
            N_(
                "%(host)s is this machine's engine, where sandboxes go that name no host; it "
                "cannot be removed",
                host=host.name,
            )
        )
    held = host.sandboxes.exclude(state=State.DESTROYED).count()
    if held:
        return Conflict(
            N_(
                "%(host)s cannot be removed while it holds sandboxes (%(count)s, their "
                "workspaces there): move them to another host, or destroy them, first",
                host=host.name,
                count=held,
            )
        )
    return None


def refuse_taken_engine(host: DockerHost) -> EngineFacts | None:
    """Ask the engine at `host`'s address what it is, and refuse it (InvalidInput on `url`)
    if it is another host's engine; its identity is set on `host` (not saved). Hosts whose
    identity is not known yet are asked theirs first. None: it does not answer (the health
    check looks again)."""
    facts = identify(host)
    host.engine_id, host.engine_root = (facts.engine_id, facts.data_root) if facts else ("", "")
    if not host.engine_id:
        return facts
    _identify_others(host)
    owner = engine_owner(host, every=True)
    if owner is not None:
        raise InvalidInput(
            "url",
            N_(
                "the engine at %(url)s is the one of the Docker host %(other)s (engine "
                "%(engine)s): one engine can be one host only, or each would take the other's "
                "sandboxes for leftovers",
                url=host.url or "this machine",
                other=owner.name,
                engine=host.engine_id,
            ),
        )
    return facts


def drain(host: DockerHost, actor: Actor) -> DockerHost:
    """No new sandbox goes to the host; those on it stay until moved or closed."""
    return _set_state(host, HostState.DRAINING, actor, "host.draining")


def undrain(host: DockerHost, actor: Actor) -> DockerHost:
    """The host takes new sandboxes again, unless its engine is another host's."""
    owner = engine_owner(host)
    if owner is not None:
        raise Conflict(
            N_(
                "the engine of %(host)s is the one of the Docker host %(other)s: one engine "
                "can be one host only; give %(host)s the address of its own engine",
                host=host.name,
                other=owner.name,
            )
        )
    return _set_state(host, HostState.ACTIVE, actor, "host.active")


def seen(host: DockerHost, facts: EngineFacts) -> bool:
    """A health check reached the host: its reading is kept; True if it was down (it is
    back, and its sandboxes are to be reconciled). EngineTaken if its engine is another
    host's (see the module): the host is then marked down at once."""
    now = timezone.now()
    if facts.engine_id:
        if (host.engine_id, host.engine_root) != (facts.engine_id, facts.data_root):
            DockerHost.objects.filter(pk=host.pk).update(
                engine_id=facts.engine_id, engine_root=facts.data_root
            )
            host.engine_id, host.engine_root = facts.engine_id, facts.data_root
            if not host.is_default:  # first seen there: compared with every host that answers
                _identify_others(host)
        owner = engine_owner(host)
        if owner is not None:
            error = EngineTaken(
                N_(
                    "its engine (%(engine)s) is the one of the Docker host %(other)s: one "
                    "engine can be one host only",
                    engine=facts.engine_id,
                    other=owner.name,
                )
            )
            _down(host, error, now)
            raise error
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
    if now - since < DOWN_AFTER:
        DockerHost.objects.filter(pk=host.pk).update(last_error=str(error)[:500])
        return False
    return _down(host, error, now)


def _down(host: DockerHost, error: BaseException, now: datetime) -> bool:
    """Mark the host down with `error` (unless another check reached it meanwhile): True if
    this call did."""
    with transaction.atomic():
        DockerHost.objects.filter(pk=host.pk).update(last_error=str(error)[:500])
        down = bool(
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


def _identify_others(host: DockerHost) -> None:
    """Record the identity of the hosts that answer but have none recorded yet (this
    machine's, before its first health check), so that `host` is compared with them."""
    unknown = DockerHost.objects.filter(engine_id="", down_since__isnull=True).filter(
        Q(is_default=True) | Q(last_seen_at__isnull=False)  # that answer (none for long)
    )
    for other in unknown.exclude(pk=host.pk) if host.pk else unknown:
        known = identify(other)
        if known is not None and known.engine_id:
            DockerHost.objects.filter(pk=other.pk).update(
                engine_id=known.engine_id, engine_root=known.data_root
            )


class EngineTaken(Conflict):
    """The engine a host reaches is another host's (see the module)."""

    code = "engine_taken"


def engine_owner(host: DockerHost, *, every: bool = False) -> DockerHost | None:
    """The host that has `host`'s engine before it: the default host, else the one added
    first (`every`: any other host of that engine). None if its engine is its own."""
    if not host.engine_id:
        return None
    others = DockerHost.objects.filter(
        engine_id=host.engine_id, engine_root=host.engine_root
    ).exclude(pk=host.pk)
    if not every and not host.is_default and host.pk is not None:
        others = others.filter(
            Q(is_default=True)
            | Q(created_at__lt=host.created_at)
            | Q(created_at=host.created_at, pk__lt=host.pk)
        )
    elif not every:
        return None  # the default host's engine is its own
    return others.order_by("-is_default", "created_at", "pk").first()


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
