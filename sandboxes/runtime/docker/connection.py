"""How Boxyard reaches a Docker Engine: this machine's (DOCKER_HOST's), or a Docker host's
over a unix socket, TCP with TLS, or SSH."""

from dataclasses import dataclass
from typing import Any

import docker
import docker.tls
import docker.utils


@dataclass(frozen=True)
class Connection:
    """How to reach an engine: its URL (empty: as DOCKER_HOST says) and, for tcp://, the
    TLS files (paths) of a client Boxyard is to the engine. The `host` name is what errors
    call it (empty: this machine's engine)."""

    url: str = ""
    host: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""


def client_options(connection: Connection) -> dict[str, Any]:
    """docker-py's APIClient arguments for `connection` (ssh:// through the ssh client)."""
    if not connection.url:
        return dict(docker.utils.kwargs_from_env())
    options: dict[str, Any] = {"base_url": connection.url}
    if connection.tls_cert:
        options["tls"] = docker.tls.TLSConfig(
            client_cert=(connection.tls_cert, connection.tls_key),
            ca_cert=connection.tls_ca,
            verify=True,
        )
        options["base_url"] = connection.url.replace("tcp://", "https://", 1)
    if connection.url.startswith("ssh://"):
        options["use_ssh_client"] = True
    return options
