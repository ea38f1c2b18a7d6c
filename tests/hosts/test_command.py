"""`manage.py hosts` and `manage.py build_images --host`: what the README shows an operator
running, against the second engine of the tests (a real host) and an address nothing
answers at."""

import io

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from hosts.models import DockerHost, HostState
from sandboxes.models import Event
from tests.engines import SecondEngine, second_engine  # noqa: F401 - fixture

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def _hosts(*args: str) -> str:
    out = io.StringIO()
    call_command("hosts", *args, stdout=out)
    return out.getvalue()


def test_an_operator_adds_lists_checks_and_drains_a_host(second_engine: SecondEngine) -> None:
    added = _hosts(
        "add", "second", "--url", second_engine.url, "--label", "zone=b", "--label", "gpu=1",
        "--cpus", "8", "--memory-mb", "4096", "--max-sandboxes", "20",
    )  # fmt: skip
    assert "added second" in added
    assert "second answers: Docker " in added
    host = DockerHost.objects.get(name="second")
    assert (host.labels, host.cpus, host.memory_mb, host.max_sandboxes) == (
        {"zone": "b", "gpu": "1"}, 8.0, 4096, 20,
    )  # fmt: skip
    assert settings.BOXYARD_TEST_IMAGE in host.images  # as its health check read them

    listed = _hosts("list")
    assert "second" in listed and "active" in listed and "sandboxes 0/20" in listed
    assert "CPUs 0/8" in listed and "labels gpu=1,zone=b" in listed
    assert "local" in listed and "(this machine)" in listed

    assert "draining" in _hosts("drain", "second")
    assert DockerHost.objects.get(name="second").state == HostState.DRAINING
    _hosts("undrain", "second")
    assert DockerHost.objects.get(name="second").state == HostState.ACTIVE
    actions = list(Event.objects.filter(host=host).values_list("action", "actor"))
    assert ("host.added", "command:hosts") in actions
    assert ("host.draining", "command:hosts") in actions
    assert ("host.active", "command:hosts") in actions


def test_bad_input_is_refused_and_changes_nothing() -> None:
    with pytest.raises(CommandError, match="url: must start with one of unix://"):
        _hosts("add", "bad", "--url", "ftp://x")
    with pytest.raises(CommandError, match="--label 'zone': give KEY=VALUE"):
        _hosts("add", "bad", "--url", "tcp://x.invalid:2376", "--label", "zone")
    with pytest.raises(CommandError, match="no Docker host named nowhere"):
        _hosts("drain", "nowhere")
    assert not DockerHost.objects.filter(name="bad").exists()


def test_a_host_that_does_not_answer_is_said_so() -> None:
    with pytest.raises(CommandError, match="far does not answer"):
        _hosts("add", "far", "--url", "tcp://far.invalid:2376")
    # Added all the same: the health check marks it down once nothing reaches it.
    assert DockerHost.objects.get(name="far").last_seen_at is None


def test_build_images_builds_into_a_hosts_engine(second_engine: SecondEngine) -> None:
    _hosts("add", "second", "--url", second_engine.url)
    out = io.StringIO()
    call_command("build_images", "--test", "--host", "second", stdout=out)
    assert f"{settings.BOXYARD_TEST_IMAGE}: present" in out.getvalue()
    second_engine.runtime.remove_image(settings.BOXYARD_TEST_IMAGE)
    try:
        call_command("build_images", "--test", "--host", "second", stdout=out)
        assert f"{settings.BOXYARD_TEST_IMAGE}: built" in out.getvalue()
        assert second_engine.runtime.image_labels(settings.BOXYARD_TEST_IMAGE) is not None
    finally:
        if second_engine.runtime.image_labels(settings.BOXYARD_TEST_IMAGE) is None:
            call_command("build_images", "--test", "--host", "second", stdout=out)
    with pytest.raises(CommandError, match="no Docker host named nowhere"):
        call_command("build_images", "--test", "--host", "nowhere", stdout=out)
