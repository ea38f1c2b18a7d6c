"""A second Docker Engine of the tests' own, for the tests that must stop or restart one.

The machine's engine serves every other test (and maybe more than tests), so no test may
restart it. This engine is a dockerd started by the test session, everything of it in one
temporary directory: its unix socket, data root, exec root (where it starts its own managed
containerd), pid file, log and an empty configuration file (the machine's
/etc/docker/daemon.json names the machine's data root). It has no TCP socket, no bridge and
no iptables rules, and the machine engine's storage driver (vfs if that cannot be read); it
runs in a network namespace of its own, so nothing it does to network links touches the
machine's engine.

It starts empty: `copy_image` brings an image over from the machine's engine with the docker
CLI (`docker save | docker load`), and images of Boxyard's own can be built on it with
`ensure_image` while it is the runtime. `teardown` leaves nothing behind: its containers
removed, the loop devices its workspace disks were attached to detached, dockerd (and with
it its containerd) stopped, anything still mounted in the directory unmounted, the directory
removed.

    engine = SecondEngine()
    engine.start()
    ...
    engine.restart()   # dockerd stopped (its containers stop with it), started on the same root
    ...
    engine.teardown()

Fixtures: `second_engine` (session: started once, with the disk keeper's image and the test
image on it) and `on_second_engine` (per test: the engine is the runtime while the test runs,
and the test's containers and volumes are removed after it).
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from django.conf import settings

from sandboxes.runtime import LABEL_ROLE, set_runtime
from sandboxes.runtime.docker import DockerRuntime
from sandboxes.runtime.docker.disks import LABEL_DISK

DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
DOCKER_CLI = shutil.which("docker") or "/usr/bin/docker"
FALLBACK_STORAGE_DRIVER = "vfs"
# How long the engine gives a container to stop when it shuts down before killing it.
SHUTDOWN_TIMEOUT_SECONDS = 5
LOOP_MAJOR = 7


def machine_cli_env() -> dict[str, str]:
    """The environment in which the docker CLI talks to the machine's engine (the one
    Boxyard is configured with)."""
    env = dict(os.environ)
    if settings.BOXYARD_DOCKER_HOST:
        env["DOCKER_HOST"] = settings.BOXYARD_DOCKER_HOST
    return env


def machine_storage_driver() -> str:
    """The storage driver of the machine's engine, or vfs (which works on any file system)
    when it cannot be asked."""
    try:
        found = subprocess.run(
            [DOCKER_CLI, "info", "--format", "{{.Driver}}"],
            env=machine_cli_env(),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return FALLBACK_STORAGE_DRIVER
    return found or FALLBACK_STORAGE_DRIVER


class SecondEngine:
    """A throw-away dockerd; see the module's docstring."""

    def __init__(self, storage_driver: str | None = None) -> None:
        # Short, under /tmp: unix socket paths may not be longer than 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="boxyard-engine-"))
        self.socket = self.root / "docker.sock"
        self.data_root = self.root / "data"
        self.exec_root = self.root / "run"
        self.pidfile = self.root / "dockerd.pid"
        self.log_path = self.root / "dockerd.log"
        self.config_file = self.root / "daemon.json"
        self.config_file.write_text("{}\n")
        self.storage_driver = storage_driver or machine_storage_driver()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # (major, minor, inode) of every disk file the engine has been seen to have.
        self.disks_seen: set[tuple[int, int, int]] = set()
        # Boxyard's runtime for this engine: one object for the engine's whole life, as a
        # Boxyard process has (the agent's volume is cached per runtime object).
        self.runtime = DockerRuntime(base_url=self.url)

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def argv(self) -> list[str]:
        # In a network namespace of its own: a dockerd without a bridge deletes any `docker0`
        # it finds as it starts, and the machine's engine needs its own. (`unshare` execs
        # dockerd in the new namespace: the process started is dockerd itself.)
        return [
            "unshare",
            "--net",
            "--",
            DOCKERD,
            f"--config-file={self.config_file}",
            f"--host={self.url}",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pidfile}",
            f"--storage-driver={self.storage_driver}",
            "--bridge=none",
            "--iptables=false",
            "--ip-masq=false",
            f"--shutdown-timeout={SHUTDOWN_TIMEOUT_SECONDS}",
        ]

    # --- life -------------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        """Start dockerd and wait until it answers on its socket."""
        assert not self.running, "the second engine is running already"
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1}: {' '.join(self.argv())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the second engine's dockerd exited with {self.process.returncode}:\n"
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"the second engine did not answer within {timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 60) -> None:
        """Stop dockerd as a service manager does (SIGTERM: it stops its containers, then its
        containerd) and wait until it and everything it started are gone."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.process = None
        self._end_stragglers()

    def kill(self) -> None:
        """The engine's process killed (SIGKILL), as a crash or an OOM kill would end it: its
        socket stops answering; its containerd and the containers' shims are left as they
        are, for the next `start` to find."""
        process = self.process
        if process is None:
            return
        process.kill()
        process.wait(30)
        self.process = None

    def restart(self) -> None:
        """A real restart: this dockerd stopped, and a new one started on the same data root."""
        self.stop()
        self.start()

    def clean(self) -> None:
        """Remove this test session's containers and volumes (workspaces with their disks),
        and detach any loop device the disk keeper lost track of."""
        from tests.conftest import _remove_ours

        self._remember_disks()
        try:
            _remove_ours(self.runtime)
        finally:
            self.detach_loop_devices()

    def teardown(self) -> None:
        """Leave nothing of the engine on the machine."""
        self._remember_disks()
        try:
            if self.running:
                self._remove_everything()
        finally:
            with suppress(Exception):
                self.runtime.api.close()
            self.stop()
            self.detach_loop_devices()
            self._unmount_everything()
            mounted = self._mounts()
            if mounted:
                raise RuntimeError(f"still mounted, {self.root} is left in place: {mounted}")
            shutil.rmtree(self.root)

    # --- images -----------------------------------------------------------------------------

    def copy_image(self, reference: str) -> None:
        """Copy an image from the machine's engine (`docker save | docker load`)."""
        save = subprocess.Popen(
            [DOCKER_CLI, "save", reference],
            env=machine_cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert save.stdout is not None
        try:
            loaded = subprocess.run(
                [DOCKER_CLI, "--host", self.url, "load", "--quiet"],
                stdin=save.stdout,
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            save.stdout.close()
            saved_error = save.stderr.read().decode(errors="replace") if save.stderr else ""
            save.wait(60)
        if save.returncode != 0 or loaded.returncode != 0:
            raise RuntimeError(
                f"copying {reference} to the second engine failed: save: {saved_error.strip()} "
                f"load: {loaded.stderr.strip()}"
            )

    @contextmanager
    def as_the_runtime(self) -> Iterator[DockerRuntime]:
        """Everything Boxyard does against "the engine" goes to this one meanwhile."""
        set_runtime(self.runtime)
        try:
            yield self.runtime
        finally:
            set_runtime(None)

    # --- what is left of it -----------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _client(self) -> docker.APIClient:
        return docker.APIClient(base_url=self.url, version="1.41", timeout=5)

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            with self._client() as client:
                return bool(client.ping())
        except Exception:  # not up yet, whatever the way it says so
            return False

    def _remove_everything(self) -> None:
        """Every workspace volume (each detaches and removes its disk through the keeper),
        then every container and volume."""
        with docker.APIClient(base_url=self.url, version="1.41", timeout=120) as client:
            for container in client.containers(all=True):
                if (container.get("Labels") or {}).get(LABEL_ROLE) != "disks":  # the keeper
                    client.remove_container(container["Id"], force=True)
            for volume in client.volumes().get("Volumes") or []:
                if LABEL_DISK in (volume.get("Labels") or {}):
                    with suppress(Exception):
                        self.runtime.remove_volume(volume["Name"])
            for container in client.containers(all=True):
                client.remove_container(container["Id"], force=True)
            for volume in client.volumes().get("Volumes") or []:
                with suppress(docker.errors.APIError):
                    client.remove_volume(volume["Name"], force=True)

    def _end_stragglers(self) -> None:
        """What a dockerd that had to be killed may leave running: its containerd and
        containerd's shims (found by the exec root in their command line), and the processes
        of its containers (found by their cgroup). Ended by their ids. After a clean stop
        there are none."""
        ours = f"{self.exec_root}/containerd/"  # containerd's config, the shims' address
        container_ids = set()
        containers = self.data_root / "containers"
        if containers.is_dir():
            container_ids = {entry.name for entry in containers.iterdir()}
        for pid in _pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                cgroup = Path(f"/proc/{pid}/cgroup").read_text()
            except OSError:
                continue
            in_our_container = any(f"/{cid}" in cgroup for cid in container_ids)
            if ours in cmdline or in_our_container:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _remember_disks(self) -> None:
        self.disks_seen |= self._disk_files()

    def _disk_files(self) -> set[tuple[int, int, int]]:
        """(device major, minor, inode) of every file in the engine's volumes: the backing
        files of its workspace disks among them."""
        found: set[tuple[int, int, int]] = set()
        volumes = self.data_root / "volumes"
        for directory, _, files in os.walk(volumes):
            for name in files:
                with suppress(OSError):
                    status = os.lstat(os.path.join(directory, name))
                    if stat.S_ISREG(status.st_mode):
                        found.add((os.major(status.st_dev), os.minor(status.st_dev), status.st_ino))
        return found

    def loop_devices(self) -> list[str]:
        """The loop devices backed by this engine's disk files, or by one it had that is
        deleted since (a leak): each workspace disk should back exactly one while it lives."""
        self._remember_disks()
        current = self._disk_files()
        return [
            device["name"]
            for device, key, deleted in self._loop_list()
            if key in current or (key in self.disks_seen and deleted)
        ]

    def _loop_list(self) -> Iterator[tuple[dict[str, Any], tuple[int, int, int], bool]]:
        listed = subprocess.run(
            ["losetup", "--list", "--json", "--output", "NAME,BACK-INO,BACK-MAJ:MIN,BACK-FILE"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for device in (json.loads(listed) if listed.strip() else {}).get("loopdevices", []):
            try:
                major, minor = (int(part) for part in str(device["back-maj:min"]).split(":"))
                inode = int(device["back-ino"])
            except (KeyError, TypeError, ValueError):
                continue
            deleted = str(device.get("back-file") or "").endswith("(deleted)")
            yield device, (major, minor, inode), deleted

    def detach_loop_devices(self) -> None:
        """Detach every loop device whose backing file is one of this engine's, matched by
        device and inode (the keeper names them by its own path, /disks/..., which every
        engine's keeper uses): a file it has now, or one it had that is deleted since.

        The keeper detaches the disks it removes; this is for what a test leaves behind
        (a dockerd killed, a workspace never removed)."""
        current = self._disk_files()
        if not current and not self.disks_seen:
            return
        for device, key, deleted in self._loop_list():
            if key in current or (key in self.disks_seen and deleted):
                _detach(device["name"], self.root)

    def _mounts(self) -> list[str]:
        prefix = str(self.root) + "/"
        found = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                found.append(point)
        return found

    def _unmount_everything(self) -> None:
        for point in sorted(self._mounts(), key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "--lazy", point], capture_output=True)


def _pids() -> list[int]:
    return [
        int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()
    ]


def _detach(device: str, scratch: Path) -> None:
    """`losetup -d`; the device's node may exist only in the keeper's /dev (it makes the ones
    it needs), so one is made in our directory for the purpose if the host has none."""
    path = Path(device)
    if not path.exists():
        number = int(device.removeprefix("/dev/loop"))
        path = scratch / f"loop{number}"
        os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(LOOP_MAJOR, number))
    subprocess.run(["losetup", "--detach", str(path)], capture_output=True, check=True)


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def second_engine() -> Iterator[SecondEngine]:
    """A second engine for the session, with the images the sandboxes need: the disk keeper's
    (the default image, copied from the machine's engine: it takes a minute to build) and
    the test image (built on it, as Boxyard builds it anywhere). The agent's volume is made
    up front, by the runtime's own call: sandboxes.runtime.agent remembers the volume by the
    id() of a runtime object, and a new object may get the id of one that is gone and whose
    volume is on another engine."""
    from sandboxes.images import ensure_image
    from sandboxes.runtime.agent import agent_build

    engine = SecondEngine()
    try:
        engine.start()
        ensure_image(settings.BOXYARD_DISK_IMAGE, progress=lambda line: None)  # on the machine's
        engine.copy_image(settings.BOXYARD_DISK_IMAGE)
        with engine.as_the_runtime():
            ensure_image(settings.BOXYARD_TEST_IMAGE, progress=lambda line: None)
            build = agent_build()
            if build is not None:
                image = settings.BOXYARD_TEST_IMAGE
                engine.runtime.ensure_agent(image, build.content, build.digest)
        yield engine
    finally:
        engine.teardown()


@pytest.fixture
def on_second_engine(second_engine: SecondEngine) -> Iterator[SecondEngine]:
    """Per test: the second engine is the runtime while the test runs; afterwards it runs
    again (whatever the test left it in) with none of the test's containers and volumes."""
    with second_engine.as_the_runtime():
        try:
            yield second_engine
        finally:
            if not second_engine.running:
                second_engine.start()
            second_engine.clean()
