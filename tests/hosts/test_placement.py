"""Placement over host rows (no containers): capacity, labels, state, images, and concurrent
creates that never overfill a host."""

import threading
from typing import Any

import pytest
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from boxyard.actors import SYSTEM
from boxyard.errors import NoRoom
from hosts.models import DockerHost, HostState
from sandboxes.models import Sandbox, State
from sandboxes.services.creating import create_row
from sandboxes.services.placing import loads_of, place


def _only(*hosts: DockerHost) -> None:
    """The default host (this machine's engine) out of the way: draining."""
    DockerHost.objects.exclude(pk__in=[host.pk for host in hosts]).update(state=HostState.DRAINING)


def _create(pipeline: Any, key: str) -> Sandbox:
    with transaction.atomic():
        return create_row(pipeline, key, {}, SYSTEM)


def test_a_new_sandbox_goes_to_the_least_loaded_host_with_room(make_pipeline, make_host) -> None:
    pipeline = make_pipeline(cpus=1.0, memory_mb=512)
    small = make_host("small", max_sandboxes=2)
    big = make_host("big", max_sandboxes=10)
    _only(small, big)
    placed = [_create(pipeline, f"key-{n}").host.name for n in range(12)]
    # One sandbox fills small to half: big takes four before it is as full (the name
    # settles the tie), small its first at big's sixth, its second when big is full.
    assert placed == ["big"] * 5 + ["small"] + ["big"] * 4 + ["big", "small"]
    assert loads_of([small.pk])[small.pk].sandboxes == 2
    with pytest.raises(NoRoom, match=r"small: full \(2 of 2 sandboxes\); big: full"):
        _create(pipeline, "key-12")


def test_cpus_and_memory_reserved_are_held_to_the_hosts_capacity(make_pipeline, make_host) -> None:
    heavy = make_pipeline(cpus=2.0, memory_mb=1024)
    host = make_host("box", cpus=5.0, memory_mb=8192)
    _only(host)
    _create(heavy, "one")
    _create(heavy, "two")
    with pytest.raises(NoRoom) as refused:
        _create(heavy, "three")  # 6 of 5 CPUs
    assert "box: full (4 of 5 CPUs reserved)" in str(refused.value)
    assert refused.value.retry_after > 0
    assert refused.value.status == 503 and refused.value.code == "no_room"
    assert Sandbox.objects.filter(scope_key="three").count() == 0  # nothing made

    light = make_pipeline(cpus=0.5, memory_mb=8192 - 2048 + 1)
    with pytest.raises(NoRoom, match=r"box: full \(2048 of 8192 MiB reserved\)"):
        _create(light, "four")


def test_a_stopped_sandbox_holds_no_room(make_pipeline, make_host) -> None:
    pipeline = make_pipeline()
    host = make_host("box", max_sandboxes=1)
    _only(host)
    first = _create(pipeline, "one")
    Sandbox.objects.filter(pk=first.pk).update(state=State.STOPPED)
    assert _create(pipeline, "two").host == host


def test_a_pipeline_that_requires_labels_goes_only_where_they_are(make_pipeline, make_host) -> None:
    gpu = make_pipeline(host_labels={"gpu": "1"})
    plain = make_host("plain")
    eu_gpu = make_host("eu-gpu", labels={"gpu": "1", "zone": "eu"})
    _only(plain, eu_gpu)
    assert {_create(gpu, f"k{n}").host.name for n in range(3)} == {"eu-gpu"}
    DockerHost.objects.filter(pk=eu_gpu.pk).update(labels={"gpu": "0"})
    with pytest.raises(NoRoom, match=r"eu-gpu: lacks the labels gpu=1"):
        _create(gpu, "k9")


def test_draining_down_and_imageless_hosts_take_nothing(make_pipeline, make_host) -> None:
    pipeline = make_pipeline()
    draining = make_host("draining", state=HostState.DRAINING)
    down = make_host("down", down_since=timezone.now())
    bare = make_host("bare", images=["boxyard/other:1"])
    unchecked = make_host("unchecked", last_seen_at=None, images=[])
    _only(draining, down, bare, unchecked)
    # A host no check has reached yet is given the benefit of the doubt.
    assert _create(pipeline, "a").host == unchecked
    DockerHost.objects.filter(pk=unchecked.pk).update(state=HostState.DRAINING)
    with pytest.raises(NoRoom) as refused:
        _create(pipeline, "b")
    words = str(refused.value)
    assert "draining: draining" in words
    assert "down: down" in words
    assert f"bare: has no image {pipeline.effective_image}" in words


def test_image_references_compare_with_their_tag(make_pipeline, make_host) -> None:
    pipeline = make_pipeline()
    pipeline.image = "python"  # as the engine lists it: python:latest
    host = make_host("box", images=["python:latest"])
    _only(host)
    assert place(pipeline) == host


@pytest.mark.django_db(transaction=True)
def test_forty_concurrent_opens_never_overfill_a_host(make_pipeline, make_host) -> None:
    """40 creates at once for 3 hosts of 10: 30 are placed, 10 refused, no host over 10
    (PostgreSQL: the hosts' rows locked; SQLite: one writing transaction at a time)."""
    pipeline = make_pipeline(max_live_sandboxes=100)
    hosts = [make_host(f"h{n}", max_sandboxes=10) for n in range(3)]
    _only(*hosts)
    start = threading.Barrier(40)
    outcomes: list[str] = []

    def open_one(n: int) -> None:
        try:
            start.wait()
            outcomes.append(_create(pipeline, f"key-{n}").host.name)
        except NoRoom:
            outcomes.append("refused")
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=open_one, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == 40
    assert outcomes.count("refused") == 10
    loads = loads_of([host.pk for host in hosts])
    assert [loads[host.pk].sandboxes for host in hosts] == [10, 10, 10]
