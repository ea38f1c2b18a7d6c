"""The fake runtime keeps the runtime's contract where pure-logic tests lean on it: a listing
or an event stream gives only what carries every label asked for, as the engine does. The
real engine's side of the same contract is checked in tests/sandboxes/test_runtime.py."""

import itertools
import threading
import time
from typing import Any

import pytest

from sandboxes import services
from sandboxes.models import Sandbox, StopReason
from sandboxes.runtime import ContainerSpec, agent, labels_for
from sandboxes.services.watching import Follower
from tests.conftest import CHAT, wait_for
from tests.fakes import FakeRuntime

_names = itertools.count()


def _spec(**labels: str) -> ContainerSpec:
    return ContainerSpec(
        name=f"c{next(_names)}", image="img", labels=labels, user="10001", mounts=()
    )


def test_listings_give_only_what_carries_every_label() -> None:
    fake = FakeRuntime()
    ours = fake.ensure_container(_spec(**labels_for(**{"io.boxyard.sandbox": "a"})))
    fake.ensure_container(_spec(**{"io.boxyard.managed": "1", "io.boxyard.deployment": "other"}))
    fake.ensure_container(_spec())
    fake.ensure_workspace("ws-ours", labels_for(), 16)
    fake.ensure_workspace("ws-theirs", {"io.boxyard.deployment": "other"}, 16)

    assert fake.list_containers(labels_for()) == [ours]
    assert fake.list_containers(labels_for(**{"io.boxyard.sandbox": "b"})) == []
    assert len(fake.list_containers({})) == 3
    assert fake.list_volumes(labels_for()) == ["ws-ours"]
    assert fake.list_volumes({}) == ["ws-ours", "ws-theirs"]


def test_the_event_stream_gives_only_what_carries_every_label() -> None:
    fake = FakeRuntime()
    stream = fake.events(labels_for(), since=0)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(e.name for e in stream), daemon=True)
    reader.start()
    other = fake.ensure_container(_spec(**{"io.boxyard.deployment": "other"}))
    ours = fake.ensure_container(_spec(**labels_for()))
    fake.remove_container(other.name)
    fake.remove_container(ours.name)
    fake.remove_container(ours.name)  # gone already: no error, no event
    deadline = time.monotonic() + 5
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stream.close()
    reader.join(5)
    assert seen == [ours.name, ours.name, ours.name]  # start, die, destroy


@pytest.mark.django_db(transaction=True)  # the follower reads the rows from a thread of its own
def test_the_fake_runtime_tells_a_follower_what_the_engine_would(
    fake_runtime: FakeRuntime, pipeline: Any, bot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake honours the engine's event contract (tests/security/test_engine_events.py),
    for pure-logic tests that want a follower."""
    # The fake's agent volume must not be remembered for the real engine's later sandboxes.
    monkeypatch.setattr(agent, "_volumes", {})
    follower = Follower().start()
    try:
        assert follower.following.wait(10)
        killed = services.open_sandbox(pipeline, CHAT, bot).sandbox
        closed = services.open_sandbox(pipeline, {**CHAT, "launcher_id": "other"}, bot).sandbox
        services.close_sandbox(closed, bot)
        fake_runtime.kill(killed.container_id)
        wait_for(lambda: Sandbox.objects.get(pk=killed.pk).stop_reason == StopReason.LOST, 5)
    finally:
        follower.stop()
    assert Sandbox.objects.get(pk=closed.pk).stop_reason == StopReason.CLOSED
    assert [e.action for e in fake_runtime.happened] == [
        "start",
        "start",
        "die",
        "destroy",
        "die",
        "destroy",
    ]
