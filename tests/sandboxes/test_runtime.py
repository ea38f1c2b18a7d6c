"""The runtime's contract, on the real engine, where the fake runtime (tests/fakes.py) mimics
it: listings and event streams filtered by labels (every label asked for), and removing what
is gone already is no error; and an answer of the disk keeper that the engine cut short is
never taken for a whole one."""

import logging
import uuid
from typing import Any

import pytest
from django.conf import settings

from boxyard.errors import RuntimeFailure
from sandboxes.runtime import LABEL_SANDBOX, ContainerSpec, labels_for

pytestmark = pytest.mark.docker


def _spec(**extra: str) -> ContainerSpec:
    return ContainerSpec(
        name=f"by-test-{uuid.uuid4().hex[:12]}",
        image=settings.BOXYARD_TEST_IMAGE,
        labels=labels_for(**extra),
        user=settings.BOXYARD_SANDBOX_USER,
        mounts=(),
        memory_mb=64,
        pids_limit=32,
        tmp_mb=8,
    )


def test_listings_give_only_what_carries_every_label(docker_engine: Any) -> None:
    first = docker_engine.ensure_container(_spec(**{LABEL_SANDBOX: "first"}))
    second = docker_engine.ensure_container(_spec(**{LABEL_SANDBOX: "second"}))
    docker_engine.ensure_workspace("by-ws-test-first", labels_for(**{LABEL_SANDBOX: "first"}), 16)

    ours = {info.id for info in docker_engine.list_containers(labels_for())}
    assert {first.id, second.id} <= ours
    only_first = docker_engine.list_containers(labels_for(**{LABEL_SANDBOX: "first"}))
    assert [info.id for info in only_first] == [first.id]
    assert docker_engine.list_containers(labels_for(**{LABEL_SANDBOX: "none"})) == []
    assert docker_engine.list_volumes(labels_for(**{LABEL_SANDBOX: "first"})) == [
        "by-ws-test-first"
    ]
    assert docker_engine.list_volumes(labels_for(**{LABEL_SANDBOX: "second"})) == []


def test_removing_what_is_gone_is_no_error(docker_engine: Any) -> None:
    info = docker_engine.ensure_container(_spec())
    docker_engine.remove_container(info.id)
    docker_engine.remove_container(info.id)
    docker_engine.ensure_workspace("by-ws-test-gone", labels_for(), 16)
    docker_engine.remove_workspace("by-ws-test-gone")
    docker_engine.remove_workspace("by-ws-test-gone")
    assert docker_engine.inspect_container(info.id) is None


def test_the_pids_limit_of_a_running_container_can_change(docker_engine: Any) -> None:
    from boxyard.errors import ContainerGone

    info = docker_engine.ensure_container(_spec())
    docker_engine.set_pids_limit(info.id, 77)
    assert docker_engine.api.inspect_container(info.id)["HostConfig"]["PidsLimit"] == 77
    docker_engine.remove_container(info.id)
    with pytest.raises(ContainerGone):
        docker_engine.set_pids_limit(info.id, 32)


def test_an_answer_of_the_disk_keeper_that_the_engine_cut_is_asked_again(
    docker_engine: Any, monkeypatch: Any, caplog: Any
) -> None:
    disks = docker_engine._disks
    name = f"by-ws-test-{uuid.uuid4().hex[:8]}"
    real = disks._exec
    cut = ["", "/dev/loop"]  # nothing at all, then a line without its end
    monkeypatch.setattr(disks, "_exec", lambda args: cut.pop(0) if cut else real(args))
    try:
        with caplog.at_level(logging.WARNING, logger="sandboxes.runtime.docker.disks"):
            info = docker_engine.ensure_workspace(name, labels_for(), 16)
        assert info.limit_bytes == 16 * 1024 * 1024
        assert caplog.text.count("came back cut") == 2
        # An engine that never gives the whole answer: a clear error, not a parse of half.
        monkeypatch.setattr(disks, "_exec", lambda args: "")
        with pytest.raises(RuntimeFailure, match=f"{name}: ensure gave no answer"):
            docker_engine.ensure_workspace(name, labels_for(), 16)
    finally:
        monkeypatch.setattr(disks, "_exec", real)
        docker_engine.remove_workspace(name)
