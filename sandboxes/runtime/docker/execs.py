"""Execs in sandbox containers: to completion, streamed, both ways, on a terminal."""

import socket
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

import docker
import docker.errors
from django.conf import settings

from boxyard.errors import N_, ContainerGone
from sandboxes.runtime import ExecResult
from sandboxes.runtime.docker.common import translate
from sandboxes.runtime.streams import (
    STDERR,
    STDOUT,
    SocketDuplex,
    SocketExecStream,
    SocketTerminal,
    close_quietly,
    feed_stdin,
    frames,
)

STREAM_IDLE_TIMEOUT = 300


class ExecsMixin:
    """The exec half of `DockerRuntime` (it gives `api`)."""

    if TYPE_CHECKING:

        @property
        def api(self) -> docker.APIClient: ...

    @translate
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
        started = time.monotonic()
        exec_id, sock = self._start_exec(
            container, argv, env, workdir, stdin is not None, deadline_seconds is not None, user
        )
        kept: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
        totals = {STDOUT: 0, STDERR: 0}
        deadline = started + deadline_seconds if deadline_seconds else None
        writer = feed_stdin(sock, stdin) if stdin is not None else None
        try:
            for stream, data in frames(sock, deadline):
                if stream not in kept:
                    continue
                totals[stream] += len(data)
                room = output_limit - len(kept[stream])
                if room > 0:
                    kept[stream] += data[:room]
        finally:
            close_quietly(sock)
            if writer is not None:
                writer.join(timeout=5)
        return ExecResult(
            exit_code=self._exit_code(exec_id),
            stdout=bytes(kept[STDOUT]),
            stderr=bytes(kept[STDERR]),
            stdout_bytes=totals[STDOUT],
            stderr_bytes=totals[STDERR],
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    @translate
    def exec_stream(
        self,
        container: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
    ) -> SocketExecStream:
        exec_id, sock = self._start_exec(container, argv, env, workdir, False, False, None)
        return SocketExecStream(sock, lambda: self._exit_code(exec_id))

    @translate
    def attach(self, container: str, argv: list[str], *, user: str | None = None) -> SocketDuplex:
        _exec_id, sock = self._start_exec(container, argv, None, None, True, True, user)
        return SocketDuplex(sock)

    @translate
    def open_terminal(
        self,
        container: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cols: int = 80,
        rows: int = 24,
        user: str | None = None,
    ) -> SocketTerminal:
        try:
            created = self.api.exec_create(
                container,
                argv,
                stdout=True,
                stderr=True,
                stdin=True,
                tty=True,
                environment=env or None,
                user=user or settings.BOXYARD_SANDBOX_USER,
            )
        except docker.errors.APIError as error:
            if error.status_code == 409:
                raise ContainerGone(
                    N_("the container is not running: %(why)s", why=error.explanation)
                ) from error
            raise
        raw = self.api.exec_start(created["Id"], socket=True, tty=True)
        # A SocketIO around the socket (its `_sock`, which typeshed leaves out), or over SSH the
        # socket itself.
        sock = cast(socket.socket, getattr(raw, "_sock", raw))
        exec_id = created["Id"]
        terminal = SocketTerminal(
            sock,
            lambda cols, rows: self._resize(exec_id, cols, rows),
            lambda: self._exit_code(exec_id),
        )
        terminal.resize(cols, rows)
        return terminal

    @translate
    def _resize(self, exec_id: str, cols: int, rows: int) -> None:
        try:
            self.api.exec_resize(exec_id, height=rows, width=cols)
        except docker.errors.APIError:
            pass  # the program has ended: nothing left to resize

    def _start_exec(
        self,
        container: str,
        argv: list[str],
        env: dict[str, str] | None,
        workdir: str | None,
        with_stdin: bool,
        with_deadline: bool,
        user: str | None,
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
                # Never the container's own user by default: in a container whose main
                # process is the agent, that is root.
                user=user or settings.BOXYARD_SANDBOX_USER,
            )
        except docker.errors.APIError as error:
            if error.status_code == 409:  # "container is not running"
                raise ContainerGone(
                    N_("the container is not running: %(why)s", why=error.explanation)
                ) from error
            raise
        raw = self.api.exec_start(created["Id"], socket=True)
        # A SocketIO around the socket (its `_sock`, which typeshed leaves out), or over SSH the
        # socket itself.
        sock = cast(socket.socket, getattr(raw, "_sock", raw))
        # Waiting is bounded by the stream's deadline, not by the client's request timeout; a
        # stream without a deadline still gives up after a long silence.
        sock.settimeout(None if with_deadline else STREAM_IDLE_TIMEOUT)
        return created["Id"], sock

    @translate
    def _exit_code(self, exec_id: str) -> int | None:
        # The stream can close a moment before the engine records the exit code.
        for _ in range(50):
            data = self.api.exec_inspect(exec_id)
            if not data.get("Running"):
                return data.get("ExitCode")
            time.sleep(0.01)
        return None
