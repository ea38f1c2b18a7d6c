"""The Docker Engine runtime: the only module of Boxyard that imports docker-py.

It uses the low-level `APIClient` (one per process, with a connection pool large enough
for concurrent requests) and adds nothing but the hardening every sandbox gets.
"""

import functools
import io
import logging
import os
import select
import socket
import stat
import struct
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig
from docker.types import Mount as DockerMount
from docker.types import Ulimit

from boxyard import chaos
from boxyard.errors import RuntimeFailure, RuntimeUnavailable
from sandboxes.runtime import (
    AGENT_MOUNT,
    LABEL_GENERATION,
    LABEL_MANAGED,
    LABEL_ROLE,
    LABEL_SANDBOX,
    ContainerGone,
    ContainerInfo,
    ContainerSpec,
    ExecDeadlineExceeded,
    ExecResult,
    ImageMissing,
    Usage,
    labels_for,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# The container's own process: it only keeps the container alive; tini (init) reaps zombies.
KEEPALIVE = ["sleep", "infinity"]
_STDOUT, _STDERR = 1, 2
_CHUNK = 64 * 1024
STREAM_IDLE_TIMEOUT = 300


def _translate(method: Callable[P, T]) -> Callable[P, T]:
    """Map docker-py and transport errors onto Boxyard's exception tree."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except (RuntimeFailure, RuntimeUnavailable):
            raise
        except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as error:
            raise RuntimeUnavailable(f"the Docker Engine is unreachable: {error}") from error
        except requests.exceptions.Timeout as error:
            raise RuntimeUnavailable(f"the Docker Engine did not answer in time: {error}") from error
        except docker.errors.ImageNotFound as error:
            raise ImageMissing(f"image not found: {error.explanation or error}") from error
        except docker.errors.NotFound as error:
            raise ContainerGone(f"not found: {error.explanation or error}") from error
        except docker.errors.APIError as error:
            raise RuntimeFailure(f"the Docker Engine refused: {error.explanation or error}") from error
        except docker.errors.DockerException as error:
            raise RuntimeUnavailable(f"the Docker Engine is unreachable: {error}") from error

    return wrapper


def _info(data: dict[str, Any]) -> ContainerInfo:
    state = data.get("State") or {}
    config = data.get("Config") or {}
    created = data.get("Created")
    return ContainerInfo(
        id=data["Id"],
        name=data.get("Name", "").lstrip("/"),
        status=state.get("Status", "unknown"),
        labels=config.get("Labels") or {},
        image=config.get("Image", ""),
        created_at=_parse_time(created) if isinstance(created, str) else None,
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
    )


def _parse_time(value: str) -> datetime | None:
    # Docker gives nanoseconds ("2026-11-22T04:03:01.123456789Z"); Python takes microseconds.
    head, _, fraction = value.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")
    except ValueError:
        return None


class DockerRuntime:
    def __init__(self, base_url: str | None = None, pool_size: int = 64) -> None:
        self._base_url = base_url
        self._pool_size = pool_size
        self._client: docker.APIClient | None = None
        self._lock = threading.Lock()

    @property
    def api(self) -> docker.APIClient:
        # Created on first use, so that an engine that is down at start-up is only an error
        # for the calls that need it; "auto" negotiates the API version with the engine.
        if self._client is None:
            with self._lock:
                if self._client is None:
                    kwargs: dict[str, Any] = (
                        {"base_url": self._base_url}
                        if self._base_url
                        else docker.utils.kwargs_from_env()
                    )
                    self._client = docker.APIClient(
                        version="auto", timeout=120, max_pool_size=self._pool_size, **kwargs
                    )
        return self._client

    # --- engine and images --------------------------------------------------------------------

    @_translate
    def ping(self) -> None:
        self.api.ping()

    @_translate
    def image_labels(self, image: str) -> dict[str, str] | None:
        try:
            data = self.api.inspect_image(image)
        except docker.errors.NotFound:
            return None
        return (data.get("Config") or {}).get("Labels") or {}

    @_translate
    def pull(self, image: str) -> None:
        repository, tag = docker.utils.parse_repository_tag(image)
        self.api.pull(repository, tag=tag or "latest")

    @_translate
    def import_image(self, tar_path: Path, reference: str, changes: list[str]) -> None:
        repository, tag = docker.utils.parse_repository_tag(reference)
        result = self.api.import_image_from_file(
            str(tar_path), repository=repository, tag=tag or "latest", changes=changes
        )
        if "error" in str(result).lower() and "status" not in str(result).lower():
            raise RuntimeFailure(f"importing {reference} failed: {result}")

    @_translate
    def remove_image(self, reference: str) -> None:
        try:
            self.api.remove_image(reference, force=True)
        except docker.errors.NotFound:
            pass

    # --- volumes ------------------------------------------------------------------------------

    @_translate
    def ensure_volume(self, name: str, labels: dict[str, str]) -> bool:
        try:
            self.api.inspect_volume(name)
            return False
        except docker.errors.NotFound:
            pass
        # Creating a named volume that exists is a no-op in Docker, so a race is harmless.
        self.api.create_volume(name=name, labels=labels)
        return True

    @_translate
    def remove_volume(self, name: str) -> None:
        try:
            self.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            pass

    @_translate
    def list_volumes(self, labels: dict[str, str]) -> list[str]:
        filters = {"label": [f"{key}={value}" for key, value in labels.items()]}
        return [volume["Name"] for volume in self.api.volumes(filters=filters).get("Volumes") or []]

    @_translate
    def prepare_volume(self, name: str, image: str, user: str) -> None:
        # The image has no /workspace of the sandbox user, so the new volume's root belongs to
        # root. A one-shot container that may only chown (no network, read-only root) fixes it.
        uid_gid = user if ":" in user else f"{user}:{user}"
        host_config = self.api.create_host_config(
            mounts=[DockerMount(target="/workspace", source=name, type="volume")],
            cap_drop=["ALL"],
            cap_add=["CHOWN"],
            security_opt=["no-new-privileges:true"],
            read_only=True,
            network_mode="none",
            pids_limit=16,
            mem_limit="64m",
        )
        container = self.api.create_container(
            image,
            ["chown", uid_gid, "/workspace"],
            user="0:0",
            labels=labels_for(**{"io.boxyard.role": "prepare"}),
            host_config=host_config,
            network_disabled=True,
        )
        try:
            self.api.start(container["Id"])
            status = self.api.wait(container["Id"], timeout=60)
            if status.get("StatusCode") != 0:
                logs = self.api.logs(container["Id"]).decode(errors="replace").strip()
                raise RuntimeFailure(
                    f"could not give the sandbox user its workspace in image {image}: {logs}"
                )
        finally:
            self.api.remove_container(container["Id"], force=True)

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
            security_opt=["no-new-privileges:true"],
            privileged=False,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,exec,size={spec.tmp_mb}m,mode=1777"},
            pids_limit=spec.pids_limit,
            mem_limit=memory,
            memswap_limit=memory,  # equal: no swap
            nano_cpus=int(spec.cpus * 1_000_000_000),
            network_mode="bridge" if spec.network else "none",
            ipc_mode="private",
            init=True,
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
        )

    @_translate
    def ensure_container(self, spec: ContainerSpec) -> ContainerInfo:
        try:
            created = self.api.create_container(
                spec.image,
                KEEPALIVE,
                name=spec.name,
                user=spec.user,
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
                id=container_id, name=created.name, status="running", labels=created.labels,
                image=created.image,
            )
        return _info(self.api.inspect_container(container_id))

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
                    f"a container named {spec.name} exists and is not this sandbox's "
                    f"({key}={labels.get(key)!r})"
                )
        return data["Id"]

    @_translate
    def inspect_container(self, name_or_id: str) -> ContainerInfo | None:
        try:
            return _info(self.api.inspect_container(name_or_id))
        except docker.errors.NotFound:
            return None

    @_translate
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

    @_translate
    def stop_container(self, name_or_id: str, timeout: int = 5) -> None:
        try:
            self.api.stop(name_or_id, timeout=timeout)
        except docker.errors.NotFound:
            pass

    @_translate
    def remove_container(self, name_or_id: str) -> None:
        try:
            self.api.remove_container(name_or_id, force=True, v=False)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            # 409 "removal already in progress" means someone else is removing it: done.
            if error.status_code != 409:
                raise

    # --- exec ---------------------------------------------------------------------------------

    @_translate
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
    ) -> ExecResult:
        started = time.monotonic()
        exec_id, sock = self._start_exec(
            container, argv, env, workdir, stdin is not None, deadline_seconds is not None
        )
        kept: dict[int, bytearray] = {_STDOUT: bytearray(), _STDERR: bytearray()}
        totals = {_STDOUT: 0, _STDERR: 0}
        deadline = started + deadline_seconds if deadline_seconds else None
        writer = _feed_stdin(sock, stdin) if stdin is not None else None
        try:
            for stream, data in _frames(sock, deadline):
                if stream not in kept:
                    continue
                totals[stream] += len(data)
                room = output_limit - len(kept[stream])
                if room > 0:
                    kept[stream] += data[:room]
        finally:
            _close(sock)
            if writer is not None:
                writer.join(timeout=5)
        return ExecResult(
            exit_code=self._exit_code(exec_id),
            stdout=bytes(kept[_STDOUT]),
            stderr=bytes(kept[_STDERR]),
            stdout_bytes=totals[_STDOUT],
            stderr_bytes=totals[_STDERR],
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    @_translate
    def exec_stream(
        self,
        container: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
    ) -> "DockerExecStream":
        exec_id, sock = self._start_exec(container, argv, env, workdir, False, False)
        return DockerExecStream(self, exec_id, sock)

    @_translate
    def attach(self, container: str, argv: list[str]) -> "DockerDuplex":
        _exec_id, sock = self._start_exec(container, argv, None, None, True, True)
        return DockerDuplex(sock)

    @_translate
    def open_terminal(
        self, container: str, argv: list[str], *, env: dict[str, str] | None = None,
        cols: int = 80, rows: int = 24,
    ) -> "DockerTerminal":
        try:
            created = self.api.exec_create(
                container, argv, stdout=True, stderr=True, stdin=True, tty=True,
                environment=env or None,
            )
        except docker.errors.APIError as error:
            if error.status_code == 409:
                raise ContainerGone(f"the container is not running: {error.explanation}") from error
            raise
        raw = self.api.exec_start(created["Id"], socket=True, tty=True)
        sock: socket.socket = getattr(raw, "_sock", raw)
        terminal = DockerTerminal(self, created["Id"], sock)
        terminal.resize(cols, rows)
        return terminal

    @_translate
    def usage(self, container: str) -> Usage | None:
        try:
            stats = self.api.stats(container, stream=False, one_shot=True)
        except docker.errors.NotFound:
            return None
        cpu = stats.get("cpu_stats") or {}
        memory = stats.get("memory_stats") or {}
        if not cpu.get("cpu_usage"):
            return None  # not running
        return Usage(
            cpu_ns=int(cpu["cpu_usage"].get("total_usage", 0)),
            system_ns=int(cpu.get("system_cpu_usage", 0)),
            online_cpus=int(cpu.get("online_cpus") or len(cpu["cpu_usage"].get("percpu_usage") or [1])),
            memory_bytes=int(memory.get("usage", 0)) - int((memory.get("stats") or {}).get("cache", 0)),
            memory_limit_bytes=int(memory.get("limit", 0)),
        )

    # --- the agent ----------------------------------------------------------------------------

    @_translate
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
                self.api.put_archive(helper["Id"], AGENT_MOUNT, _single_file_tar("boxyard-agent", binary))
        finally:
            self.api.remove_container(helper["Id"], force=True)
        return name

    def _start_exec(
        self,
        container: str,
        argv: list[str],
        env: dict[str, str] | None,
        workdir: str | None,
        with_stdin: bool,
        with_deadline: bool,
    ) -> tuple[str, socket.socket]:
        try:
            created = self.api.exec_create(
                container,
                argv,
                stdout=True,
                stderr=True,
                stdin=with_stdin,
                environment=env or None,
                workdir=workdir,
            )
        except docker.errors.APIError as error:
            if error.status_code == 409:  # "container is not running"
                raise ContainerGone(f"the container is not running: {error.explanation}") from error
            raise
        raw = self.api.exec_start(created["Id"], socket=True)
        sock: socket.socket = getattr(raw, "_sock", raw)
        # Waiting is bounded by `_frames`' deadline, not by the client's request timeout; a
        # stream without a deadline still gives up after a long silence.
        sock.settimeout(None if with_deadline else STREAM_IDLE_TIMEOUT)
        return created["Id"], sock

    def _exit_code(self, exec_id: str) -> int | None:
        # The stream can close a moment before the engine records the exit code.
        for _ in range(50):
            data = self.api.exec_inspect(exec_id)
            if not data.get("Running"):
                return data.get("ExitCode")
            time.sleep(0.01)
        return None


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
        raise RuntimeFailure(f"refusing to mount {source} into a sandbox")


class DockerExecStream:
    """stdout of a running exec as an iterator of chunks; stderr is kept up to 64 KiB."""

    def __init__(self, runtime: DockerRuntime, exec_id: str, sock: socket.socket) -> None:
        self._runtime = runtime
        self._exec_id = exec_id
        self._sock = sock
        self._stderr = bytearray()
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            for stream, data in _frames(self._sock, None):
                if stream == _STDOUT:
                    yield data
                elif stream == _STDERR and len(self._stderr) < 65536:
                    self._stderr += data
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _close(self._sock)

    @property
    def stderr(self) -> bytes:
        return bytes(self._stderr)

    @_translate
    def exit_code(self) -> int | None:
        return self._runtime._exit_code(self._exec_id)


class DockerTerminal:
    """An exec on a pseudo-terminal: no stream headers, just the terminal's bytes."""

    def __init__(self, runtime: DockerRuntime, exec_id: str, sock: socket.socket) -> None:
        self._runtime = runtime
        self._exec_id = exec_id
        self.socket = sock

    @_translate
    def resize(self, cols: int, rows: int) -> None:
        try:
            self._runtime.api.exec_resize(self._exec_id, height=rows, width=cols)
        except docker.errors.APIError:
            pass  # the program has ended: nothing left to resize

    def close(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _close(self.socket)

    @_translate
    def exit_code(self) -> int | None:
        return self._runtime._exit_code(self._exec_id)


class DockerDuplex:
    """stdin and the demultiplexed output of a long-lived exec."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self._sock.sendall(data)

    def frames(self) -> Iterator[tuple[int, bytes]]:
        try:
            yield from _frames(self._sock, None)
        except OSError:
            return

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        _close(self._sock)


def _frames(sock: socket.socket, deadline: float | None) -> Iterator[tuple[int, bytes]]:
    """Demultiplex Docker's attach stream: 8-byte headers (stream, size) then the payload."""
    buffer = bytearray()
    while True:
        while len(buffer) >= 8:
            stream, size = struct.unpack(">BxxxL", buffer[:8])
            if len(buffer) < 8 + size:
                break
            payload = bytes(buffer[8 : 8 + size])
            del buffer[: 8 + size]
            yield stream, payload
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ExecDeadlineExceeded("the command's output stream did not end in time")
            ready, _, _ = select.select([sock], [], [], remaining)
            if not ready:
                continue
        try:
            data = sock.recv(_CHUNK)
        except TimeoutError:
            raise ExecDeadlineExceeded("the command's output stream went silent for too long")
        if not data:
            return
        buffer += data


def _feed_stdin(sock: socket.socket, chunks: Iterable[bytes]) -> threading.Thread:
    """Write stdin from a thread, so a command that talks back while reading never deadlocks."""

    def feed() -> None:
        try:
            for chunk in chunks:
                if chunk:
                    sock.sendall(chunk)
        except OSError:
            pass  # the command stopped reading (it failed or exited); its output says why
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    thread = threading.Thread(target=feed, name="exec-stdin", daemon=True)
    thread.start()
    return thread


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
