"""The machine's engine at another address: a unix socket of the tests' own that passes
connections through to the engine's (`Forwarder`), for tests that cut Boxyard off from the
engine and give it back without touching the engine itself."""

import os
import socket
import threading
from contextlib import suppress
from pathlib import Path

from django.conf import settings

# --- the machine's engine at another address --------------------------------------------------


def machine_engine_socket() -> str:
    """The path of the machine's engine's unix socket (the engine Boxyard is configured with)."""
    host = (
        settings.BOXYARD_DOCKER_HOST
        or os.environ.get("DOCKER_HOST")
        or "unix:///var/run/docker.sock"
    )
    assert host.startswith("unix://"), f"the machine's engine is not on a unix socket: {host}"
    return host.removeprefix("unix://")


class Forwarder:
    """The machine's engine made reachable at another unix socket: each connection accepted
    at `path` is joined to a new connection to the engine's socket, bytes pumped both ways
    (half-closes passed on, as the engine's hijacked exec streams need). Nothing listens at
    `path` before `start` or after `close`."""

    def __init__(self, path: Path, target: str | None = None) -> None:
        self.path = path
        self.target = target or machine_engine_socket()
        self._server: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.connections = 0  # accepted and joined to the engine

    def start(self) -> "Forwarder":
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), name="forwarder", daemon=True).start()
        return self

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            server.close()
        with self._lock:
            connections, self._open = self._open, set()
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        with suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> "Forwarder":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target)
            except OSError:
                client.close()
                upstream.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
                self.connections += 1
            threading.Thread(
                target=self._join, args=(client, upstream), name="forwarder-pump", daemon=True
            ).start()

    def _join(self, client: socket.socket, upstream: socket.socket) -> None:
        back = threading.Thread(
            target=_pump, args=(upstream, client), name="forwarder-pump", daemon=True
        )
        back.start()
        _pump(client, upstream)
        back.join()
        with self._lock:
            self._open -= {client, upstream}
        client.close()
        upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
