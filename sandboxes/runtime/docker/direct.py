"""The sandbox agent's own socket, reached without the engine where the engine runs here.

The agent listens on a unix socket on its root-only tmpfs inside the container. A process on
the engine's own machine that may enter other processes' file systems (root, as the engine
itself is) can connect to it through the container's root as /proc shows it: a file then
goes between Boxyard and the agent over a local socket instead of through the engine's exec
streams (the engine, its shim and a pipe each copying every byte). Everywhere else (an
engine on another machine, a Boxyard that runs unprivileged or in a container of its own)
there is no such path and this answers None: the caller uses the engine's execs as before.

The path is taken through a descriptor of the container's first process, looked up by its
id and checked to be in the container's control group, so a process id that was reused by
something else between the look-up and the connection can never lead elsewhere. Under that
root, the agent's directory is opened without following a symlink (an absolute one would be
resolved from this machine's root), and what is in it is root's, on the agent's own tmpfs,
out of the sandbox user's reach. The socket itself is opened without following a symlink,
checked to be a socket owned by the agent's user, and connected to through that descriptor:
nothing the sandbox runs (even as root) or its image ships can redirect the connection.
"""

import logging
import os
import socket
import stat
import threading
from typing import TYPE_CHECKING

import docker
import docker.errors

from sandboxes.runtime import AGENT_STATE

log = logging.getLogger(__name__)

AGENT_SOCKET_NAME = "agent.sock"  # in AGENT_STATE, a directory of its own (no "/" in it)
# A connection is made at once or not at all: the agent answers from its own goroutine.
_CONNECT_SECONDS = 5.0
_REMEMBERED = 10_000


class DirectMixin:
    """The direct path of `DockerRuntime` (it gives `api`)."""

    if TYPE_CHECKING:

        @property
        def api(self) -> docker.APIClient: ...

    # container → (its first process, its full id), or None where it cannot be reached from
    # here (an engine on another machine).
    def __init__(self) -> None:
        self._found: dict[str, tuple[int, str] | None] = {}
        self._found_lock = threading.Lock()
        self._direct_refused = False

    def agent_socket(self, container: str) -> socket.socket | None:
        if self._direct_refused:
            return None
        for fresh in (False, True):
            found = self._first_process(container, fresh)
            if found is None:
                return None
            try:
                return _connect(*found)
            except PermissionError:
                # Not allowed to enter other processes' file systems: never will be.
                log.info("the agent's socket is out of this process's reach; execs it is")
                self._direct_refused = True
                return None
            except _NotThatContainer:
                # Restarted since (looked up again), or not on this machine (remembered).
                with self._found_lock:
                    if fresh:
                        self._found[container] = None
                    else:
                        self._found.pop(container, None)
            except NotASocket as error:
                log.warning("%s; the engine's execs it is", error)
                return None
            except OSError:
                return None  # the agent does not listen (yet): the engine's execs this time
        return None

    def _first_process(self, container: str, fresh: bool) -> tuple[int, str] | None:
        with self._found_lock:
            if not fresh and container in self._found:
                return self._found[container]
        try:
            data = self.api.inspect_container(container)
            state, full_id = data["State"], str(data["Id"])
        except (docker.errors.DockerException, OSError, KeyError):
            return None
        pid = int(state.get("Pid") or 0)
        if not state.get("Running") or pid <= 0:
            return None
        with self._found_lock:
            if len(self._found) > _REMEMBERED:
                self._found.clear()
            self._found[container] = (pid, full_id)
        return pid, full_id


class _NotThatContainer(Exception):
    """The process id now belongs to another container's process, or to none."""


class NotASocket(OSError):
    """What is at the agent's socket's name is not a socket the agent made (a symlink, a
    file, a socket of another user): never connected to."""


def _connect(pid: int, container: str) -> socket.socket:
    try:
        process = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise _NotThatContainer(f"no process {pid} here") from None
    try:
        # Checked through the descriptor, which stays the process looked at: if it has ended,
        # the root below is gone with it rather than another process's.
        try:
            cgroup = os.open("cgroup", os.O_RDONLY, dir_fd=process)
            try:
                groups = os.read(cgroup, 64 * 1024)
            finally:
                os.close(cgroup)
        except (FileNotFoundError, ProcessLookupError):
            raise _NotThatContainer(f"process {pid} has ended") from None
        if container.encode() not in groups:
            raise _NotThatContainer(f"process {pid} is not in container {container[:12]}")
        # The agent's directory is opened without following a symlink: one there (an image
        # could ship one where the tmpfs is mounted) would be read from this machine's root,
        # not the container's. So is the socket in it: root in the container could put a
        # symlink there to a socket of this machine. It must be a socket, and the agent's
        # (owned by the user the container's first process runs as, as this machine sees it).
        owner = os.fstat(process).st_uid
        root = os.open("root", os.O_PATH | os.O_DIRECTORY, dir_fd=process)
        try:
            state = os.open(
                AGENT_STATE.lstrip("/"), os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root
            )
        finally:
            os.close(root)
        try:
            found = os.open(AGENT_SOCKET_NAME, os.O_PATH | os.O_NOFOLLOW, dir_fd=state)
        finally:
            os.close(state)
        try:
            facts = os.fstat(found)
            if not stat.S_ISSOCK(facts.st_mode) or facts.st_uid != owner:
                raise NotASocket(
                    f"{AGENT_STATE}/{AGENT_SOCKET_NAME} in container {container[:12]} is not "
                    "the agent's socket"
                )
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(_CONNECT_SECONDS)
            try:  # the socket held open above, whatever has been put at its name since
                sock.connect(f"/proc/self/fd/{found}")
            except BaseException:
                sock.close()
                raise
            return sock
        finally:
            os.close(found)
    finally:
        os.close(process)
