"""The dashboard with Django's test client and channels' websocket communicator: who gets in,
what the pages show, what their buttons do, and what the websockets push. (The same story in
a real browser is tests/test_browser.py.)"""

import asyncio
import re
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from pipelines.models import Pipeline, PipelineToken
from sandboxes import services
from sandboxes.models import Event, Exec, Sandbox, State
from tests.conftest import CHAT
from tests.websockets import websocket

OTHER = {"launcher_type": "group", "launcher_id": "other"}


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


# --- who gets in --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_page_wants_an_admin(django_user_model) -> None:
    for path in ("/", "/sessions/", "/pipelines/", "/pipelines/new"):
        assert Client().get(path).url.startswith("/login/"), path
    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("mallory", password="x"))
    assert visitor.get("/").status_code == 403


@pytest.mark.django_db
def test_errors_are_pages_of_the_site(admin_client, django_user_model) -> None:
    from django.test import RequestFactory
    from django.views.defaults import server_error

    missing = admin_client.get("/pipelines/no-such-pipeline/")
    page = missing.content.decode()
    assert missing.status_code == 404
    assert 'data-testid="error-title">Not found<' in page
    assert 'href="/pipelines/"' in page and 'rel="icon"' in page  # the navigation, the icon
    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("mallory", password="x"))
    refused = visitor.get("/")
    assert refused.status_code == 403
    assert "administrators only" in refused.content.decode()
    broken = server_error(RequestFactory().get("/"))
    assert broken.status_code == 500
    assert b"Something went wrong" in broken.content and b'rel="icon"' in broken.content


@pytest.mark.django_db
def test_only_administrators_can_log_in(django_user_model) -> None:
    django_user_model.objects.create_user("mallory", password="s3cret-pass")
    refused = Client().post("/login/", {"username": "mallory", "password": "s3cret-pass"})
    assert refused.status_code == 200 and b"did not match" in refused.content
    django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True)
    allowed = Client().post("/login/", {"username": "alice", "password": "s3cret-pass"})
    assert allowed.status_code == 302 and allowed.url == "/"


@pytest.mark.django_db
def test_changes_need_the_csrf_token(django_user_model, pipeline) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    assert strict.post(f"/pipelines/{pipeline.slug}/tokens", {"name": "x"}).status_code == 403
    assert not PipelineToken.objects.filter(pipeline=pipeline).exists()


# --- pipelines ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_pipeline_is_made_with_a_custom_scope(admin_client) -> None:
    form = admin_client.get("/pipelines/new")
    assert b"Per chat (recommended)" in form.content  # the presets, labelled
    preview = admin_client.get(
        "/pipelines/scope-preview",
        {"scope_preset": "custom", "scope_template": "{sender_id}:{query_id}"},
    )
    assert b"alice:m-1" in preview.content and b"bob:m-2" in preview.content
    broken = admin_client.get(
        "/pipelines/scope-preview", {"scope_preset": "custom", "scope_template": "{nope}"}
    )
    assert b"nope" in broken.content and b'role="alert"' in broken.content
    saved = admin_client.post(
        "/pipelines/new",
        _pipeline_form(
            slug="helpdesk", scope_preset="custom", scope_template="{sender_id}:{query_id}"
        ),
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert Pipeline.objects.get(slug="helpdesk").scope_template == "{sender_id}:{query_id}"


@pytest.mark.django_db
def test_the_scope_saved_is_the_scope_shown(admin_client) -> None:
    """A template typed while the select still names a preset is neither dropped for the
    preset nor saved behind its back: the preview and Save refuse it, and nothing is saved."""
    form = admin_client.get("/pipelines/new").content.decode()
    assert scope_field(form) == "{launcher_type}_{launcher_id}"  # the default preset, written out
    mixed = {"scope_preset": "{launcher_type}_{launcher_id}", "scope_template": "{sender_id}"}
    preview = admin_client.get("/pipelines/scope-preview", mixed).content.decode()
    assert "not the preset chosen" in preview and 'data-testid="scope-key"' not in preview
    refused = admin_client.post("/pipelines/new", _pipeline_form(slug="mixed", **mixed))
    assert refused.status_code == 200 and "not the preset chosen" in refused.content.decode()
    assert not Pipeline.objects.filter(slug="mixed").exists()
    for typed in ("", "{launcher_type}_{launcher_id}"):  # the preset alone, or written out
        preset = {"scope_preset": "{launcher_type}_{launcher_id}", "scope_template": typed}
        preview = admin_client.get("/pipelines/scope-preview", preset).content.decode()
        assert "group_42" in preview
    saved = admin_client.post("/pipelines/new", _pipeline_form(slug="kept", scope_template=""))
    assert saved.status_code == 302
    page = admin_client.get("/pipelines/kept/").content.decode()
    assert scope_field(page) == "{launcher_type}_{launcher_id}"


def scope_field(page: str) -> str:
    """The value of the page's scope template field."""
    field = re.search(r'<input[^>]*name="scope_template"[^>]*>', page)
    assert field, "no scope template field"
    value = re.search(r'value="([^"]*)"', field[0])
    return value[1] if value else ""


@pytest.mark.django_db
def test_a_bad_pipeline_is_refused_field_by_field_and_nothing_is_saved(
    admin_client, settings
) -> None:
    answer = admin_client.post(
        "/pipelines/new",
        _pipeline_form(
            slug="bad",
            scope_preset="custom",
            scope_template="{launcher_id",
            cpus="99",
            env="{not json",
        ),
    )
    assert answer.status_code == 200
    text = answer.content.decode()
    assert "operator maximum" in text and "not valid JSON" in text
    assert not Pipeline.objects.filter(slug="bad").exists()


@pytest.mark.django_db
def test_a_token_is_shown_once_and_can_be_revoked(admin_client, pipeline) -> None:
    created = admin_client.post(f"/pipelines/{pipeline.slug}/tokens", {"name": "bot"})
    plaintext = created.content.decode().split('data-testid="new-token">')[1].split("<")[0]
    token = PipelineToken.objects.get(pipeline=pipeline)
    assert (
        plaintext.startswith("byd_")
        and plaintext not in admin_client.get(f"/pipelines/{pipeline.slug}/").content.decode()
    )
    assert (
        Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}").get("/api/v1/sandboxes").status_code == 200
    )
    admin_client.post(f"/pipelines/{pipeline.slug}/tokens/{token.pk}/revoke")
    assert (
        Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}").get("/api/v1/sandboxes").status_code == 401
    )


def test_a_token_can_be_shaped_as_an_e2b_key(admin_client, pipeline) -> None:
    created = admin_client.post(
        f"/pipelines/{pipeline.slug}/tokens", {"name": "e2b", "shape": "e2b"}
    )
    plaintext = created.content.decode().split('data-testid="new-token">')[1].split("<")[0]
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", plaintext)
    token = PipelineToken.objects.get(pipeline=pipeline)
    assert Client(HTTP_X_API_KEY=plaintext).get("/e2b/v2/sandboxes").json() == []
    assert (
        Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}").get("/api/v1/sandboxes").status_code == 200
    )
    admin_client.post(f"/pipelines/{pipeline.slug}/tokens/{token.pk}/revoke")
    refused = Client(HTTP_X_API_KEY=plaintext).get("/e2b/v2/sandboxes")
    assert (refused.status_code, refused.json()["code"]) == (401, 401)


def _pipeline_form(**changes: str) -> dict[str, str]:
    form = {
        "slug": "p",
        "name": "",
        "description": "",
        "scope_preset": "{launcher_type}_{launcher_id}",
        "scope_template": "",
        "image": "boxyard/busybox:1",
        "cpus": "1",
        "memory_mb": "512",
        "pids_limit": "128",
        "workspace_mb": "1024",
        "tmp_mb": "64",
        "idle_timeout_seconds": "1800",
        "ttl_seconds": "86400",
        "lease_timeout_seconds": "600",
        "exec_timeout_seconds": "60",
        "output_limit_bytes": "262144",
        "retention": "temporary",
        "max_live_sandboxes": "10",
        "pool_size": "0",
        "pool_exhausted": "cold",
        "pool_wait_seconds": "10",
        "env": "{}",
        "processes": "[]",
        "system_prompt": "",
    }
    form.update(changes)
    return form


# --- the fleet and a sandbox --------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_the_fleet_lists_and_filters_sandboxes(
    admin_client, pipeline, make_pipeline, bot, docker_engine
) -> None:
    services.open_sandbox(pipeline, CHAT, bot)
    services.open_sandbox(make_pipeline(slug="billing"), OTHER, bot)
    page = admin_client.get("/").content.decode()
    assert "group_123456" in page and "group_other" in page
    only = admin_client.get("/", {"pipeline": "billing"}).content.decode()
    assert "group_other" in only and "group_123456" not in only
    assert "group_123456" in admin_client.get("/", {"q": "1234"}).content.decode()


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_takeover_refuses_the_bot_until_release(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    token = PipelineToken.issue(pipeline, name="bot")[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    exec_path = f"/api/v1/sandboxes/{sandbox.pk}/exec"
    admin_client.post(f"/sandboxes/{sandbox.pk}/takeover")
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    assert "admin:alice" in page and "taken over from" in page
    refused = api.post(exec_path, {"cmd": "true"}, content_type="application/json")
    assert refused.status_code == 423 and "admin:alice" in refused.json()["error"]["message"]
    admin_client.post(f"/sandboxes/{sandbox.pk}/release")
    allowed = api.post(exec_path, {"cmd": "echo back"}, content_type="application/json")
    assert allowed.status_code == 200 and allowed.json()["stdout"] == "back\n"
    actions = set(Event.objects.filter(sandbox=sandbox).values_list("action", flat=True))
    assert {"lease.taken_over", "lease.released"} <= actions


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_restart_keeps_the_workspace_and_destroy_removes_it(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.run_exec(sandbox, services.clean_request(sandbox, cmd="echo kept > a.txt"), bot)
    admin_client.post(f"/sandboxes/{sandbox.pk}/restart")
    restarted = Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk)
    assert (restarted.state, restarted.generation) == (State.RUNNING, 2)
    again = services.run_exec(restarted, services.clean_request(restarted, cmd="cat a.txt"), bot)
    assert again.stdout == "kept\n"
    admin_client.post(f"/sandboxes/{sandbox.pk}/destroy")
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.DESTROYED
    assert docker_engine.list_containers({"io.boxyard.sandbox": str(sandbox.pk)}) == []


@pytest.mark.docker
@pytest.mark.django_db
def test_reset_ends_every_process_and_the_page_shows_the_workspace(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run = services.run_exec(
        sandbox, services.clean_request(sandbox, cmd="sleep 1000", background=True), bot
    )
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    assert 'data-testid="workspace">a disk of 2.0\xa0GB' in page and 'data-testid="reset"' in page
    answer = admin_client.post(f"/sandboxes/{sandbox.pk}/reset", {"reason": "stuck"}, follow=True)
    assert re.search(r"Reset: [1-9]\d* processes ended\.", answer.content.decode())
    assert services.wait_exec(Exec.objects.get(pk=run.pk), 10).state == "killed"
    event = Event.objects.get(sandbox=sandbox, action="sandbox.reset")
    assert (event.actor, event.reason) == ("admin:alice", "stuck")


@pytest.mark.docker
@pytest.mark.django_db
def test_sessions_find_a_chats_sandboxes_and_what_ran_there(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, {**CHAT, "conversation_id": "conv-777"}, bot).sandbox
    services.run_exec(sandbox, services.clean_request(sandbox, cmd="echo from-the-bot"), bot)
    found = admin_client.get("/sessions/", {"q": "conv-777"}).content.decode()
    assert "group_123456" in found
    assert "from-the-bot" in admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    assert "Nothing found" in admin_client.get("/sessions/", {"q": "no-such-chat"}).content.decode()


# --- websockets ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_websockets_are_for_admins_from_our_own_origin(django_user_model) -> None:
    async def attempt(
        path: str, client: Client | None, origin: bytes = b"http://testserver"
    ) -> Any:
        communicator = websocket(path, client)
        communicator.scope["headers"] = [
            (name, origin if name == b"origin" else value)
            for name, value in communicator.scope["headers"]
        ]
        connected, code = await communicator.connect()
        await communicator.disconnect()
        return connected, code

    visitor = Client()
    visitor.force_login(django_user_model.objects.create_user("mallory", password="x"))
    admin = Client()
    admin.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    assert asyncio.run(attempt("/ws/fleet/", None))[0] is False
    assert asyncio.run(attempt("/ws/fleet/", visitor))[0] is False
    assert asyncio.run(attempt("/ws/fleet/", admin, b"http://evil.example"))[0] is False
    assert asyncio.run(attempt("/ws/fleet/", admin))[0] is True


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_the_fleet_websocket_pushes_a_new_sandbox_then_its_changes(
    admin_client, pipeline, bot, docker_engine
) -> None:
    async def scenario() -> list[str]:
        communicator = websocket("/ws/fleet/?state=live", admin_client)
        connected, _ = await communicator.connect()
        assert connected
        first = await communicator.receive_from(timeout=10)
        assert 'id="fleet-rows"' in first and "sandbox-" not in first
        assert '<p id="fleet-empty" class="muted" hx-swap-oob="true">' in first
        opened = await database_sync_to_async(services.open_sandbox)(pipeline, CHAT, bot)
        pushed = [await communicator.receive_from(timeout=10)]
        await database_sync_to_async(services.close_sandbox)(
            opened.sandbox, bot, delete_workspace=True
        )
        while 'hx-swap-oob="delete"' not in pushed[-1]:
            pushed.append(await communicator.receive_from(timeout=10))
        await communicator.disconnect()
        return pushed

    pushed = asyncio.run(scenario())
    assert 'hx-swap-oob="afterbegin:#fleet-rows"' in pushed[0] and "group_123456" in pushed[0]
    assert '<p id="fleet-empty" class="muted" hidden hx-swap-oob="true">' in pushed[0]
    assert '<section id="fleet-totals"' in pushed[0]
    assert re.search(r"<dt>Created</dt><dd>1</dd>", pushed[0])  # the totals move with the fleet
    assert any('hx-swap-oob="delete"' in message and "sandbox-" in message for message in pushed)
    # the last row left: the table says it is empty again
    assert '<p id="fleet-empty" class="muted" hx-swap-oob="true">' in pushed[-1]


@pytest.mark.django_db(transaction=True)
def test_fleet_pages_share_one_read_of_a_change_and_keep_their_own_filters(
    admin_client, make_pipeline, monkeypatch
) -> None:
    from sandboxes import dashboard, live

    billing = make_pipeline(slug="billing")
    sandbox = Sandbox.objects.create(
        pipeline=billing,
        scope_key="group_7",
        state=State.RUNNING,
        retention="temporary",
        image="x",
        volume_name="v7",
    )
    reads: list[str] = []
    fleet_row = dashboard.fleet_row
    monkeypatch.setattr(
        dashboard, "fleet_row", lambda admin, pk: reads.append(pk) or fleet_row(admin, pk)
    )

    async def scenario() -> tuple[list[str], list[str | None]]:
        pages = [
            websocket(f"/ws/fleet/?{query}", admin_client)
            for query in (
                "state=live",
                "pipeline=billing",
                "pipeline=support",
                "state=live&q=group_7",
            )
        ]
        for page in pages:
            assert (await page.connect())[0]
            await page.receive_from(timeout=10)
        await database_sync_to_async(Sandbox.objects.filter(pk=sandbox.pk).update)(
            state=State.STOPPED
        )
        await database_sync_to_async(live.changed)(sandbox.pk)
        stopped = [await page.receive_from(timeout=10) for page in pages]
        await database_sync_to_async(live.changed)(sandbox.pk)  # nothing moved this time
        again = [
            None if await page.receive_nothing(timeout=1) else await page.receive_from()
            for page in pages
        ]
        for page in pages:
            await page.disconnect()
        return stopped, again

    stopped, again = asyncio.run(scenario())
    assert reads == [str(sandbox.pk)] * 2  # once per change, not once per page
    row = f'id="sandbox-{sandbox.pk}"'
    everything, billing_page, support_page, searched = stopped
    assert row in everything and row in billing_page and row in searched and row not in support_page
    assert all(
        'id="fleet-counters"' in page for page in stopped
    )  # one more stopped, one less running
    everything, billing_page, support_page, searched = again
    assert support_page is None  # neither its table nor its counters changed: nothing is sent
    assert row in everything and 'id="fleet-counters"' not in everything


@pytest.mark.django_db(transaction=True)
def test_a_fleet_sample_redraws_the_charts_and_totals(admin_client, pipeline) -> None:
    from sandboxes.services.sampling import sample_fleet

    async def scenario() -> str:
        communicator = websocket("/ws/fleet/?state=live", admin_client)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=10)
        await database_sync_to_async(sample_fleet)()
        pushed = await communicator.receive_from(timeout=10)
        await communicator.disconnect()
        return pushed

    pushed = asyncio.run(scenario())
    assert '<section id="fleet-charts"' in pushed and '<section id="fleet-totals"' in pushed
    assert pushed.count('hx-swap-oob="true"') == 2


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_the_sandbox_websocket_renders_in_the_admins_language(
    admin_client, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox

    async def scenario() -> str:
        communicator = websocket(f"/ws/sandboxes/{sandbox.pk}/", admin_client, django_language="fr")
        await communicator.connect()
        message = await communicator.receive_from(timeout=10)
        await communicator.disconnect()
        return message

    message = asyncio.run(scenario())
    assert 'id="sandbox-status"' in message and 'id="events"' in message
    assert "sandbox.created" in message
    assert "<dt>Bail</dt>" in message and "Prendre la main" in message  # Lease, Take over


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_two_admins_get_their_own_pushes(django_user_model, pipeline, bot, docker_engine) -> None:
    """Each admin's websocket renders with that admin's CSRF token, never another's."""
    import re

    from django.middleware.csrf import _does_token_match  # the check Django itself applies

    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    secrets = {"alice": "a" * 32, "bob": "b" * 32}
    clients = {}
    for name in secrets:
        client = Client()
        client.force_login(django_user_model.objects.create_user(name, password="x", is_staff=True))
        clients[name] = client

    async def scenario() -> dict[str, str]:
        communicators = {}
        for name, client in clients.items():
            communicator = websocket(
                f"/ws/sandboxes/{sandbox.pk}/", client, csrftoken=secrets[name]
            )
            assert (await communicator.connect())[0]
            await communicator.receive_from(timeout=10)  # the first render
            communicators[name] = communicator
        await database_sync_to_async(services.takeover_lease)(sandbox, bot, reason="check")
        pushed = {}
        for name, communicator in communicators.items():
            message = await communicator.receive_from(timeout=10)
            while 'id="sandbox-status"' not in message:
                message = await communicator.receive_from(timeout=10)
            pushed[name] = message
            await communicator.disconnect()
        return pushed

    pushed = asyncio.run(scenario())
    for name, message in pushed.items():
        tokens = set(re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', message))
        assert tokens, message[:500]
        for token in tokens:
            assert _does_token_match(token, secrets[name])
            other = "bob" if name == "alice" else "alice"
            assert not _does_token_match(token, secrets[other])


def test_usage_reads_as_a_cpu_share_and_memory() -> None:
    from sandboxes.dashboard import usage_text
    from sandboxes.runtime import Usage

    before = Usage(
        cpu_ns=1_000_000_000,
        system_ns=10_000_000_000,
        online_cpus=2,
        memory_bytes=0,
        memory_limit_bytes=2**30,
    )
    after = Usage(
        cpu_ns=1_250_000_000,
        system_ns=12_000_000_000,
        online_cpus=2,
        memory_bytes=12 * 2**20,
        memory_limit_bytes=2**30,
    )
    assert usage_text(after, before) == "CPU 25.0% · memory 12.0 MiB of 1024 MiB"
    assert usage_text(after, None) == "memory 12.0 MiB of 1024 MiB"
    assert usage_text(None, before) == ""


def test_usage_says_how_full_the_workspace_is() -> None:
    from sandboxes.dashboard import usage_text
    from sandboxes.runtime import Usage
    from sandboxes.services import WorkspaceUsage

    reading = Usage(
        cpu_ns=0, system_ns=0, online_cpus=2, memory_bytes=12 * 2**20, memory_limit_bytes=2**30
    )
    full = WorkspaceUsage(limit_bytes=32 * 2**20, used_bytes=31 * 2**20)
    assert (
        usage_text(reading, None, full)
        == "memory 12.0 MiB of 1024 MiB · workspace 31.0 MiB of 32 MiB"
    )
    unlimited = WorkspaceUsage(limit_bytes=None, used_bytes=None)
    assert usage_text(reading, None, unlimited) == "memory 12.0 MiB of 1024 MiB"
