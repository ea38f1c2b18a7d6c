"""A fake container runtime for pure-logic tests (leases, scope, quotas).

Behaviour (isolation, limits, exec, files) is proven against the real engine elsewhere;
this fake only records what was asked and answers like an engine that always works. It
keeps the runtime's contract (`sandboxes.runtime.Runtime`): containers and volumes carry the
labels they were made with, and every listing and event stream gives only those that carry
all the labels asked for; removing what is gone already is no error.
"""

import itertools
import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from boxyard.errors import AgentGone
from sandboxes.runtime import (
    LABEL_WORKSPACE_UID,
    ContainerEvent,
    ContainerInfo,
    ContainerSpec,
    EngineFacts,
    ExecResult,
    WorkspaceInfo,
)
from sandboxes.runtime.port import PROTOCOL

_ids = itertools.count(1)


@dataclass
class FakeRuntime:
    containers: dict[str, ContainerInfo] = field(default_factory=dict)
    volumes: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> its labels
    execs: list[list[str]] = field(default_factory=list)
    happened: list[ContainerEvent] = field(default_factory=list)
    _news: threading.Condition = field(default_factory=threading.Condition)

    def ping(self) -> None:
        pass

    def engine_facts(self, timeout: float) -> EngineFacts:
        return EngineFacts(version="fake", cpus=2, memory_bytes=2**31, images=[])

    def read_workspace(self, volume: str, image: str) -> Iterator[bytes]:
        return iter([b""])  # a fake workspace holds no files

    def write_workspace(self, volume: str, image: str, archive: Iterable[bytes]) -> None:
        for _chunk in archive:
            pass

    def image_labels(self, image: str) -> dict[str, str] | None:
        return {LABEL_WORKSPACE_UID: settings.BOXYARD_SANDBOX_USER.split(":")[0]}

    def pull(self, image: str) -> None:
        pass

    def import_image(self, tar_path: Path, reference: str, changes: list[str]) -> None:
        pass

    def remove_image(self, reference: str) -> None:
        pass

    def ensure_workspace(self, name: str, labels: dict[str, str], size_mb: int) -> WorkspaceInfo:
        created = name not in self.volumes
        self.volumes.setdefault(name, dict(labels))
        return WorkspaceInfo(name=name, limit_bytes=size_mb * 1024 * 1024, created=created)

    def remove_volume(self, name: str) -> None:
        self.volumes.pop(name, None)

    def list_volumes(self, labels: dict[str, str]) -> list[str]:
        return sorted(name for name, carried in self.volumes.items() if _carries(carried, labels))

    def remove_workspace(self, name: str) -> None:
        self.remove_volume(name)

    def remove_orphan_disks(self, older_than_seconds: float) -> list[str]:
        return []  # a fake workspace is its volume: nothing is left behind

    def set_pids_limit(self, name_or_id: str, limit: int) -> None:
        pass

    def ensure_container(self, spec: ContainerSpec) -> ContainerInfo:
        if spec.name not in self.containers:
            self.containers[spec.name] = ContainerInfo(
                id=f"fake{next(_ids):060d}",
                name=spec.name,
                status="running",
                # Made with the agent, as every sandbox is (`attach`: `FakeAgent`).
                labels=dict(spec.labels),
            )
            self._happen(self.containers[spec.name], "start")
        return self.containers[spec.name]

    def inspect_container(self, name_or_id: str) -> ContainerInfo | None:
        return self._find(name_or_id)

    def _find(self, name_or_id: str) -> ContainerInfo | None:
        for info in self.containers.values():
            if name_or_id in (info.id, info.name):
                return info
        return None

    def list_containers(self, labels: dict[str, str]) -> list[ContainerInfo]:
        return [info for info in self.containers.values() if _carries(info.labels, labels)]

    def stop_container(self, name_or_id: str, timeout: int = 5) -> None:
        pass

    def remove_container(self, name_or_id: str) -> None:
        if (info := self._find(name_or_id)) is not None:
            if info.running:
                self._happen(info, "die", exit_code=137)
            del self.containers[info.name]
            self._happen(info, "destroy")

    def kill(self, name_or_id: str) -> None:
        """What `docker kill` does: the container stops, and stays."""
        info = self._find(name_or_id)
        assert info is not None, f"no container {name_or_id}"
        self.containers[info.name] = replace(info, status="exited", exit_code=137)
        self._happen(info, "die", exit_code=137)

    def events(self, labels: dict[str, str], since: float | None = None) -> "FakeEvents":
        return FakeEvents(self, labels, time.time() if since is None else since)

    def _happen(self, info: ContainerInfo, action: str, exit_code: int | None = None) -> None:
        with self._news:
            self.happened.append(
                ContainerEvent(
                    container_id=info.id,
                    name=info.name,
                    action=action,
                    labels=dict(info.labels),
                    time=time.time(),
                    exit_code=exit_code,
                )
            )
            self._news.notify_all()

    def exec(self, container: str, argv: list[str], **kwargs: object) -> ExecResult:
        self.execs.append(argv)
        return ExecResult(0, b"", b"", 0, 0, 1)

    def exec_stream(self, container: str, argv: list[str], **kwargs: object) -> object:
        raise NotImplementedError

    def attach(self, container: str, argv: list[str], user: str | None = None) -> "FakeAgent":
        info = self._find(container)
        if info is None or not info.running:
            raise AgentGone("the container does not run")
        return FakeAgent(lambda: (found := self._find(container)) is not None and found.running)

    def agent_socket(self, container: str) -> None:
        return None  # no agent here: file operations take the engine's execs

    def ensure_agent(self, image: str, binary: bytes, digest: str) -> str:
        return f"fake-agent-{digest[:16]}"


class FakeEvents:
    """The fake engine's events from `since`, as they happen, until closed."""

    def __init__(self, fake: FakeRuntime, labels: dict[str, str], since: float) -> None:
        self._fake, self._labels, self._since = fake, labels, since
        self._closed = False

    def __iter__(self) -> Iterator[ContainerEvent]:
        given = 0
        while True:
            with self._fake._news:
                while not self._closed and len(self._fake.happened) <= given:
                    self._fake._news.wait(timeout=1)
                if self._closed:
                    return
                news, given = self._fake.happened[given:], len(self._fake.happened)
            for event in news:
                if event.time >= self._since and _carries(event.labels, self._labels):
                    yield event

    def close(self) -> None:
        with self._fake._news:
            self._closed = True
            self._fake._news.notify_all()


def _carries(labels: dict[str, str], wanted: dict[str, str]) -> bool:
    """Whether an object with `labels` matches a filter on `wanted` (all of them, as the
    engine's label filters do)."""
    return wanted.items() <= labels.items()


class FakeAgent:
    """The agent's bridge as a fake container runs it: it answers every request at once, as
    an agent of the current protocol whose every command succeeds with no output; the
    bridge ends when its container stops (`running` says whether it still runs)."""

    def __init__(self, running: Callable[[], bool]) -> None:
        self._out: queue.Queue[bytes | None] = queue.Queue()
        self._running = running

    def send(self, data: bytes) -> None:
        if not self._running():
            self.close()
            return
        for line in data.splitlines():
            request = json.loads(line)
            answer: dict[str, object] = {"id": request["id"], "ok": True}
            if request["op"] == "ping":
                answer["version"] = str(PROTOCOL)
            elif request["op"] in ("run", "status", "wait"):
                answer.update(finished=True, exit_code=0, stdout="", stderr="", duration_ms=1)
            self._out.put(json.dumps(answer).encode() + b"\n")

    def frames(self) -> Iterator[tuple[int, bytes]]:
        while (data := self._out.get()) is not None:
            yield 1, data

    def close(self) -> None:
        self._out.put(None)
