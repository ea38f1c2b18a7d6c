"""The one service that gives the engine of a sandbox or of a Docker host (`hosts.engines`),
and the runtime finding a host's engine through it, knowing no row itself."""

from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone

from boxyard.errors import HostUnavailable
from hosts.engines import get_runtime, machine_runtime, runtime_of
from hosts.models import DockerHost, default_host_pk
from sandboxes.runtime import engine_at, set_runtime, swapped


def test_this_machines_engine_is_the_default_hosts_for_the_services_and_the_runtime(
    db: Any,
) -> None:
    assert swapped() is None
    assert get_runtime() is machine_runtime()
    assert get_runtime(default_host_pk()) is machine_runtime()
    assert engine_at(None) is machine_runtime()  # installed by the hosts app when Django starts
    assert runtime_of(SimpleNamespace(host_id=default_host_pk())) is machine_runtime()


@pytest.mark.django_db
def test_a_host_marked_down_is_refused_to_the_services_and_the_runtime() -> None:
    down = DockerHost.objects.create(
        name="edge-down", url="tcp://192.0.2.1:2376", down_since=timezone.now()
    )
    with pytest.raises(HostUnavailable, match="edge-down is down"):
        runtime_of(SimpleNamespace(host_id=down.pk))
    with pytest.raises(HostUnavailable, match="edge-down is down"):
        engine_at(down.pk)


def test_a_swapped_engine_serves_every_host(fake_runtime: Any) -> None:
    assert swapped() is fake_runtime
    assert get_runtime() is fake_runtime and get_runtime(41) is fake_runtime
    assert runtime_of(SimpleNamespace(host_id=42)) is fake_runtime
    assert engine_at(43) is fake_runtime
    set_runtime(None)
    assert swapped() is None
