"""One engine is one host's: a second host at another address of `local`'s engine (the one the
add form suggests) is refused wherever it is added or edited; a row forced past that is marked
down at its first health check and cannot be made active; and the reconciler of either host
never removes what the other owns."""

import io
import re
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client

from boxyard.actors import Actor
from boxyard.errors import BoxyardError, InvalidInput
from hosts import keeper, services
from hosts.engines import get_runtime
from hosts.models import DockerHost, HostState, default_host_pk
from sandboxes import services as sandboxes
from sandboxes.models import Event, Sandbox, State
from sandboxes.services.reconciling import reconcile
from tests.conftest import CHAT
from tests.forwarding import machine_engine_socket

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

ACTOR = Actor("command", "tests")
TAKEN = re.compile(
    r"url: the engine at unix://\S+ is the one of the Docker host local \(engine \S+\)"
)


def local_engine() -> str:
    """The machine's engine's address, written out (`local` has none: it is this machine's)."""
    return f"unix://{machine_engine_socket()}"


def test_a_second_host_at_the_address_of_locals_engine_is_refused_everywhere(
    django_user_model: Any, settings: Any
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    local = DockerHost.objects.get(pk=default_host_pk())

    with pytest.raises(CommandError, match=TAKEN):
        call_command("hosts", "add", "twin", "--url", local_engine(), stdout=io.StringIO())
    local.refresh_from_db()
    assert local.engine_id  # recorded on the way

    user = django_user_model.objects.create_superuser("alice", password="s3cret-pass")
    admin = Client()
    admin.force_login(user)
    form = {"name": "twin", "url": local_engine(), "max_sandboxes": "10"}
    page = admin.post("/hosts/new", form)
    assert page.status_code == 200
    said = " ".join(page.content.decode().split())
    assert "is the one of the Docker host local" in said
    assert "one engine can be one host only" in said

    page = admin.post(
        "/admin/hosts/dockerhost/add/", {**form, "labels": "{}", "state": "active", "_save": "1"}
    )
    assert page.status_code == 200
    assert "is the one of the Docker host local" in page.content.decode()

    # An existing host is not moved onto it either.
    edge = services.add_host(ACTOR, "edge", url="tcp://edge.invalid:2376")
    with pytest.raises(InvalidInput, match=TAKEN):
        services.edit_host(edge, ACTOR, url=local_engine())
    assert DockerHost.objects.get(pk=edge.pk).url == "tcp://edge.invalid:2376"
    assert list(DockerHost.objects.values_list("name", flat=True)) == ["edge", "local"]
    assert not Event.objects.filter(action="host.added", detail__host="twin").exists()


def test_a_host_forced_onto_locals_engine_is_marked_down_and_never_made_active() -> None:
    local = DockerHost.objects.get(pk=default_host_pk())
    twin = DockerHost.objects.create(name="twin", url=local_engine())  # past the services
    assert not keeper.check(twin)
    twin.refresh_from_db()
    assert twin.down_since is not None
    assert "is the one of the Docker host local" in twin.last_error
    assert Event.objects.filter(host=twin, action="host.down").exists()
    assert keeper.check(local)  # local keeps its engine
    local.refresh_from_db()
    assert local.down_since is None and local.engine_id == twin.engine_id

    services.drain(twin, ACTOR)
    with pytest.raises(BoxyardError, match="one engine can be one host only"):
        services.undrain(twin, ACTOR)
    assert DockerHost.objects.get(pk=twin.pk).state == HostState.DRAINING
    with pytest.raises(CommandError, match="twin is refused: its engine"):
        call_command("hosts", "check", "twin", stdout=io.StringIO())


def test_the_reconciler_of_two_hosts_on_one_engine_removes_nothing_of_the_others(
    make_pipeline: Any, bot: Any, docker_engine: Any
) -> None:
    pipeline = make_pipeline(slug="shared")
    local = DockerHost.objects.get(pk=default_host_pk())
    on_local = sandboxes.open_sandbox(pipeline, CHAT, bot).sandbox
    # A second row at the address of the same engine, forced past every check.
    twin = DockerHost.objects.create(name="twin", url=local_engine())
    services.drain(local, ACTOR)
    on_twin = sandboxes.open_sandbox(pipeline, {**CHAT, "launcher_id": "2"}, bot).sandbox
    assert (on_local.host_id, on_twin.host_id) == (local.pk, twin.pk)

    done = reconcile(grace_seconds=0)
    ours = {on_local.container_name, on_twin.container_name}
    # (What other tests left behind on the shared engine may go; neither of these two.)
    assert not ours & set(done.containers_removed) and done.lost == [], done
    assert sorted(done.elsewhere) == sorted([on_local.container_name, on_twin.container_name])
    for sandbox in (on_local, on_twin):
        assert Sandbox.objects.get(pk=sandbox.pk).state == State.RUNNING
        info = get_runtime().inspect_container(sandbox.container_id)
        assert info is not None and info.running


def test_a_helper_on_an_engine_two_hosts_share_is_left_to_them(docker_engine: Any) -> None:
    """A helper container (an agent's installation, a workspace carried) says no sandbox:
    on an engine that two host rows share, neither's reconciler can tell it is not the
    other's, so neither removes it; on an engine of one host, a leftover helper goes."""
    import docker

    from sandboxes.runtime import LABEL_ROLE, labels_for

    local = DockerHost.objects.get(pk=default_host_pk())
    assert keeper.check(local)
    local.refresh_from_db()
    twin = DockerHost.objects.create(
        name="twin", url=local_engine(), engine_id=local.engine_id, engine_root=local.engine_root
    )
    engine = docker.from_env()
    helper = engine.containers.create(
        settings.BOXYARD_TEST_IMAGE, ["true"], labels=labels_for(**{LABEL_ROLE: "carry-out"})
    )
    try:
        done = reconcile(grace_seconds=0, host=twin.pk)
        assert done.containers_removed == [] and helper.name in done.elsewhere
        done = reconcile(grace_seconds=0, host=local.pk)
        assert done.containers_removed == [] and helper.name in done.elsewhere
        twin.delete()
        assert reconcile(grace_seconds=0, host=local.pk).containers_removed == [helper.name]
    finally:
        if any(found.id == helper.id for found in engine.containers.list(all=True)):
            helper.remove(force=True)
