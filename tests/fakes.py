"""A fake container runtime for pure-logic tests (leases, scope, quotas).

Behaviour (isolation, limits, exec, files) is proven against the real engine elsewhere;
this fake only records what was asked and answers like an engine that always works.
"""

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from sandboxes.runtime import (
    LABEL_AGENT,
    LABEL_WORKSPACE_UID,
    ContainerInfo,
    ContainerSpec,
    ExecResult,
)

_ids = itertools.count(1)


@dataclass
class FakeRuntime:
    containers: dict[str, ContainerInfo] = field(default_factory=dict)
    volumes: set[str] = field(default_factory=set)
    execs: list[list[str]] = field(default_factory=list)

    def ping(self) -> None:
        pass

    def image_labels(self, image: str) -> dict[str, str] | None:
        return {LABEL_WORKSPACE_UID: settings.BOXYARD_SANDBOX_USER.split(":")[0]}

    def pull(self, image: str) -> None:
        pass

    def import_image(self, tar_path: Path, reference: str, changes: list[str]) -> None:
        pass

    def remove_image(self, reference: str) -> None:
        pass

    def ensure_volume(self, name: str, labels: dict[str, str]) -> bool:
        created = name not in self.volumes
        self.volumes.add(name)
        return created

    def remove_volume(self, name: str) -> None:
        self.volumes.discard(name)

    def list_volumes(self, labels: dict[str, str]) -> list[str]:
        return sorted(self.volumes)

    def prepare_volume(self, name: str, image: str, user: str) -> None:
        pass

    def ensure_container(self, spec: ContainerSpec) -> ContainerInfo:
        if spec.name not in self.containers:
            self.containers[spec.name] = ContainerInfo(
                id=f"fake{next(_ids):060d}", name=spec.name, status="running",
                # No agent runs in a fake container: its execs take the one-shot path.
                labels={k: v for k, v in spec.labels.items() if k != LABEL_AGENT},
            )
        return self.containers[spec.name]

    def inspect_container(self, name_or_id: str) -> ContainerInfo | None:
        return self._find(name_or_id)

    def _find(self, name_or_id: str) -> ContainerInfo | None:
        for info in self.containers.values():
            if name_or_id in (info.id, info.name):
                return info
        return None

    def list_containers(self, labels: dict[str, str]) -> list[ContainerInfo]:
        return list(self.containers.values())

    def stop_container(self, name_or_id: str, timeout: int = 5) -> None:
        pass

    def remove_container(self, name_or_id: str) -> None:
        if (info := self._find(name_or_id)) is not None:
            del self.containers[info.name]

    def exec(self, container: str, argv: list[str], **kwargs: object) -> ExecResult:
        self.execs.append(argv)
        return ExecResult(0, b"", b"", 0, 0, 1)

    def exec_stream(self, container: str, argv: list[str], **kwargs: object) -> object:
        raise NotImplementedError

    def attach(self, container: str, argv: list[str]) -> object:
        raise NotImplementedError("the fake runtime has no agent")

    def ensure_agent(self, image: str, binary: bytes, digest: str) -> str:
        return f"fake-agent-{digest[:16]}"
