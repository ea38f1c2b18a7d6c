"""The Docker Engine runtime: the only package of Boxyard that imports docker-py.

It uses the low-level `APIClient` (one per process, with a connection pool large enough
for concurrent requests) and adds nothing but the hardening every sandbox gets. `engine`
holds the runtime (images, volumes, containers), `execs` and `events` its halves for execs
and the engine's event stream, `disks` the workspaces' disks, `common` the error mapping.
"""

from sandboxes.runtime.docker.engine import DockerRuntime

__all__ = ["DockerRuntime"]
