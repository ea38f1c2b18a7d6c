"""The Docker Engine: images, volumes, workspaces and containers, with the hardening every
sandbox gets."""

import io
import logging
import os
import stat
import tarfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

import docker
import docker.errors
import docker.utils
import requests
from docker.types import LogConfig, Ulimit
from docker.types import Mount as DockerMount

from boxyard import chaos
from boxyard.errors import N_, ContainerGone, RuntimeFailure
from sandboxes.runtime import (
    AGENT_MOUNT,
    AGENT_STATE,
    LABEL_GENERATION,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_SANDBOX,
    ROOT,
    ContainerInfo,
    ContainerSpec,
    EngineFacts,
    Usage,
    WorkspaceInfo,
    labels_for,
)
from sandboxes.runtime.docker.carry import CarryMixin
from sandboxes.runtime.docker.common import container_info, translate
from sandboxes.runtime.docker.connection import Connection, client_options
from sandboxes.runtime.docker.direct import DirectMixin
from sandboxes.runtime.docker.disks import LABEL_DISK, WorkspaceDisks
from sandboxes.runtime.docker.events import EventsMixin
from sandboxes.runtime.docker.execs import ExecsMixin

log = logging.getLogger(__name__)

# The container's own process without the agent: it only keeps the container alive; tini
# (init) reaps zombies.
KEEPALIVE = ["sleep", "infinity"]
AGENT_CAPABILITIES = ["KILL", "SETUID", "SETGID"]
# The scheduler's period for the CPU limit. Docker's own (100 ms) lets a sandbox of several
# busy processes run on every core until it has spent its share of the period, then stop:
# its neighbours wait up to tens of milliseconds at a time. A short period spreads the same
# share evenly. The kernel wants a quota of at least 1 ms.
CPU_PERIOD_US = 10_000
MIN_CPU_QUOTA_US = 1_000
# A sandbox's weight when the CPUs are contended: a quarter of a process of the host's (the
# engine, Boxyard, and the agents' channels pass through both), so busy sandboxes never slow
# the way commands reach every other sandbox.
CPU_SHARES = 256


class CPULimit(TypedDict):
    cpu_period: int
    cpu_quota: int
    cpu_shares: int


def cpu_limit(cpus: float) -> CPULimit:
    """`cpus` CPUs as a period and a quota (host config arguments)."""
    period = max(CPU_PERIOD_US, round(MIN_CPU_QUOTA_US / cpus))
    return {"cpu_period": period, "cpu_quota": round(cpus * period), "cpu_shares": CPU_SHARES}


class DockerRuntime(ExecsMixin, EventsMixin, DirectMixin, CarryMixin):
    def __init__(
        self,
        base_url: str | None = None,
        pool_size: int = 64,
        connection: Connection | None = None,
        timeout: float = 120,
    ) -> None:
        super().__init__()
        self.connection = connection or Connection(url=base_url or "")
        self.host_name = self.connection.host
        self._base_url = self.connection.url or None
        self._pool_size = pool_size
        self._timeout = timeout
        self._client: docker.APIClient | None = None
        self._lock = threading.Lock()

    @property
    def api(self) -> docker.APIClient:
        # Created on first use, so that an engine that is down at start-up is only an error
        # for the calls that need it; "auto" negotiates the API version with the engine.
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = docker.APIClient(
                        version="auto",
                        timeout=self._timeout,  # type: ignore[arg-type]  # types-docker says int; requests takes a float
                        max_pool_size=self._pool_size,
                        **client_options(self.connection),
                    )
        return self._client

    # --- engine and images --------------------------------------------------------------------

    @translate
    def ping(self) -> None:
        self.api.ping()

    @translate
    def engine_facts(self, timeout: float) -> EngineFacts:
        # A client of its own, whose every request gives up after `timeout`: the health check
        # must not wait on a host that stopped answering as long as real work would.
        quick = docker.APIClient(version="auto", timeout=timeout, **client_options(self.connection))  # type: ignore[arg-type]  # types-docker says int; requests takes a float
        try:
            info = quick.info()
            images = quick.images()
        finally:
            quick.close()
        return EngineFacts(
            version=str(info.get("ServerVersion") or ""),
            cpus=int(info.get("NCPU") or 0),
            memory_bytes=int(info.get("MemTotal") or 0),
            engine_id=str(info.get("ID") or ""),
            data_root=str(info.get("DockerRootDir") or ""),
            images=sorted(
                tag
                for image in images
                for tag in image.get("RepoTags") or []
                if tag != "<none>:<none>"
            ),
        )

    @translate
    def image_labels(self, image: str) -> dict[str, str] | None:
        try:
            data = self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # untyped in types-docker
        except docker.errors.NotFound:
            return None
        return (data.get("Config") or {}).get("Labels") or {}

    @translate
    def pull(self, image: str) -> None:
        repository, tag = docker.utils.parse_repository_tag(image)
        self.api.pull(repository, tag=tag or "latest")

    @translate
    def import_image(self, tar_path: Path, reference: str, changes: list[str]) -> None:
        repository, tag = docker.utils.parse_repository_tag(reference)
        result = self.api.import_image_from_file(
            str(tar_path), repository=repository, tag=tag or "latest", changes=changes
        )
        if "error" in str(result).lower() and "status" not in str(result).lower():
            raise RuntimeFailure(f"importing {reference} failed: {result}")

    @translate
    def remove_image(self, reference: str) -> None:
        try:
            self.api.remove_image(reference, force=True)
        except docker.errors.NotFound:
            pass

    # --- volumes ------------------------------------------------------------------------------

    @translate
    def remove_volume(self, name: str) -> None:
        try:
            labels = self.api.inspect_volume(name).get("Labels") or {}
        except docker.errors.NotFound:
            return
        if LABEL_DISK in labels:
            self._disks.remove(name)  # a workspace's: its disk goes with it
            return
        try:
            self.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            pass

    @translate
    def ensure_workspace(self, name: str, labels: dict[str, str], size_mb: int) -> WorkspaceInfo:
        return self._disks.ensure(name, labels, size_mb)

    @translate
    def remove_workspace(self, name: str) -> None:
        self._disks.remove(name)

    @translate
    def remove_orphan_disks(self, older_than_seconds: float) -> list[str]:
        return self._disks.remove_orphans(older_than_seconds)

    @cached_property
    def _disks(self) -> WorkspaceDisks:
        return WorkspaceDisks(self.api)

    @translate
    def list_volumes(self, labels: dict[str, str]) -> list[str]:
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        return [volume["Name"] for volume in self.api.volumes(filters=filters).get("Volumes") or []]

    # --- containers ---------------------------------------------------------------------------

    def _host_config(self, spec: ContainerSpec) -> dict[str, Any]:
        for mount in spec.mounts:
            if mount.kind == "bind":
                _refuse_dangerous_bind(mount.source)
        memory = f"{spec.memory_mb}m"
        return self.api.create_host_config(
            mounts=[
                DockerMount(
                    target=mount.target,
                    source=mount.source,
                    type=mount.kind,
                    read_only=mount.read_only,
                    no_copy=mount.no_copy if mount.kind == "volume" else False,
                )
                for mount in spec.mounts
            ],
            cap_drop=["ALL"],
            # The agent (root) needs these over the sandbox user's processes: to kill them, and
            # to start them as that user with their tags. The sandbox user gets none at all.
            cap_add=AGENT_CAPABILITIES if spec.agent else None,
            security_opt=["no-new-privileges:true"],
            privileged=False,
            read_only=True,
            tmpfs={
                "/tmp": f"rw,nosuid,nodev,exec,size={spec.tmp_mb}m,mode=1777",
                **(
                    {AGENT_STATE: "rw,nosuid,nodev,noexec,size=16m,mode=0711"} if spec.agent else {}
                ),
            },
            pids_limit=spec.pids_limit,
            mem_limit=memory,
            memswap_limit=memory,  # equal: no swap
            **cpu_limit(spec.cpus),
            network_mode="bridge" if spec.network else "none",
            ipc_mode="private",
            init=True,
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
        )

    @translate
    def ensure_container(self, spec: ContainerSpec) -> ContainerInfo:
        if spec.agent:
            command, user = [spec.agent, "serve", "--user", spec.user], ROOT
            if spec.agent_output_bytes:
                command += ["--output-bytes", str(spec.agent_output_bytes)]
        else:
            command, user = KEEPALIVE, spec.user
        try:
            created = self.api.create_container(
                spec.image,
                command,
                name=spec.name,
                user=user,
                labels=spec.labels,
                environment=spec.env,
                working_dir=spec.workdir,
                hostname=spec.hostname,
                host_config=self._host_config(spec),
                network_disabled=not spec.network,
                stop_signal="SIGKILL",
            )
        except docker.errors.APIError as error:
            if error.status_code != 409:
                raise
            # The deterministic name is taken: another opener of the same sandbox got there
            # first. Adopt the container if it is this sandbox's generation, else refuse.
            return self._start(self._adopt(spec))
        chaos.point("create:container")
        return self._start(created["Id"], spec)

    def _start(self, container_id: str, created: ContainerSpec | None = None) -> ContainerInfo:
        try:
            self.api.start(container_id)
        except docker.errors.APIError as error:
            if error.status_code != 304:  # 304: already started
                raise
        if created is not None:
            # We made it and the engine started it: no need to ask what we already know.
            return ContainerInfo(
                id=container_id,
                name=created.name,
                status="running",
                labels=created.labels,
                image=created.image,
            )
        return container_info(self.api.inspect_container(container_id))

    def _adopt(self, spec: ContainerSpec) -> str:
        # The engine reserves the name before the container exists: a concurrent creator's
        # container may not be inspectable for a moment after our 409.
        for attempt in range(100):
            try:
                data = self.api.inspect_container(spec.name)
                break
            except docker.errors.NotFound:
                if attempt == 99:
                    raise
                time.sleep(0.05)
        labels = (data.get("Config") or {}).get("Labels") or {}
        for key in (LABEL_SANDBOX, LABEL_GENERATION):
            if labels.get(key) != spec.labels.get(key):
                raise RuntimeFailure(
                    N_(
                        "a container named %(name)s exists and is not this sandbox's "
                        "(%(key)s=%(value)r)",
                        name=spec.name,
                        key=key,
                        value=labels.get(key),
                    )
                )
        container_id: str = data["Id"]
        return container_id

    @translate
    def inspect_container(self, name_or_id: str) -> ContainerInfo | None:
        try:
            return container_info(self.api.inspect_container(name_or_id))
        except docker.errors.NotFound:
            return None

    @translate
    def list_containers(self, labels: dict[str, str]) -> list[ContainerInfo]:
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        found = []
        for summary in self.api.containers(all=True, filters=filters):
            found.append(
                ContainerInfo(
                    id=summary["Id"],
                    name=(summary.get("Names") or ["/"])[0].lstrip("/"),
                    status=summary.get("State", "unknown"),
                    labels=summary.get("Labels") or {},
                    image=summary.get("Image", ""),
                    created_at=datetime.fromtimestamp(summary.get("Created", 0)).astimezone(),
                )
            )
        return found

    @translate
    def set_pids_limit(self, name_or_id: str, limit: int) -> None:
        # The engine's update takes PidsLimit; docker-py's update_container does not pass it.
        url = f"{self.api.base_url}/v{self.api.api_version}/containers/{quote(name_or_id)}/update"
        answer = self.api.post(url, json={"PidsLimit": limit})
        if answer.status_code == 404:
            raise ContainerGone(N_("no container %(name)s", name=name_or_id))
        if answer.status_code >= 400:
            raise RuntimeFailure(
                N_("the Docker Engine refused the pids limit: %(said)s", said=answer.text)
            )

    @translate
    def stop_container(self, name_or_id: str, timeout: int = 5) -> None:
        try:
            self.api.stop(name_or_id, timeout=timeout)
        except docker.errors.NotFound:
            pass

    @translate
    def remove_container(self, name_or_id: str) -> None:
        try:
            self.api.remove_container(name_or_id, force=True, v=False)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            # 409 "removal already in progress" means someone else is removing it: done.
            if error.status_code != 409:
                raise

    @translate
    def usage(self, container: str) -> Usage | None:
        try:
            stats = self.api.stats(container, stream=False, one_shot=True)
        except docker.errors.NotFound:
            return None
        return _usage(stats)

    def follow_usage(self, container: str) -> Iterator[Usage]:
        # The engine's own stream: a reading a second, where every one-shot call after the
        # first waits about a second for the engine's next one.
        try:
            for stats in self.api.stats(container, stream=True, decode=True):
                reading = _usage(stats)
                if reading is None:
                    return
                yield reading
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return

    # --- the agent ----------------------------------------------------------------------------

    @translate
    def ensure_agent(self, image: str, binary: bytes, digest: str) -> str:
        # One volume per agent build, shared by every sandbox of this engine. It carries no
        # deployment label: it belongs to the engine, not to one Boxyard installation.
        name = f"boxyard-agent-{digest[:16]}"
        try:
            self.api.inspect_volume(name)
        except docker.errors.NotFound:
            self.api.create_volume(name, labels={LABEL_MANAGED: "1", LABEL_ROLE: "agent"})
        # A container that is created but never started reaches the volume through the
        # engine's archive API, which works against any engine, local or remote.
        helper = self.api.create_container(
            image,
            ["true"],
            user="0:0",
            labels=labels_for(**{LABEL_ROLE: "agent-helper"}),
            host_config=self.api.create_host_config(
                mounts=[DockerMount(target=AGENT_MOUNT, source=name, type="volume")],
                network_mode="none",
                cap_drop=["ALL"],
            ),
            network_disabled=True,
        )
        try:
            if _archive_size(self.api, helper["Id"], f"{AGENT_MOUNT}/boxyard-agent") != len(binary):
                self.api.put_archive(
                    helper["Id"], AGENT_MOUNT, _single_file_tar("boxyard-agent", binary)
                )
        finally:
            self.api.remove_container(helper["Id"], force=True)
        return name


def _archive_size(api: docker.APIClient, container: str, path: str) -> int | None:
    try:
        stream, info = api.get_archive(container, path)
    except docker.errors.NotFound:
        return None
    for _ in stream:  # the body must be read for the connection to be reused
        pass
    size = info.get("size")
    return size if isinstance(size, int) else None


def _single_file_tar(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        member = tarfile.TarInfo(name)
        member.size = len(content)
        member.mode = 0o755
        member.mtime = int(time.time())
        archive.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


def _refuse_dangerous_bind(source: str) -> None:
    """Last line of defence: the host's root or a runtime socket never enters a sandbox."""
    real = os.path.realpath(source)
    if real == "/" or (os.path.exists(real) and stat.S_ISSOCK(os.stat(real).st_mode)):
        raise RuntimeFailure(N_("refusing to mount %(path)s into a sandbox", path=source))


def _usage(stats: dict[str, Any]) -> Usage | None:
    """A reading of the engine's stats; None when the container does not run."""
    cpu = stats.get("cpu_stats") or {}
    memory = stats.get("memory_stats") or {}
    if not cpu.get("cpu_usage"):
        return None
    return Usage(
        cpu_ns=int(cpu["cpu_usage"].get("total_usage", 0)),
        system_ns=int(cpu.get("system_cpu_usage", 0)),
        online_cpus=int(cpu.get("online_cpus") or len(cpu["cpu_usage"].get("percpu_usage") or [1])),
        memory_bytes=int(memory.get("usage", 0)) - int((memory.get("stats") or {}).get("cache", 0)),
        memory_limit_bytes=int(memory.get("limit", 0)),
    )
