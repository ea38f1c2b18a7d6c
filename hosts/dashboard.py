"""What the dashboard shows of the Docker hosts, as the views and the consumer both need it:
each host with what it holds against what it may hold, and one host's recent events. Reads
only; every change goes through `hosts.services`."""

from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from hosts.models import DockerHost
from sandboxes import lifecycle
from sandboxes.models import Event, Sandbox
from sandboxes.services.placing import Load, loads_of

EVENTS_SHOWN = 50


@dataclass(frozen=True)
class Use:
    """One dimension of a host's use: what its live sandboxes reserve, its capacity (None: no
    limit) and what its engine has (None: not known yet, or not a dimension engines report)."""

    used: float
    capacity: float | None = None
    engine: float | None = None

    @property
    def percent(self) -> int | None:
        """How full, as a whole percent (None without a capacity)."""
        if not self.capacity:
            return None
        return round(100 * self.used / self.capacity)

    @property
    def full(self) -> bool:
        return self.capacity is not None and self.used >= self.capacity


@dataclass(frozen=True)
class HostRow:
    """A host as the Hosts page shows it."""

    host: DockerHost
    load: Load
    movable: int = 0  # its sandboxes the state table lets move now (a draining host's offer)

    @property
    def sandboxes(self) -> Use:
        return Use(self.load.sandboxes, self.host.max_sandboxes)

    @property
    def cpus(self) -> Use:
        return Use(self.load.cpus, self.host.cpus, self.host.engine_cpus)

    @property
    def memory(self) -> Use:
        return Use(self.load.memory_mb, self.host.memory_mb, self.host.engine_memory_mb)

    @property
    def has_tls(self) -> bool:
        return bool(self.host.tls_ca or self.host.tls_cert or self.host.tls_key)

    @property
    def labels(self) -> list[str]:
        return [f"{key}={value}" for key, value in sorted(self.host.labels.items())]


def host_rows() -> list[HostRow]:
    """Every host with its load, by name (three queries, whatever the number of hosts)."""
    return _rows(list(DockerHost.objects.order_by("name")))


def host_row(name: str) -> HostRow | None:
    host = DockerHost.objects.filter(name=name).first()
    return None if host is None else _rows([host])[0]


def _rows(hosts: list[DockerHost]) -> list[HostRow]:
    ids = [host.pk for host in hosts]
    loads, movable = loads_of(ids), movable_of(ids)
    return [
        HostRow(host, loads.get(host.pk, Load(0, 0.0, 0)), movable.get(host.pk, 0))
        for host in hosts
    ]


def movable_of(host_ids: list[int]) -> dict[int, int]:
    """How many sandboxes of each host may be moved now, as the state table says (a stopped
    one may; one being created, stopped or moved may not): one query."""
    on_hosts = Sandbox.objects.filter(host__in=host_ids)
    rows = (
        lifecycle.allowing(on_hosts, lifecycle.BEGIN_MOVE)
        .values("host")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {row["host"]: row["n"] for row in rows}


def host_events(host: DockerHost) -> list[Event]:
    """The host's recent events, newest first: added, changed, drained, down and back."""
    return list(Event.objects.filter(host=host).order_by("-created_at", "-id")[:EVENTS_SHOWN])


def host_page(name: str) -> dict[str, Any] | None:
    """What the parts of a host's page show (None: no such host)."""
    row = host_row(name)
    if row is None:
        return None
    return {"row": row, "host": row.host, "events": host_events(row.host)}


def host_names() -> list[str]:
    """The hosts' names, for the fleet's host filter."""
    return list(DockerHost.objects.order_by("name").values_list("name", flat=True))
