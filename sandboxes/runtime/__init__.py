"""The container runtime: the only way Boxyard talks to a container engine.

`sandboxes.runtime.docker` is the only module of the project that imports docker-py.
Everything else uses the `Runtime` protocol below; which engine serves a Docker host is the
service `hosts.engines`'s to say (the runtime holds no rows), and `set_runtime()` swaps every
host's for one, so pure-logic tests can use a fake while behaviour tests use the real engine.

Conventions every implementation keeps:
- every container and volume carries the labels of `labels_for()`;
- "already gone" is success for removals;
- engine trouble surfaces as `RuntimeUnavailable` (cannot reach it) or `RuntimeFailure` and
  its refinements (`ContainerGone`, `ImageMissing`, `ExecDeadlineExceeded`), all from
  `boxyard.errors`.
"""

import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from django.conf import settings

LABEL_MANAGED = "io.boxyard.managed"
LABEL_DEPLOYMENT = "io.boxyard.deployment"
LABEL_SANDBOX = "io.boxyard.sandbox"
LABEL_PIPELINE = "io.boxyard.pipeline"
LABEL_GENERATION = "io.boxyard.generation"
LABEL_SCOPE = "io.boxyard.scope-key"
# Set on images whose /workspace directory already belongs to the sandbox user, so a new
# workspace volume copies that ownership and needs no preparation.
LABEL_WORKSPACE_UID = "io.boxyard.workspace-uid"
# On sandbox containers that carry the agent: its digest. On the agent's volume: its role.
LABEL_AGENT = "io.boxyard.agent"
LABEL_ROLE = "io.boxyard.role"
# Where the agent's volume is mounted (read-only) in a sandbox, and the agent itself.
AGENT_MOUNT = "/.boxyard"
AGENT_PATH = AGENT_MOUNT + "/boxyard-agent"
# The agent's own tmpfs (its socket, its sessions' state): root's, out of the sandbox's reach.
AGENT_STATE = "/.boxyard-run"
# Execs that must run as root, over the sandbox user's processes: the agent's bridge and
# terminal. Every other exec runs as the sandbox user.
ROOT = "0:0"


def labels_for(**extra: str) -> dict[str, str]:
    return {LABEL_MANAGED: "1", LABEL_DEPLOYMENT: settings.BOXYARD_DEPLOYMENT, **extra}


@dataclass(frozen=True)
class Mount:
    source: str  # a volume name, or an absolute host path for binds
    target: str
    read_only: bool = False
    kind: Literal["volume", "bind"] = "volume"
    # Volumes only: do not copy the image's content (and the mount point's owner) into an
    # empty volume. Needed for images whose /workspace is not the sandbox user's: a copy-up
    # would hand the root of a still-empty workspace back to root at every start.
    no_copy: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a sandbox container is made of; the runtime adds nothing but hardening."""

    name: str
    image: str
    labels: dict[str, str]
    user: str
    mounts: tuple[Mount, ...]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/workspace"
    cpus: float = 1.0
    memory_mb: int = 1024
    pids_limit: int = 256
    tmp_mb: int = 256
    network: bool = False
    hostname: str = "sandbox"
    # The agent binary to run as the container's main process (as root, with only the
    # capabilities to act on the sandbox user's processes); without it the container sleeps
    # as `user` and every command is an engine exec.
    agent: str | None = None
    # What the agent keeps of its commands' output in all (bytes; None: the agent's default).
    agent_output_bytes: int | None = None


@dataclass(frozen=True)
class WorkspaceInfo:
    """A sandbox's workspace volume: `limit_bytes` is its disk's size, None for a workspace
    made before workspaces had disks (no limit is enforced on it)."""

    name: str
    limit_bytes: int | None
    created: bool


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    status: str  # created, running, paused, restarting, removing, exited, dead
    labels: dict[str, str]
    image: str = ""
    created_at: datetime | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    user: str = ""  # the user of its main process

    @property
    def running(self) -> bool:
        return self.status == "running"


@dataclass
class ExecResult:
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_bytes: int  # everything the command wrote, kept or not
    stderr_bytes: int
    duration_ms: int

    @property
    def stdout_truncated(self) -> bool:
        return self.stdout_bytes > len(self.stdout)

    @property
    def stderr_truncated(self) -> bool:
        return self.stderr_bytes > len(self.stderr)


@dataclass(frozen=True)
class EngineFacts:
    """What a Docker host's engine says of itself: the health check's reading."""

    version: str
    cpus: int
    memory_bytes: int
    images: list[str]  # the tags it holds
    engine_id: str = ""  # the engine's own ID (`docker info`), the same at any address
    data_root: str = ""  # where it keeps its data: two engines of one ID do not share it


class Runtime(Protocol):
    def ping(self) -> None: ...

    def engine_facts(self, timeout: float) -> EngineFacts:
        """The engine's version, CPUs, memory and image tags, within `timeout` seconds."""
        ...

    # a workspace carried to another engine
    def read_workspace(self, volume: str, image: str) -> Iterator[bytes]:
        """The volume's content as a tar stream, its entries under `carry/`."""
        ...

    def write_workspace(self, volume: str, image: str, archive: Iterable[bytes]) -> None:
        """Write a `read_workspace` stream into the volume (made already)."""
        ...

    # images
    def image_labels(self, image: str) -> dict[str, str] | None:
        """The image's labels, or None when the engine has no such image."""
        ...

    def pull(self, image: str) -> None: ...

    def import_image(self, tar_path: Path, reference: str, changes: list[str]) -> None:
        """Make an image from a root filesystem tar (no registry, no builder)."""
        ...

    def remove_image(self, reference: str) -> None: ...

    # volumes
    def remove_volume(self, name: str) -> None: ...

    def list_volumes(self, labels: dict[str, str]) -> list[str]: ...

    def ensure_workspace(self, name: str, labels: dict[str, str], size_mb: int) -> WorkspaceInfo:
        """A workspace volume on a disk of its own of `size_mb` MiB, owned by the sandbox
        user, attached and ready to mount (again after the host restarted; grown when it is
        not in use and asked to be larger). Writes past its size fail with ENOSPC."""
        ...

    def remove_workspace(self, name: str) -> None:
        """Remove a workspace volume and its disk ("already gone" is success)."""
        ...

    def remove_orphan_disks(self, older_than_seconds: float) -> list[str]:
        """Remove the disks whose workspace volume is gone, older than the given age; their
        names."""
        ...

    # containers
    def ensure_container(self, spec: ContainerSpec) -> ContainerInfo:
        """Create the named container unless it exists (adopting ours), and start it."""
        ...

    def inspect_container(self, name_or_id: str) -> ContainerInfo | None: ...

    def list_containers(self, labels: dict[str, str]) -> list[ContainerInfo]: ...

    def stop_container(self, name_or_id: str, timeout: int = 5) -> None: ...

    def set_pids_limit(self, name_or_id: str, limit: int) -> None:
        """Change a running container's pids limit (to let a jammed sandbox be reset)."""
        ...

    def remove_container(self, name_or_id: str) -> None: ...

    # exec
    def exec(
        self,
        container: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        stdin: Iterable[bytes] | None = None,
        output_limit: int = 256 * 1024,
        deadline_seconds: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run argv to completion; keep at most output_limit bytes of each stream. Execs run
        as the sandbox user unless `user` says otherwise (ROOT, for the agent's own)."""
        ...

    def exec_stream(
        self,
        container: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
    ) -> "ExecStream": ...

    def attach(self, container: str, argv: list[str], *, user: str | None = None) -> "Duplex":
        """Start argv with stdin open and keep both directions for as long as we like."""
        ...

    def open_terminal(
        self,
        container: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cols: int = 80,
        rows: int = 24,
        user: str | None = None,
    ) -> "Terminal":
        """Start argv on a pseudo-terminal in the container: one raw byte stream each way."""
        ...

    def usage(self, container: str) -> "Usage | None":
        """The container's CPU and memory counters now; None if it is not running."""
        ...

    def follow_usage(self, container: str) -> "Iterator[Usage]":
        """The container's counters as the engine takes them (about one reading a second),
        until the container stops, the engine cannot be reached, or the caller stops asking."""
        ...

    def events(self, labels: dict[str, str], since: float | None = None) -> "EventStream":
        """The lifecycle events (start, die, oom, destroy) of the containers carrying all
        `labels`, from `since` (a Unix time on the engine's clock; None: from this call), for
        as long as the engine runs. A silence, or a connection the engine drops, is no end:
        the stream connects again and resumes where it left off (as far back as the engine
        keeps events), each event given once. RuntimeUnavailable, from this call or while
        iterating, when the engine cannot be reached; `close()`, from any thread, ends the
        iteration."""
        ...

    # the agent
    def agent_socket(self, container: str) -> "socket.socket | None":
        """A new connection to the agent's own socket in the container, where this process can
        reach it without the engine (the engine on this machine, this process allowed into the
        container's file system); None where it cannot, and the engine's execs serve."""
        ...

    def ensure_agent(self, image: str, binary: bytes, digest: str) -> str:
        """The name of a volume holding the agent binary (made once per engine and digest);
        `image` is any image the engine has, used only to reach the volume."""
        ...


class ExecStream(Protocol):
    """A running exec whose stdout is read as it comes; stderr is kept (bounded)."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...

    @property
    def stderr(self) -> bytes: ...

    def exit_code(self) -> int | None: ...


class Duplex(Protocol):
    """A long-lived exec: bytes go to its stdin, its output comes back as (stream, bytes)."""

    def send(self, data: bytes) -> None: ...

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """(1, stdout bytes) and (2, stderr bytes) until the program ends or we close."""
        ...

    def close(self) -> None: ...


class Terminal(Protocol):
    """A program on a pseudo-terminal: its socket carries raw bytes both ways (the terminal's
    input, and its screen), and the terminal can be resized."""

    @property
    def socket(self) -> Any: ...

    def resize(self, cols: int, rows: int) -> None: ...

    def close(self) -> None: ...

    def exit_code(self) -> int | None: ...


@dataclass(frozen=True)
class Usage:
    """Cumulative CPU time (ns) of the container and of the host, memory in bytes, and the
    CPUs the container may use; two readings give a CPU share."""

    cpu_ns: int
    system_ns: int
    online_cpus: int
    memory_bytes: int
    memory_limit_bytes: int


@dataclass(frozen=True)
class ContainerEvent:
    """One lifecycle event of a container, as the engine reported it."""

    container_id: str
    name: str
    action: str  # start, die, oom, destroy
    labels: dict[str, str]
    time: float  # Unix seconds on the engine's clock
    exit_code: int | None = None  # given with die


class EventStream(Protocol):
    """Container events as they happen; `close()` from another thread ends the iteration."""

    def __iter__(self) -> Iterator[ContainerEvent]: ...

    def close(self) -> None: ...


_override: Runtime | None = None


def set_runtime(runtime: Runtime | None) -> None:
    """Swap the engine of every host (tests with a fake, or with another engine); None
    restores the Docker hosts' own."""
    global _override
    _override = runtime


def swapped() -> Runtime | None:
    """The engine `set_runtime` put in place of every host's, if any."""
    return _override


class Engines(Protocol):
    """How the engine of a Docker host is found, by the host's id (None: this machine's)."""

    def __call__(self, host: int | None = None, /) -> Runtime: ...


_engines: Engines | None = None


def serve_engines(engines: Engines) -> None:
    """Install how a host's engine is found. The runtime knows engines and containers, not
    the hosts' rows: the service that reads them (`hosts.engines`) installs itself here when
    Django starts, and the runtime asks it for the engine of a container's host (an agent's
    channel, opened on first use)."""
    global _engines
    _engines = engines


def engine_at(host: int | None) -> Runtime:
    """The engine of the Docker host `host` (its id; None: this machine's), as installed by
    `serve_engines`. Raises what it raises (HostUnavailable for a host marked down)."""
    if _override is not None:
        return _override
    if _engines is None:
        raise RuntimeError("no Docker hosts' engines installed: Django is not set up")
    return _engines(host)
