"""A host's TLS material is written, never read back: not by the admin's form, nor the
dashboard's, nor the command line; material replaced or cleared leaves no file behind. A host
that holds no sandbox is removed (its TLS files with it, as an event) from the command line,
the dashboard and the admin; one that holds sandboxes, and `local`, never."""

import io
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client

from boxyard.actors import Actor
from hosts import services
from hosts.engines import engine_of
from hosts.models import DockerHost, default_host_pk
from sandboxes.models import Event, Sandbox, State

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

ACTOR = Actor("command", "tests")


def pem(secret: str) -> dict[str, str]:
    return {
        f"tls_{part}": f"-----BEGIN {part}-----\n{secret}-{part}\n"
        for part in ("ca", "cert", "key")
    }


def tls_folders(name: str) -> list[Path]:
    return sorted((Path(settings.DATA_DIR) / "hosts").glob(f"{name}-*"))


def add(name: str, secret: str = "SECRET") -> DockerHost:
    """A host with TLS material, its files written (as its first use writes them)."""
    host = services.add_host(ACTOR, name, url=f"tcp://{name}.invalid:2376", **pem(secret))
    engine_of(host)
    assert [folder.name for folder in tls_folders(name)] and all(
        (folder / "tls_key.pem").read_text().startswith("-----BEGIN key")
        for folder in tls_folders(name)
    )
    return host


def put(pipeline: Any, host: DockerHost, key: str, state: str) -> Sandbox:
    return Sandbox.objects.create(
        pipeline=pipeline, host=host, scope_key=key, state=state, retention="temporary",
        image="x", volume_name=f"v-{key}",
    )  # fmt: skip


@pytest.fixture
def superuser(django_user_model: Any, settings: Any) -> Client:
    settings.ALLOWED_HOSTS = ["testserver"]
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("alice", password="s3cret-pass"))
    return client


def test_the_admin_never_shows_the_tls_material_and_clearing_it_removes_its_files(
    superuser: Client,
) -> None:
    host = add("edge-tls")
    page = superuser.get(f"/admin/hosts/dockerhost/{host.pk}/change/").content.decode()
    assert "SECRET" not in page  # not the key, nor the certificates
    assert "Stored; leave empty to keep it." in page and 'name="clear_tls"' in page
    listed = io.StringIO()
    call_command("hosts", "list", stdout=listed)
    assert "edge-tls" in listed.getvalue() and "SECRET" not in listed.getvalue()

    form = {"url": host.url, "labels": "{}", "cpus": "", "memory_mb": "", "max_sandboxes": "7"}
    form.update(tls_ca="", tls_cert="", tls_key="", _save="Save")
    assert superuser.post(f"/admin/hosts/dockerhost/{host.pk}/change/", form).status_code == 302
    host.refresh_from_db()
    assert host.max_sandboxes == 7 and host.tls_key == "-----BEGIN key-----\nSECRET-key\n"

    # Replaced: the old files go, the new ones are written at first use.
    changed = superuser.post(f"/admin/hosts/dockerhost/{host.pk}/change/", {**form, **pem("OTHER")})
    assert changed.status_code == 302
    host.refresh_from_db()
    assert host.tls_key == "-----BEGIN key-----\nOTHER-key\n"
    assert tls_folders("edge-tls") == []  # the SECRET files are gone
    engine_of(host)
    [folder] = tls_folders("edge-tls")
    assert "OTHER" in (folder / "tls_key.pem").read_text()

    cleared = superuser.post(
        f"/admin/hosts/dockerhost/{host.pk}/change/", {**form, "clear_tls": "on"}
    )
    assert cleared.status_code == 302
    host.refresh_from_db()
    assert (host.tls_ca, host.tls_cert, host.tls_key) == ("", "", "")
    assert tls_folders("edge-tls") == []
    assert (
        Event.objects.filter(host=host, action="host.changed", detail__fields=["tls"]).count() == 2
    )


def test_clearing_the_material_on_the_dashboard_removes_its_files(superuser: Client) -> None:
    host = add("edge-dash")
    form = {"url": host.url, "labels": "", "max_sandboxes": "500", "clear_tls": "on"}
    assert superuser.post("/hosts/edge-dash/", form).status_code == 302
    host.refresh_from_db()
    assert host.tls_key == "" and tls_folders("edge-dash") == []


def test_an_operator_removes_a_host_that_holds_no_sandbox(make_pipeline: Any) -> None:
    default_host_pk()  # local, as the migrations made it
    pipeline = make_pipeline(slug="removing")
    host = add("edge-rm")
    held = put(pipeline, host, "a", State.STOPPED)
    put(pipeline, host, "b", State.DESTROYED)
    out = io.StringIO()
    with pytest.raises(
        CommandError, match=r"edge-rm cannot be removed while it holds sandboxes \(1, "
    ):
        call_command("hosts", "remove", "edge-rm", stdout=out)
    with pytest.raises(CommandError, match="local is this machine's engine"):
        call_command("hosts", "remove", "local", stdout=out)
    assert DockerHost.objects.filter(name="edge-rm").exists() and tls_folders("edge-rm")

    Sandbox.objects.filter(pk=held.pk).update(state=State.DESTROYED)
    call_command("hosts", "remove", "edge-rm", stdout=out)
    assert "removed edge-rm (2 destroyed sandboxes' rows kept, under local)" in out.getvalue()
    assert not DockerHost.objects.filter(name="edge-rm").exists()
    assert tls_folders("edge-rm") == []
    [event] = Event.objects.filter(action="host.removed")
    assert (event.actor, event.detail["host"], event.detail["destroyed_sandboxes"]) == (
        "command:hosts", "edge-rm", 2,
    )  # fmt: skip
    assert set(Sandbox.objects.values_list("host_id", flat=True)) == {default_host_pk()}


def test_the_dashboard_removes_a_host_after_asking(superuser: Client, make_pipeline: Any) -> None:
    default_host_pk()
    host = add("edge-page")
    sandbox = put(make_pipeline(slug="paged"), host, "a", State.RUNNING)
    page = superuser.get("/hosts/edge-page/").content.decode()
    assert 'data-testid="remove-host"' in page and "Remove the host edge-page?" in page
    assert 'data-testid="remove-host"' not in superuser.get("/hosts/local/").content.decode()

    refused = superuser.post("/hosts/edge-page/remove", {"next": "/hosts/edge-page/"}, follow=True)
    said = " ".join(refused.content.decode().split())
    assert "edge-page cannot be removed while it holds sandboxes (1," in said
    assert DockerHost.objects.filter(name="edge-page").exists()
    local = superuser.post("/hosts/local/remove", follow=True).content.decode()
    assert "local is this machine" in local.replace("&#x27;", "'")

    Sandbox.objects.filter(pk=sandbox.pk).update(state=State.DESTROYED)
    removed = superuser.post("/hosts/edge-page/remove", {"next": "/hosts/edge-page/"})
    assert removed.status_code == 302 and removed.url == "/hosts/"
    assert "Host edge-page removed." in superuser.get("/hosts/").content.decode()
    assert not DockerHost.objects.filter(name="edge-page").exists()
    assert tls_folders("edge-page") == []
    assert Event.objects.get(action="host.removed").actor == "admin:alice"


def test_the_admin_removes_a_host_that_holds_no_sandbox(
    superuser: Client, make_pipeline: Any
) -> None:
    host = add("edge-admin")
    sandbox = put(make_pipeline(slug="admins"), host, "a", State.RUNNING)
    delete = f"/admin/hosts/dockerhost/{host.pk}/delete/"
    page = superuser.get(delete).content.decode()
    assert "edge-admin cannot be removed while it holds sandboxes (1," in page.replace(
        "&#x27;", "'"
    )
    superuser.post(delete, {"post": "yes"})
    assert DockerHost.objects.filter(pk=host.pk).exists()
    local = DockerHost.objects.get(pk=default_host_pk())
    assert superuser.get(f"/admin/hosts/dockerhost/{local.pk}/delete/").status_code == 403

    Sandbox.objects.filter(pk=sandbox.pk).update(state=State.DESTROYED)
    assert superuser.post(delete, {"post": "yes"}).status_code == 302
    assert not DockerHost.objects.filter(pk=host.pk).exists()
    assert tls_folders("edge-admin") == []
    assert Event.objects.get(action="host.removed").actor == "admin:alice"
