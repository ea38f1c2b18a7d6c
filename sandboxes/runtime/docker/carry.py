"""Carrying a workspace from one engine to another (a sandbox moved between Docker hosts): its
volume read as a tar stream on one engine and written into a volume on the other, through the
engines' archive API, so it works between any two engines, local or remote, without a shared
file system. The stream goes through Boxyard in chunks; it is never held whole.

Each side is a helper container of the sandbox's own image with the volume mounted: created,
never started (the engine mounts a created container's volumes for its archive calls), and
removed when its side is done; a helper left by a crash carries the role label, which the
reconciler removes."""

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import docker
import docker.errors
import requests
from docker.types import Mount as DockerMount

from sandboxes.runtime import LABEL_ROLE, labels_for
from sandboxes.runtime.docker.common import translate, unreachable

CARRY_MOUNT = "/carry"
_CHUNK_BYTES = 1024 * 1024


class CarryMixin:
    """The carrying of `DockerRuntime` (it gives `api`)."""

    if TYPE_CHECKING:

        @property
        def api(self) -> docker.APIClient: ...

    @translate
    def read_workspace(self, volume: str, image: str) -> Iterator[bytes]:
        helper = self._carrier(volume, image, "workspace-reader")
        try:
            stream, _stat = self.api.get_archive(helper, CARRY_MOUNT, chunk_size=_CHUNK_BYTES)
        except BaseException:
            self._remove_carrier(helper)
            raise
        return self._chunks(stream, helper)

    @translate
    def write_workspace(self, volume: str, image: str, archive: Iterable[bytes]) -> None:
        helper = self._carrier(volume, image, "workspace-writer")
        try:
            # The archive's entries are `carry/...`: written under /, they land in the volume,
            # its root's owner and mode included.
            self.api.put_archive(helper, "/", archive)
        finally:
            self._remove_carrier(helper)

    def _chunks(self, stream: Iterator[bytes], helper: str) -> Iterator[bytes]:
        try:
            yield from stream
        except (requests.exceptions.RequestException, ConnectionError) as error:
            raise unreachable(self, error) from error
        finally:
            self._remove_carrier(helper)

    def _carrier(self, volume: str, image: str, role: str) -> str:
        created: dict[str, Any] = self.api.create_container(
            image,
            ["true"],
            user="0:0",
            labels=labels_for(**{LABEL_ROLE: role}),
            host_config=self.api.create_host_config(
                mounts=[DockerMount(target=CARRY_MOUNT, source=volume, type="volume")],
                network_mode="none",
                cap_drop=["ALL"],
            ),
            network_disabled=True,
        )
        return str(created["Id"])

    def _remove_carrier(self, helper: str) -> None:
        try:
            self.api.remove_container(helper, force=True)
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            pass  # the reconciler removes a helper left behind (it carries the role label)
