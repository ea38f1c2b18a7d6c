"""The engine seen from outside Boxyard, for the tests of its event stream: the docker
command line, and a marker event that proves a follower has handled every event before it."""

import os
import subprocess
import uuid
from typing import Any

import pytest
from django.conf import settings

from sandboxes.runtime import labels_for
from sandboxes.services import watching
from tests.conftest import wait_for

# What the tests assert; the benchmark measures the real figure (well under a second).
BOUND_SECONDS = 5


def docker(*argv: str) -> None:
    """The docker command line: someone acting on the engine behind Boxyard's back."""
    env = dict(os.environ)
    if settings.BOXYARD_DOCKER_HOST:
        env["DOCKER_HOST"] = settings.BOXYARD_DOCKER_HOST
    subprocess.run(["docker", *argv], check=True, capture_output=True, env=env, timeout=60)


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The events the followers of this process handled, as (action, container name), in
    the order they were handled (each follower handles its stream's events in order)."""
    seen: list[tuple[str, str]] = []

    def recording(event: Any) -> bool:
        try:
            return original(event)
        finally:
            seen.append((event.action, event.name))

    original = watching.handle
    monkeypatch.setattr(watching, "handle", recording)
    return seen


def marker() -> str:
    """A container of this deployment that starts and ends at once: its "die" comes in the
    engine's stream after every event before it (a follower that handled it has handled
    those)."""
    name = f"marker-{uuid.uuid4().hex[:8]}"
    labels = [f"--label={key}={value}" for key, value in labels_for().items()]
    docker("run", "--rm", "--name", name, *labels, settings.BOXYARD_TEST_IMAGE, "true")
    return name


def handled_by_all(handled: list[tuple[str, str]], name: str, followers: int = 1) -> None:
    """Until every one of `followers` has handled the marker `name`'s "die"."""
    wait_for(lambda: handled.count(("die", name)) >= followers, BOUND_SECONDS, lambda: f"{handled}")
