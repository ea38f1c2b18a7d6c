"""The default host (this machine's engine): made by the migrations and at start-up by one
named service; reading its id never makes it."""

from types import SimpleNamespace
from typing import Any

import pytest

from config.workers import _consume_the_hosts_queues
from hosts.models import DockerHost, default_host_pk
from hosts.services import ensure_default_host

pytestmark = pytest.mark.django_db


def test_reading_the_default_host_makes_no_row() -> None:
    local = DockerHost.objects.get(is_default=True)  # made by the migrations
    assert (local.name, local.url) == ("local", "") and default_host_pk() == local.pk
    local.delete()
    with pytest.raises(DockerHost.DoesNotExist, match="no default Docker host"):
        default_host_pk()
    assert not DockerHost.objects.filter(is_default=True).exists()


def test_start_up_makes_the_default_host_again_once() -> None:
    DockerHost.objects.filter(is_default=True).delete()
    made = ensure_default_host()
    assert (made.name, made.url, made.is_default) == ("local", "", True)
    assert ensure_default_host().pk == made.pk == default_host_pk()
    assert DockerHost.objects.filter(is_default=True).count() == 1


def test_a_starting_worker_makes_the_default_host_and_consumes_its_queue(settings: Any) -> None:
    settings.BOXYARD_HOST_QUEUES = True
    settings.BOXYARD_WORKER_HOSTS = "*"
    DockerHost.objects.filter(is_default=True).delete()
    selected: list[str] = []
    queues = SimpleNamespace(select_add=selected.append)
    worker = SimpleNamespace(app=SimpleNamespace(amqp=SimpleNamespace(queues=queues)))
    _consume_the_hosts_queues(sender="worker@test", instance=worker)
    local = DockerHost.objects.get(pk=default_host_pk())
    assert selected == [settings.CELERY_TASK_DEFAULT_QUEUE, local.queue]
