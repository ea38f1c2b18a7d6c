"""The dashboard's Docker hosts: the Hosts page with each host's load counted from the rows,
draining and undraining, adding and editing a host (bad input refused beside its field, and
nothing changed), who may see it; the host on the fleet and on a sandbox's page; and the
page's websocket, which hears a host drained, a host gone down and the load moving."""

import asyncio
import re
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from boxyard.actors import Actor
from hosts import services
from hosts.models import DockerHost, HostState, default_host_pk
from sandboxes import live
from sandboxes.consumers.base import CSRF_MARK
from sandboxes.models import Event, Lease, Sandbox, State
from tests.websockets import receive_until, websocket

ALICE = Actor("admin", "alice")


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


def make_host(name: str, **fields: Any) -> DockerHost:
    """A host row as a health check left it a moment ago."""
    fields.setdefault("url", f"tcp://{name}.invalid:2376")
    fields.setdefault("last_seen_at", timezone.now())
    fields.setdefault("engine_version", "28.5.1")
    return DockerHost.objects.create(name=name, **fields)


def put(pipeline: Any, host: DockerHost, key: str, state: str = State.RUNNING) -> Sandbox:
    """A sandbox row on `host` (no container: the page reads rows)."""
    sandbox = Sandbox.objects.create(
        pipeline=pipeline,
        host=host,
        scope_key=key,
        state=state,
        retention="temporary",
        image="x",
        volume_name=f"v-{key}",
    )
    Lease.objects.create(sandbox=sandbox)
    return sandbox


def row(page: str, name: str) -> str:
    found = re.search(rf'<tr id="host-{name}".*?</tr>', page, re.S)
    assert found, f"no row of {name}"
    return " ".join(found.group(0).split())


# --- the Hosts page -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_hosts_page_shows_each_hosts_capacity_and_use(admin_client, make_pipeline) -> None:
    heavy = make_pipeline(slug="heavy", cpus=1.5, memory_mb=512)
    light = make_pipeline(slug="light", cpus=0.5, memory_mb=256)
    local = DockerHost.objects.get(pk=default_host_pk())
    second = make_host(
        "second", labels={"zone": "b"}, cpus=8, memory_mb=4096, max_sandboxes=10,
        engine_cpus=16, engine_memory_mb=32000, state=HostState.DRAINING,
    )  # fmt: skip
    make_host("gone", down_since=timezone.now(), last_error="connection refused")
    put(heavy, second, "a")
    put(heavy, second, "b", State.CREATING)
    put(light, second, "c")
    put(light, second, "stopped", State.STOPPED)  # holds no room
    put(light, second, "destroyed", State.DESTROYED)
    put(light, local, "here")

    def page() -> str:
        answer = admin_client.get("/hosts/")
        assert answer.status_code == 200
        return answer.content.decode()

    shown = page()
    second_row = row(shown, "second")
    assert "3 of 10" in second_row  # its live sandboxes, of its maximum
    assert "3.5 of 8 reserved" in second_row and "the engine has 16" in second_row
    assert "1280 of 4096 reserved" in second_row and "the engine has 32000" in second_row
    assert "badge-draining" in second_row and "<code>zone=b</code>" in second_row
    assert "tcp://second.invalid:2376" in second_row and "28.5.1" in second_row
    assert 'href="/?host=second"' in second_row and 'action="/hosts/second/undrain"' in second_row
    local_row = row(shown, "local")
    assert "1 of 500" in local_row and "0.5 reserved; no limit" in local_row
    assert "this machine" in local_row and 'action="/hosts/local/drain"' in local_row
    gone_row = row(shown, "gone")
    assert "badge-down" in gone_row and "went down" in gone_row
    assert "connection refused" in gone_row
    assert 'aria-current="page">Hosts<' in shown  # in the header's navigation

    # Two queries read every host and its load: the page costs the same with more of each.
    with CaptureQueriesContext(connection) as few:
        page()
    for number in range(5):
        put(light, make_host(f"more-{number}"), f"more-{number}")
    with CaptureQueriesContext(connection) as more:
        assert "more-4" in page()
    assert len(more) == len(few)


@pytest.mark.django_db
def test_drain_and_undrain_from_the_page_are_the_admins_events(admin_client, make_pipeline) -> None:
    second = make_host("second")
    put(make_pipeline(), second, "a")
    page = admin_client.get("/hosts/").content.decode()
    assert (
        'data-confirm="Drain second? No new sandbox is placed there; the 1 sandbox on it stays '
        'until it is closed."' in page
    )
    drained = admin_client.post("/hosts/second/drain", {"next": "/hosts/"}, follow=True)
    assert drained.redirect_chain == [("/hosts/", 302)]
    said = drained.content.decode()
    assert "second is draining: no new sandbox is placed there; the 1 sandbox on it stays" in said
    assert "badge-draining" in row(said, "second")
    assert DockerHost.objects.get(pk=second.pk).state == HostState.DRAINING
    undrained = admin_client.post("/hosts/second/undrain", {"next": "/hosts/second/"}, follow=True)
    assert undrained.redirect_chain == [("/hosts/second/", 302)]
    assert "second is active: new sandboxes may be placed there again." in (
        undrained.content.decode()
    )
    assert DockerHost.objects.get(pk=second.pk).state == HostState.ACTIVE
    events = Event.objects.filter(host=second).order_by("created_at", "id")
    assert [(e.action, e.actor) for e in events] == [
        ("host.draining", "admin:alice"),
        ("host.active", "admin:alice"),
    ]
    # The host's page lists them, newest first, in words.
    history = undrained.content.decode().split('id="host-events"')[1]
    assert (
        history.index("Active again") < history.index("Draining") and "the admin alice" in history
    )
    assert admin_client.post("/hosts/second/explode").status_code == 404
    assert admin_client.post("/hosts/nowhere/drain").status_code == 404
    assert admin_client.get("/hosts/second/drain").status_code == 405


@pytest.mark.django_db
def test_a_draining_host_offers_to_move_only_the_sandboxes_that_can_move(
    admin_client, make_pipeline
) -> None:
    """The offer counts what the state table lets move (`lifecycle.allowing`), not the host's
    live sandboxes: one being created or stopped cannot move now, a stopped one can."""
    pipeline = make_pipeline()
    second = make_host("second", state=HostState.DRAINING)
    put(pipeline, second, "new", State.CREATING)
    put(pipeline, second, "ending", State.STOPPING)

    def second_row() -> str:
        return row(admin_client.get("/hosts/").content.decode(), "second")

    shown = second_row()
    assert "2 of 500" in shown  # both hold their room on the host...
    assert "move-all" not in shown and "elsewhere" not in shown  # ...and neither can move now
    host_page = admin_client.get("/hosts/second/").content.decode()
    assert "move-all" not in host_page

    put(pipeline, second, "resting", State.STOPPED)  # no room held, but it can move
    put(pipeline, second, "busy", State.RUNNING)
    shown = second_row()
    assert 'action="/hosts/second/move-all"' in shown
    assert ">Move 2 sandboxes elsewhere</button>" in shown
    assert "Move the 2 sandboxes of second to other hosts?" in shown
    assert (
        ">Move 2 sandboxes elsewhere</button>"
        in admin_client.get("/hosts/second/").content.decode()
    )


def host_form(**changes: Any) -> dict[str, Any]:
    form = {"url": "tcp://10.0.0.5:2376", "labels": "zone=eu\ngpu=1", "max_sandboxes": "20"}
    form.update(changes)
    return form


@pytest.mark.django_db
def test_a_host_is_added_and_edited_as_the_admin_and_its_key_is_never_shown(admin_client) -> None:
    pem = {name: f"-----BEGIN {name}-----\nsecret-{name}\n" for name in ("ca", "cert", "key")}
    added = admin_client.post(
        "/hosts/new",
        host_form(name="eu-1", tls_ca=pem["ca"], tls_cert=pem["cert"], tls_key=pem["key"]),
    )
    assert added.status_code == 302 and added.url == "/hosts/eu-1/"
    host = DockerHost.objects.get(name="eu-1")
    assert (host.url, host.labels, host.max_sandboxes) == (
        "tcp://10.0.0.5:2376",
        {"zone": "eu", "gpu": "1"},
        20,
    )
    assert host.tls_key == pem["key"] and host.state == HostState.ACTIVE
    page = admin_client.get("/hosts/eu-1/").content.decode()
    assert "Host eu-1 added" in page and "a client certificate is stored" in page
    assert "secret-" not in page  # no stored TLS material goes back to a browser

    # Empty TLS boxes keep what is stored; the history names what changed, not the material.
    edited = admin_client.post("/hosts/eu-1/", host_form(labels="zone=us", cpus="4", memory_mb=""))
    assert edited.status_code == 302
    host.refresh_from_db()
    assert (host.labels, host.cpus, host.tls_key) == ({"zone": "us"}, 4.0, pem["key"])
    change = Event.objects.get(host=host, action="host.changed")
    assert (change.actor, change.detail["fields"]) == ("admin:alice", ["cpus", "labels"])
    page = admin_client.get("/hosts/eu-1/").content.decode()
    assert "Host changed</strong> — CPUs for sandboxes, Labels" in " ".join(page.split())

    # Nothing changed: nothing recorded.
    admin_client.post("/hosts/eu-1/", host_form(labels="zone=us", cpus="4"))
    assert Event.objects.filter(host=host, action="host.changed").count() == 1
    admin_client.post("/hosts/eu-1/", host_form(labels="zone=us", cpus="4", clear_tls="on"))
    host.refresh_from_db()
    assert (host.tls_ca, host.tls_cert, host.tls_key) == ("", "", "")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"url": "ftp://10.0.0.5"}, "url", "must start with one of unix://, tcp://, ssh://"),
        ({"tls_ca": "-----BEGIN CA-----"}, "tls_ca", "TLS needs all three"),
        ({"labels": "zone=eu\ngpu"}, "labels", "as key=value: “gpu” is not"),
        ({"max_sandboxes": "0"}, "max_sandboxes", "greater than or equal to 1"),
        ({"cpus": "many"}, "cpus", "Enter a number"),
    ],
)
def test_bad_input_is_refused_beside_its_field_and_nothing_changes(
    admin_client, changes: dict[str, str], field: str, said: str
) -> None:
    second = make_host("second", url="tcp://10.0.0.9:2376", labels={"zone": "b"})
    before = DockerHost.objects.values().get(pk=second.pk)
    for path, form in (
        ("/hosts/new", host_form(name="eu-1", **changes)),
        ("/hosts/second/", host_form(**changes)),
    ):
        answer = admin_client.post(path, form)
        assert answer.status_code == 200, path
        page = answer.content.decode()
        box = re.search(rf'<div class="field field-{field} invalid">.*?</div>', page, re.S)
        assert box is not None and said in box.group(0), (path, page[-3000:])
    assert not DockerHost.objects.filter(name="eu-1").exists()
    assert DockerHost.objects.values().get(pk=second.pk) == before
    assert not Event.objects.filter(action__in=["host.added", "host.changed"]).exists()


@pytest.mark.django_db
def test_a_refusal_is_said_in_the_admins_language(admin_client) -> None:
    admin_client.cookies["django_language"] = "zh-hans"
    refused = admin_client.post("/hosts/new", host_form(name="eu-1", url="ftp://10.0.0.5")).content
    box = re.search(r'<div class="field field-url invalid">.*?</div>', refused.decode(), re.S)
    assert box is not None
    assert "必须以 unix://, tcp://, ssh://, http://, https:// 之一开头" in box.group(0)
    assert not DockerHost.objects.filter(name="eu-1").exists()


@pytest.mark.django_db
def test_only_administrators_see_or_change_hosts(django_user_model) -> None:
    second = make_host("second")
    for path in ("/hosts/", "/hosts/second/", "/hosts/new"):
        assert Client().get(path).url.startswith("/login/"), path
    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("mallory", password="x"))
    for path in ("/hosts/", "/hosts/second/", "/hosts/new"):
        assert visitor.get(path).status_code == 403, path
    assert visitor.post("/hosts/second/drain").status_code == 403
    assert visitor.post("/hosts/new", host_form(name="evil")).status_code == 403
    assert DockerHost.objects.get(pk=second.pk).state == HostState.ACTIVE
    assert not DockerHost.objects.filter(name="evil").exists()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    assert strict.post("/hosts/second/drain").status_code == 403  # no CSRF token
    assert DockerHost.objects.get(pk=second.pk).state == HostState.ACTIVE

    async def attempt(client: Client) -> bool:
        page = websocket("/ws/hosts/", client)
        connected, _code = await page.connect()
        await page.disconnect()
        return bool(connected)

    assert asyncio.run(attempt(visitor)) is False


# --- the fleet and a sandbox's page -------------------------------------------------------------


def fleet_row(page: str, key: str) -> str:
    """The fleet's row of the sandbox with that scope key."""
    rows = [part for part in page.split("<tr ")[1:] if f">{key}</a>" in part]
    assert len(rows) == 1, key
    return rows[0].split("</tr>")[0]


@pytest.mark.django_db
def test_the_fleet_shows_each_sandboxs_host_and_filters_by_host(
    admin_client, make_pipeline
) -> None:
    pipeline = make_pipeline(slug="support")
    local = DockerHost.objects.get(pk=default_host_pk())
    second = make_host("second", down_since=timezone.now())
    put(pipeline, local, "on-local")
    put(pipeline, second, "on-second")
    everything = admin_client.get("/").content.decode()
    assert "on-local" in everything and "on-second" in everything
    assert 'data-sort="host"' in everything  # a column of its own, sortable
    cell = re.search(r'<td data-testid="host">.*?</td>', fleet_row(everything, "on-second"), re.S)
    assert cell is not None and 'href="/hosts/second/"' in cell.group(0)
    assert "badge-down" in cell.group(0)  # the host's trouble, on its sandboxes' rows
    assert re.search(r'<option value="second" translate="no"\s*>second</option>', everything)

    only = admin_client.get("/", {"host": "second"}).content.decode()
    assert "on-second" in only and "on-local" not in only
    assert '<option value="second" translate="no" selected>' in only
    assert 'ws-connect="/ws/fleet/?state=live&amp;host=second"' in only  # the live table too
    assert "on-local" in admin_client.get("/", {"host": "local"}).content.decode()
    assert (
        '<p id="fleet-empty" class="muted">'
        in admin_client.get("/", {"host": "nowhere"}).content.decode()
    )


@pytest.mark.django_db
def test_a_sandboxs_page_names_its_host(admin_client, make_pipeline) -> None:
    second = make_host("second", state=HostState.DRAINING)
    sandbox = put(make_pipeline(slug="support"), second, "on-second", State.STOPPED)
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    host = re.search(r'<dd data-testid="host">.*?</dd>', page, re.S)
    assert host is not None and 'href="/hosts/second/"' in host.group(0)
    assert "badge-draining" in host.group(0)


# --- live ---------------------------------------------------------------------------------------


def in_thread(function: Any) -> Any:
    return database_sync_to_async(function, thread_sensitive=False)


@pytest.mark.django_db(transaction=True)
def test_an_open_hosts_page_hears_a_drain_and_a_host_going_down(admin_client) -> None:
    second = make_host("second", last_seen_at=timezone.now() - timedelta(minutes=1))

    async def scenario() -> tuple[str, str, str, str]:
        page = websocket("/ws/hosts/", admin_client)
        hosts_page = websocket("/ws/hosts/second/", admin_client)
        for socket in (page, hosts_page):
            assert (await socket.connect())[0]
        first = await page.receive_from(timeout=10)
        await hosts_page.receive_from(timeout=10)
        await in_thread(services.drain)(second, ALICE)
        drained = (await receive_until(page, lambda m: "badge-draining" in m))[-1]
        on_its_page = (await receive_until(hosts_page, lambda m: "host.draining" in m))[-1]
        fresh = await in_thread(DockerHost.objects.get)(pk=second.pk)
        assert await in_thread(services.unreachable)(fresh, ConnectionError("connection refused"))
        down = (await receive_until(page, lambda m: "badge-down" in m))[-1]
        for socket in (page, hosts_page):
            await socket.disconnect()
        return first, drained, on_its_page, down

    first, drained, on_its_page, down = asyncio.run(scenario())
    assert '<section id="hosts"' in first and 'hx-swap-oob="true"' in first
    assert "badge-active" in row(first, "second")
    assert "badge-draining" in row(drained, "second")
    assert 'action="/hosts/second/undrain"' in row(drained, "second")
    assert 'name="csrfmiddlewaretoken"' in drained  # the page's own token, in the pushed form
    assert CSRF_MARK not in drained
    assert 'id="host-status"' in on_its_page and 'id="host-events"' in on_its_page
    assert "badge-down" in row(down, "second") and "connection refused" in row(down, "second")
    assert list(
        Event.objects.filter(host=second).order_by("created_at").values_list("action", flat=True)
    ) == ["host.draining", "host.down"]


@pytest.mark.django_db(transaction=True)
def test_the_load_moves_on_an_open_page_at_most_once_a_second(admin_client, make_pipeline) -> None:
    pipeline = make_pipeline(slug="support")
    second = make_host("second", max_sandboxes=10)
    made = [put(pipeline, second, f"k{n}", State.CREATING) for n in range(5)]

    async def scenario() -> tuple[str, list[str]]:
        page = websocket("/ws/hosts/", admin_client)
        assert (await page.connect())[0]
        first = await page.receive_from(timeout=10)
        for sandbox in made:  # a burst: each one's row goes from creating to destroyed
            await in_thread(Sandbox.objects.filter(pk=sandbox.pk).update)(state=State.DESTROYED)
            await in_thread(live.changed)(sandbox.pk, parts=[live.STATUS])
        await in_thread(live.changed)(made[0].pk, parts=[live.EXECS])  # a command: no load
        got = await receive_until(page, lambda m: "0 of 10" in row(m, "second"), seconds=10)
        quiet = await page.receive_nothing(timeout=1.5)
        await page.disconnect()
        assert quiet, "pushed again with nothing new"
        return first, got

    first, got = asyncio.run(scenario())
    assert "5 of 10" in row(first, "second")
    assert 1 <= len(got) <= 2, len(got)  # five changes in a burst: a render or two
