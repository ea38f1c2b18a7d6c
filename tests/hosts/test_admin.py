"""The Django admin's page of Docker hosts: adding, editing, draining and removing go through
the hosts' services and are recorded as the admin's; the stored TLS material is never shown
back; `local` is never removed, nor a host that holds sandboxes."""

import pytest
from django.test import Client

from hosts.models import DockerHost, HostState
from sandboxes.models import Event

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser(django_user_model) -> Client:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_superuser("alice", password="s3cret-pass")
    client = Client()
    client.force_login(user)
    return client


FORM = {
    "name": "edge-1",
    "url": "tcp://edge-1.invalid:2376",
    "tls_ca": "",
    "tls_cert": "",
    "tls_key": "",
    "labels": '{"zone": "eu"}',
    "cpus": "16",
    "memory_mb": "",
    "max_sandboxes": "100",
    "_save": "Save",
}


def test_the_admin_site_adds_edits_and_drains_a_host_on_the_record(superuser) -> None:
    added = superuser.post("/admin/hosts/dockerhost/add/", FORM)
    assert added.status_code == 302, added.content.decode()[:2000]
    host = DockerHost.objects.get(name="edge-1")
    assert (host.labels, host.cpus, host.max_sandboxes) == ({"zone": "eu"}, 16.0, 100)
    [event] = Event.objects.filter(host=host, action="host.added")
    assert event.actor == "admin:alice"

    changed = superuser.post(
        f"/admin/hosts/dockerhost/{host.pk}/change/", {**FORM, "max_sandboxes": "50"}
    )
    assert changed.status_code == 302, changed.content.decode()[:2000]
    assert DockerHost.objects.get(pk=host.pk).max_sandboxes == 50
    assert Event.objects.get(host=host, action="host.changed").detail["fields"] == ["max_sandboxes"]

    superuser.post(
        "/admin/hosts/dockerhost/",
        {"action": "drain", "_selected_action": [str(host.pk)]},
    )
    assert DockerHost.objects.get(pk=host.pk).state == HostState.DRAINING
    assert Event.objects.get(host=host, action="host.draining").actor == "admin:alice"
    local = DockerHost.objects.get(is_default=True)
    assert superuser.get(f"/admin/hosts/dockerhost/{local.pk}/delete/").status_code == 403


def test_a_bad_url_is_refused_and_adds_nothing(superuser) -> None:
    refused = superuser.post("/admin/hosts/dockerhost/add/", {**FORM, "url": "ftp://x"})
    assert refused.status_code == 200
    assert "must start with one of" in refused.content.decode()
    assert not DockerHost.objects.filter(name="edge-1").exists()
