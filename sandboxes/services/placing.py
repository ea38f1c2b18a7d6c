"""Placement: the Docker host a new sandbox goes to.

One decision, made under a lock in the transaction that creates the sandbox's row, so that
concurrent opens never overfill a host: the host rows are locked (SELECT ... FOR UPDATE on
PostgreSQL; SQLite's transactions start IMMEDIATE and so run one at a time), what each holds
is counted, and the row is created before the lock is let go.

A host can take the sandbox when it is active (not draining) and answers (not down), has
every label the pipeline requires, holds the pipeline's image (as its last health check saw;
a host not checked yet is given the benefit of the doubt), and has room: its live sandboxes
below its maximum, and the CPUs and memory its live sandboxes' pipelines reserve, plus this
one's, within its capacity where it sets one. Of those, the least loaded (its fullest
dimension, as a share) takes it. None: `NoRoom`, saying why for every host.
"""

from dataclasses import dataclass

from django.db.models import Count, Sum

from boxyard.errors import N_, NoRoom
from hosts.models import DockerHost, HostState
from pipelines.models import Pipeline
from sandboxes.models import QUOTA_STATES, Sandbox

RETRY_AFTER_SECONDS = 30


@dataclass(frozen=True)
class Load:
    """What a host holds: its live sandboxes and what their pipelines reserve."""

    sandboxes: int
    cpus: float
    memory_mb: int


def place(pipeline: Pipeline, *, excluding: int | None = None) -> DockerHost:
    """The host for a new sandbox of `pipeline` (not host `excluding`: the one a sandbox
    moves from); call inside the transaction that creates or moves it. Raises NoRoom."""
    candidates = DockerHost.objects.select_for_update().order_by("pk")
    if excluding is not None:
        candidates = candidates.exclude(pk=excluding)
    hosts = list(candidates)
    loads = loads_of([host.pk for host in hosts])
    fits: list[tuple[float, str, DockerHost]] = []
    refused: list[str] = []
    for host in hosts:
        why = refusal(host, pipeline, loads.get(host.pk, Load(0, 0.0, 0)))
        if why:
            refused.append(f"{host.name}: {why}")
        else:
            fits.append(
                (share(host, pipeline, loads.get(host.pk, Load(0, 0.0, 0))), host.name, host)
            )
    if not fits:
        raise NoRoom(
            N_(
                "no Docker host can take a sandbox of pipeline %(pipeline)s now (%(why)s)",
                pipeline=pipeline.slug,
                why="; ".join(refused) or "no hosts",
            ),
            retry_after=RETRY_AFTER_SECONDS,
        )
    return min(fits, key=lambda fit: (fit[0], fit[1]))[2]


def loads_of(host_ids: list[int]) -> dict[int, Load]:
    """What each of the hosts holds now (one query)."""
    rows = (
        Sandbox.objects.filter(host__in=host_ids, state__in=QUOTA_STATES)
        .values("host")
        .annotate(count=Count("pk"), cpus=Sum("pipeline__cpus"), memory=Sum("pipeline__memory_mb"))
    )
    return {
        row["host"]: Load(row["count"], float(row["cpus"] or 0), int(row["memory"] or 0))
        for row in rows
    }


def refusal(host: DockerHost, pipeline: Pipeline, load: Load) -> str:
    """Why `host` cannot take a sandbox of `pipeline` now ("" if it can), in English (the
    words go into NoRoom's message whole)."""
    if host.down_since is not None:
        return "down"
    if host.state != HostState.ACTIVE:
        return host.state
    wanted = pipeline.host_labels or {}
    missing = {key: value for key, value in wanted.items() if host.labels.get(key) != value}
    if missing:
        return "lacks the labels " + ", ".join(f"{k}={v}" for k, v in sorted(missing.items()))
    if host.last_seen_at is not None and normalized(pipeline.effective_image) not in {
        normalized(tag) for tag in host.images
    }:
        return f"has no image {pipeline.effective_image}"
    if load.sandboxes + 1 > host.max_sandboxes:
        return f"full ({load.sandboxes} of {host.max_sandboxes} sandboxes)"
    if host.cpus is not None and load.cpus + pipeline.cpus > host.cpus + 1e-9:
        return f"full ({load.cpus:g} of {host.cpus:g} CPUs reserved)"
    if host.memory_mb is not None and load.memory_mb + pipeline.memory_mb > host.memory_mb:
        return f"full ({load.memory_mb} of {host.memory_mb} MiB reserved)"
    return ""


def share(host: DockerHost, pipeline: Pipeline, load: Load) -> float:
    """How full the host would be with one more sandbox of `pipeline`: its fullest dimension."""
    shares = [(load.sandboxes + 1) / host.max_sandboxes]
    if host.cpus:
        shares.append((load.cpus + pipeline.cpus) / host.cpus)
    if host.memory_mb:
        shares.append((load.memory_mb + pipeline.memory_mb) / host.memory_mb)
    return max(shares)


def normalized(image: str) -> str:
    """An image reference as the engine lists it: with its tag (`latest` if none)."""
    name = image.rsplit("/", 1)[-1]
    return image if ":" in name or "@" in name else f"{image}:latest"
