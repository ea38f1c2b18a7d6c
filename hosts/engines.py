"""The engine of a sandbox or of a Docker host: the one service that says which runtime
serves a host (`get_runtime(host)`, `runtime_of(sandbox)`). The runtime below knows engines and
containers, never the hosts' rows: this module reads them, and installs `get_runtime` in the
runtime (`sandboxes.runtime.serve_engines`, when Django starts) for the runtime's own needs.
`sandboxes.runtime.set_runtime` swaps every host's engine for one (tests).

One `DockerRuntime` per host in this process (its connection pool, the agent channels opened
through it), made on first use and kept while the host's connection settings stay as they are.

A host's row is read again at most every REFRESH_SECONDS, so a host marked down by another
process (the health check of whichever worker saw it first) is refused here within that time,
at once and without waiting on the engine: `HostUnavailable`, with a Retry-After.

TLS material is kept in the database (the admin pastes it) and written, readable by this
user alone, under the data directory, since docker-py reads it from files.
"""

import hashlib
import os
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Protocol

from django.conf import settings

from boxyard.errors import N_, BoxyardError, HostUnavailable, NotFound
from hosts.models import DockerHost
from sandboxes.runtime import EngineFacts, Runtime, swapped
from sandboxes.runtime.docker import DockerRuntime
from sandboxes.runtime.docker.connection import Connection

REFRESH_SECONDS = 2.0
# What a sandbox of a host that is down is told to wait before trying again.
RETRY_AFTER_SECONDS = 10


@dataclass
class _Known:
    name: str
    key: tuple[str, ...]  # what the runtime was made from: a change makes a new one
    down_since: datetime | None
    read_at: float
    runtime: DockerRuntime


_known: dict[int, _Known] = {}
_lock = threading.Lock()


class OnHost(Protocol):
    """Anything on a Docker host: a sandbox (its `host_id`)."""

    @property
    def host_id(self) -> int | None: ...


def get_runtime(host: int | None = None) -> Runtime:
    """The engine of the Docker host `host` (its id), or this machine's (None). Raises
    HostUnavailable when the host is marked down."""
    runtime = swapped()
    if runtime is not None:
        return runtime
    return machine_runtime() if host is None else runtime_for(host)


def runtime_of(placed: OnHost) -> Runtime:
    """The engine of the host a sandbox is on."""
    return get_runtime(placed.host_id)


@cache
def machine_runtime() -> DockerRuntime:
    """This machine's engine, as BOXYARD_DOCKER_HOST (or DOCKER_HOST) says: the default
    Docker host's, and the one image builds without a host go to."""
    return DockerRuntime(base_url=settings.BOXYARD_DOCKER_HOST or None)


def runtime_for(host_id: int) -> DockerRuntime:
    """The engine of host `host_id`; HostUnavailable if the host is marked down."""
    known = _known.get(host_id)
    if known is None or time.monotonic() - known.read_at > REFRESH_SECONDS:
        known = _read(host_id)
    if known.down_since is not None:
        raise HostUnavailable(
            N_(
                "the Docker host %(host)s is down (not answering since %(since)s); its "
                "sandboxes come back with it",
                host=known.name,
                since=known.down_since.isoformat(timespec="seconds"),
            ),
            retry_after=RETRY_AFTER_SECONDS,
            host=known.name,
        )
    return known.runtime


def engine_of(host: DockerHost) -> DockerRuntime:
    """The engine of `host` whether it is up or not (the health check, an admin's check)."""
    return _remember(host).runtime


def identify(host: DockerHost, timeout: float = 2.0) -> EngineFacts | None:
    """What the engine at `host`'s address (saved or not) says it is, within `timeout`;
    None if it does not answer. A runtime of its own, kept by no one."""
    try:
        return _make(host).engine_facts(timeout)
    except BoxyardError:
        return None


def remove_tls_files(name: str, keep: DockerHost | None = None) -> list[str]:
    """Remove the TLS files written for host `name` (but those of `keep`'s current material):
    the folders removed."""
    base = Path(settings.DATA_DIR) / "hosts"
    kept = _tls_folder(keep).name if keep is not None and keep.tls_cert else None
    removed = []
    for folder in base.glob(f"{name}-*") if base.is_dir() else []:
        if folder.name != kept and folder.name.rpartition("-")[0] == name:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def forget_all() -> None:
    """Drop every engine this process knows (tests that change hosts under it)."""
    with _lock:
        _known.clear()


def _read(host_id: int) -> _Known:
    host = DockerHost.objects.filter(pk=host_id).first()
    if host is None:
        raise NotFound(N_("no Docker host %(host)s", host=host_id))
    return _remember(host)


def _remember(host: DockerHost) -> _Known:
    key = (host.url, host.tls_ca, host.tls_cert, host.tls_key, str(host.is_default))
    with _lock:
        known = _known.get(host.pk)
        if known is None or known.key != key:
            known = _Known(host.name, key, host.down_since, 0.0, _make(host))
            _known[host.pk] = known
        known.name = host.name
        known.down_since = host.down_since
        known.read_at = time.monotonic()
        return known


def _make(host: DockerHost) -> DockerRuntime:
    if not host.url:  # this machine's engine: the one the rest of Boxyard uses
        return machine_runtime()
    paths = _tls_files(host) if host.tls_cert else {}
    return DockerRuntime(connection=Connection(url=host.url, host=host.name, **paths))


def _tls_files(host: DockerHost) -> dict[str, str]:
    """The host's TLS material as files (named by their content, so a change is a new set)."""
    folder = _tls_folder(host)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = {}
    for field, content in (
        ("tls_ca", host.tls_ca),
        ("tls_cert", host.tls_cert),
        ("tls_key", host.tls_key),
    ):
        path = folder / f"{field}.pem"
        if not path.exists():
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(content)
        paths[field] = str(path)
    return paths


def _tls_folder(host: DockerHost) -> Path:
    digest = hashlib.sha256(
        "\0".join((host.tls_ca, host.tls_cert, host.tls_key)).encode()
    ).hexdigest()[:16]
    return Path(settings.DATA_DIR) / "hosts" / f"{host.name}-{digest}"
