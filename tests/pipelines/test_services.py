"""Pipelines' services: every change to a pipeline, its tokens and its skills is recorded as
an event naming who made it and what changed, whether it came from the dashboard, the Django
admin site or the `create_pipeline` command; the pipeline's page shows them as its history.
Pure database with the fake runtime: no engine needed."""

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from boxyard.actors import Actor
from boxyard.errors import Conflict, InvalidInput
from pipelines import services
from pipelines.forms import PipelineForm
from pipelines.models import Pipeline, PipelineToken, Skill
from pipelines.selectors import principal_for_token
from sandboxes import services as sandbox_services
from sandboxes import tasks
from sandboxes.models import Event, Sandbox, State
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


@pytest.fixture
def skills_root(settings: Any, tmp_path: Path) -> Path:
    """The one directory skills may come from, with two skills in it."""
    root = tmp_path / "skills"
    for name in ("pandas", "plots"):
        (root / name).mkdir(parents=True)
    settings.BOXYARD_SKILL_ROOTS = [str(root)]
    return root


@pytest.fixture
def alice_client(django_user_model: Any) -> Client:
    """Alice, an admin, logged in: she may use the dashboard and the Django admin site."""
    user = django_user_model.objects.create_superuser(
        "alice", email="alice@example.com", password="s3cret-pass"
    )
    client = Client()
    client.force_login(user)
    return client


def _events(action: str | None = None) -> list[Event]:
    found = Event.objects.order_by("id")
    return list(found.filter(action=action) if action else found)


def _history(page: Any) -> str:
    """The history section of a rendered pipeline page."""
    html = page.content.decode()
    assert 'data-testid="history"' in html
    return html.split('data-testid="history"', 1)[1].split("</section>", 1)[0]


# --- create and change ------------------------------------------------------------------------


def test_a_new_pipeline_records_who_made_it(alice_actor) -> None:
    pipeline = services.create_pipeline(
        Pipeline(slug="helpdesk", image=settings.BOXYARD_TEST_IMAGE), alice_actor, via="somewhere"
    )
    assert Pipeline.objects.filter(slug="helpdesk").exists()
    [created] = _events()
    assert created.action == "pipeline.created" and created.actor == "admin:alice"
    assert created.pipeline_id == pipeline.pk and created.sandbox_id is None
    assert created.detail == {"slug": "helpdesk", "via": "somewhere"}


def test_a_change_records_who_changed_what(pipeline, alice_actor) -> None:
    saved = services.update_pipeline(
        pipeline,
        alice_actor,
        {"cpus": 2.0, "name": "Support desk", "memory_mb": pipeline.memory_mb},
    )
    assert saved.cpus == 2.0 and Pipeline.objects.get(pk=pipeline.pk).name == "Support desk"
    [changed] = _events()
    assert changed.action == "pipeline.changed" and changed.actor == "admin:alice"
    assert changed.pipeline_id == pipeline.pk
    # Exactly what changed, before and after; not the unchanged memory; no "via" unless given.
    assert changed.detail == {"changes": {"cpus": [1.0, 2.0], "name": ["", "Support desk"]}}


def test_a_change_that_changes_nothing_records_nothing(pipeline, alice_actor) -> None:
    services.update_pipeline(
        pipeline, alice_actor, {"cpus": pipeline.cpus, "scope_template": pipeline.scope_template}
    )
    assert _events() == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpus", settings.BOXYARD_MAX_CPUS + 1),
        ("scope_template", "{launcher_type}_{no_such_variable}"),
    ],
)
def test_a_bad_value_is_refused_by_name_and_changes_nothing(
    pipeline, alice_actor, field, value
) -> None:
    before = Pipeline.objects.get(pk=pipeline.pk)
    with pytest.raises(InvalidInput) as refused:
        services.update_pipeline(pipeline, alice_actor, {"name": "renamed", field: value})
    assert refused.value.field == field
    after = Pipeline.objects.get(pk=pipeline.pk)
    assert (after.name, getattr(after, field), after.updated_at) == (
        before.name,
        getattr(before, field),
        before.updated_at,
    )
    assert _events() == []

    with pytest.raises(InvalidInput) as refused:
        services.create_pipeline(
            Pipeline(slug="bad", image=settings.BOXYARD_TEST_IMAGE, **{field: value}), alice_actor
        )
    assert refused.value.field == field
    assert not Pipeline.objects.filter(slug="bad").exists() and _events() == []


# --- delete -----------------------------------------------------------------------------------


def test_a_pipeline_with_live_sandboxes_is_deleted_only_with_them(
    pipeline, alice_actor, bot, fake_runtime, skills_root
) -> None:
    sandbox = sandbox_services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.issue_token(pipeline, alice_actor, "bot")
    services.add_skill(
        Skill(pipeline=pipeline, name="pandas", host_path=str(skills_root / "pandas")), alice_actor
    )
    with pytest.raises(Conflict, match="1 live sandboxes") as refused:
        services.delete_pipeline(pipeline, alice_actor)
    assert refused.value.extra["sandboxes"] == 1
    assert Pipeline.objects.filter(pk=pipeline.pk).exists()
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.RUNNING
    assert not _events("pipeline.deleted")

    closed = services.delete_pipeline(pipeline, alice_actor, close_sandboxes=True, via="somewhere")
    assert closed == 1
    # The sandbox went the whole way: container and workspace gone, each step the admin's.
    assert fake_runtime.containers == {} and fake_runtime.volumes == {}
    stopping, destroyed = _events("sandbox.stopping"), _events("sandbox.destroyed")
    assert [e.actor for e in stopping + destroyed] == ["admin:alice", "admin:alice"]
    assert not Pipeline.objects.filter(pk=pipeline.pk).exists()
    assert not Sandbox.objects.filter(pk=sandbox.pk).exists()
    assert not PipelineToken.objects.filter(pipeline_id=pipeline.pk).exists()
    assert not Skill.objects.filter(pipeline_id=pipeline.pk).exists()
    [deleted] = _events("pipeline.deleted")
    assert deleted.actor == "admin:alice" and deleted.pipeline_id is None
    assert deleted.detail == {"slug": "support", "closed": 1, "via": "somewhere"}


def test_a_pipeline_without_sandboxes_is_deleted_at_once(pipeline, alice_actor) -> None:
    assert services.delete_pipeline(pipeline, alice_actor) == 0
    assert not Pipeline.objects.filter(slug="support").exists()
    [deleted] = _events("pipeline.deleted")
    assert deleted.detail == {"slug": "support", "closed": 0}


# --- tokens -----------------------------------------------------------------------------------


def test_a_token_is_recorded_by_its_prefix_never_its_plaintext(pipeline, alice_actor) -> None:
    token, plaintext = services.issue_token(pipeline, alice_actor, "bot", via="somewhere")
    assert plaintext.startswith(token.prefix) and principal_for_token(plaintext) is not None
    [issued] = _events()
    assert issued.action == "token.issued" and issued.actor == "admin:alice"
    assert issued.pipeline_id == pipeline.pk
    assert issued.detail == {
        "token": token.pk,
        "prefix": token.prefix,
        "name": "bot",
        "shape": "boxyard",
        "via": "somewhere",
    }
    secret = plaintext[len(token.prefix) :]
    assert secret not in json.dumps(issued.detail) and plaintext not in issued.actor


def test_a_revoked_token_stops_working_at_once_and_is_recorded_once(pipeline, alice_actor) -> None:
    token, plaintext = services.issue_token(pipeline, alice_actor)
    assert principal_for_token(plaintext) is not None  # and now kept in this process
    services.revoke_token(token, alice_actor)
    assert principal_for_token(plaintext) is None
    services.revoke_token(PipelineToken.objects.get(pk=token.pk), alice_actor)
    [revoked] = _events("token.revoked")
    assert revoked.actor == "admin:alice" and revoked.pipeline_id == pipeline.pk
    assert revoked.detail == {"token": token.pk, "prefix": token.prefix}


def test_a_token_shaped_as_an_e2b_key_acts_for_its_pipeline_alike(pipeline, alice_actor) -> None:
    token, plaintext = services.issue_token(pipeline, alice_actor, "e2b", shape="e2b")
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", plaintext)
    assert plaintext.startswith(token.prefix) and token.prefix.startswith("e2b_")
    found = principal_for_token(plaintext)
    assert found is not None and found.pipeline == pipeline
    [issued] = _events("token.issued")
    assert issued.detail["shape"] == "e2b"
    assert plaintext[len(token.prefix) :] not in json.dumps(issued.detail)


def test_a_token_of_no_known_shape_is_refused_and_none_issued(pipeline, alice_actor) -> None:
    with pytest.raises(InvalidInput) as refused:
        services.issue_token(pipeline, alice_actor, shape="jwt")
    assert refused.value.field == "shape"
    assert not PipelineToken.objects.exists() and not _events("token.issued")


def test_two_admins_revoking_one_token_record_it_once(pipeline, alice_actor) -> None:
    token, _ = services.issue_token(pipeline, alice_actor)
    hers, his = PipelineToken.objects.get(pk=token.pk), PipelineToken.objects.get(pk=token.pk)
    services.revoke_token(hers, alice_actor)
    services.revoke_token(his, Actor("admin", "carol"))
    assert len(_events("token.revoked")) == 1


# --- skills -----------------------------------------------------------------------------------


def test_a_skill_is_added_changed_and_removed_each_on_the_record(
    pipeline, alice_actor, skills_root
) -> None:
    path = str(skills_root / "pandas")
    skill = services.add_skill(Skill(pipeline=pipeline, name="pandas", host_path=path), alice_actor)
    services.change_skill(
        skill, alice_actor, {"mode": "rw", "host_path": path, "description": "df"}
    )
    services.change_skill(skill, alice_actor, {"mode": "rw"})  # nothing new: nothing recorded
    services.remove_skill(Skill.objects.get(pk=skill.pk), alice_actor)
    assert not Skill.objects.filter(pipeline=pipeline).exists()
    added, changed, removed = _events()
    assert [e.action for e in (added, changed, removed)] == [
        "skill.added",
        "skill.changed",
        "skill.removed",
    ]
    assert {e.actor for e in (added, changed, removed)} == {"admin:alice"}
    assert {e.pipeline_id for e in (added, changed, removed)} == {pipeline.pk}
    assert added.detail == {"skill": "pandas", "host_path": path, "mode": "ro"}
    assert changed.detail == {
        "skill": "pandas",
        "changes": {"mode": ["ro", "rw"], "description": ["", "df"]},
    }
    assert removed.detail == {"skill": "pandas"}


def test_a_second_skill_of_the_same_name_is_refused(pipeline, alice_actor, skills_root) -> None:
    services.add_skill(
        Skill(pipeline=pipeline, name="pandas", host_path=str(skills_root / "pandas")), alice_actor
    )
    with pytest.raises(Conflict, match="already has a skill 'pandas'"):
        services.add_skill(
            Skill(pipeline=pipeline, name="pandas", host_path=str(skills_root / "plots")),
            alice_actor,
        )
    assert list(Skill.objects.values_list("host_path", flat=True)) == [str(skills_root / "pandas")]
    assert len(_events("skill.added")) == 1


def test_a_skill_outside_the_roots_is_refused(pipeline, alice_actor, skills_root, tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(InvalidInput) as refused:
        services.add_skill(
            Skill(pipeline=pipeline, name="x", host_path=str(elsewhere)), alice_actor
        )
    assert refused.value.field == "host_path"
    assert not Skill.objects.exists() and _events() == []


# --- the dashboard ------------------------------------------------------------------------------


def _dashboard_form(pipeline: Pipeline, **changes: str) -> dict[str, str]:
    """The pipeline form as the page shows it (every field as it is), with these changes."""
    data = {}
    for bound in PipelineForm(instance=pipeline):
        value = bound.value()
        if value is None or value is False:
            continue  # an unticked box is not posted
        data[bound.html_name] = "on" if value is True else str(value)
    data.update(changes)
    return data


def test_what_an_admin_does_on_the_pipeline_page_is_its_history(
    alice_client, pipeline, skills_root
) -> None:
    page = f"/pipelines/{pipeline.slug}/"
    saved = alice_client.post(page, _dashboard_form(pipeline, name="Support desk", cpus="2"))
    assert saved.status_code == 302, saved.content.decode()[:2000]
    created = alice_client.post(f"{page}tokens", {"name": "bot"})
    assert created.status_code == 200
    token = PipelineToken.objects.get(pipeline=pipeline)
    alice_client.post(f"{page}tokens/{token.pk}/revoke")
    alice_client.post(
        f"{page}skills",
        {"name": "pandas", "host_path": str(skills_root / "pandas"), "mode": "ro"},
    )
    skill = Skill.objects.get(pipeline=pipeline)
    alice_client.post(f"{page}skills/{skill.pk}/remove")

    events = _events()
    assert [e.action for e in events] == [
        "pipeline.changed",
        "token.issued",
        "token.revoked",
        "skill.added",
        "skill.removed",
    ]
    assert {e.actor for e in events} == {"admin:alice"}
    assert {e.pipeline_id for e in events} == {pipeline.pk}
    # The form posts every field; only the two the admin changed are recorded.
    assert events[0].detail["changes"] == {"name": ["", "Support desk"], "cpus": [1.0, 2.0]}

    history = _history(alice_client.get(page))
    for action in ("pipeline.changed", "token.issued", "token.revoked", "skill.added"):
        assert action in history
    assert "skill.removed" in history and "cpus: 1.0 → 2.0" in history
    assert f"{token.prefix}…" in history and "<code>pandas</code>" in history
    assert history.count("admin:alice") == 5


def test_deleting_a_pipeline_from_the_dashboard_wants_its_sandboxes_closed_too(
    alice_client, pipeline, bot, fake_runtime
) -> None:
    sandbox_services.open_sandbox(pipeline, CHAT, bot)
    page = alice_client.get(f"/pipelines/{pipeline.slug}/").content.decode()
    assert 'name="close" value="1"' in page  # the box to tick, as there is a live sandbox
    delete = reverse("pipeline-delete", kwargs={"slug": pipeline.slug})
    refused = alice_client.post(delete, follow=True)
    assert "1 live sandboxes" in refused.content.decode()
    assert Pipeline.objects.filter(pk=pipeline.pk).exists() and not _events("pipeline.deleted")

    deleted = alice_client.post(delete, {"close": "1"})
    assert deleted.status_code == 302 and deleted.url == "/pipelines/"
    assert not Pipeline.objects.filter(pk=pipeline.pk).exists()
    [event] = _events("pipeline.deleted")
    assert event.actor == "admin:alice" and event.detail == {"slug": "support", "closed": 1}
    assert [e.actor for e in _events("sandbox.destroyed")] == ["admin:alice"]


# --- the Django admin site ----------------------------------------------------------------------


def _change_form(client: Client, url: str) -> dict[str, Any]:
    """Everything the admin's change form would post as it stands: the model's fields, and
    each inline's management form (`skills-TOTAL_FORMS` …) and rows."""
    page = client.get(url)
    assert page.status_code == 200
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        forms += [inline.formset.management_form, *inline.formset.forms]
    data: dict[str, Any] = {}
    for form in forms:
        for bound in form:
            value = bound.value()
            if value is None or value is False:
                continue
            data[bound.html_name] = "on" if value is True else value
    return data


def test_a_change_in_the_admin_site_is_recorded_as_the_admins_via_the_site(
    alice_client, pipeline
) -> None:
    services.issue_token(pipeline, Actor("admin", "bob"))  # a row in the tokens inline
    url = f"/admin/pipelines/pipeline/{pipeline.pk}/change/"
    data = _change_form(alice_client, url)
    assert data["skills-TOTAL_FORMS"] == 0 and data["tokens-TOTAL_FORMS"] == 1
    saved = alice_client.post(url, {**data, "cpus": "2", "_save": "Save"})
    assert saved.status_code == 302, saved.content.decode()[:3000]
    assert Pipeline.objects.get(pk=pipeline.pk).cpus == 2.0
    [changed] = _events("pipeline.changed")
    assert changed.actor == "admin:alice"
    assert changed.detail == {"changes": {"cpus": [1.0, 2.0]}, "via": "admin site"}


def test_the_admin_sites_skills_inline_adds_changes_and_removes_on_the_record(
    alice_client, pipeline, skills_root
) -> None:
    url = f"/admin/pipelines/pipeline/{pipeline.pk}/change/"
    path = str(skills_root / "pandas")
    new_row = {
        "skills-TOTAL_FORMS": "1",
        "skills-0-name": "pandas",
        "skills-0-host_path": path,
        "skills-0-mode": "ro",
        "skills-0-description": "",
    }
    added = alice_client.post(url, {**_change_form(alice_client, url), **new_row, "_save": "1"})
    assert added.status_code == 302, added.content.decode()[:3000]
    skill = Skill.objects.get(pipeline=pipeline, name="pandas")

    data = _change_form(alice_client, url)
    changed = alice_client.post(url, {**data, "skills-0-mode": "rw", "_save": "1"})
    assert changed.status_code == 302, changed.content.decode()[:3000]
    assert Skill.objects.get(pk=skill.pk).mode == "rw"

    removed = alice_client.post(url, {**data, "skills-0-DELETE": "on", "_save": "1"})
    assert removed.status_code == 302, removed.content.decode()[:3000]
    assert not Skill.objects.filter(pk=skill.pk).exists()

    events = _events()
    assert [e.action for e in events] == ["skill.added", "skill.changed", "skill.removed"]
    assert {e.actor for e in events} == {"admin:alice"}
    assert {e.detail["via"] for e in events} == {"admin site"}
    assert events[1].detail["changes"] == {"mode": ["ro", "rw"]}


def test_the_admin_sites_revoke_action_is_recorded_via_the_site(alice_client, pipeline) -> None:
    first, first_plaintext = services.issue_token(pipeline, Actor("admin", "bob"))
    second, _ = services.issue_token(pipeline, Actor("admin", "bob"))
    answer = alice_client.post(
        "/admin/pipelines/pipelinetoken/",
        {"action": "revoke", "_selected_action": [first.pk, second.pk]},
    )
    assert answer.status_code == 302
    assert not PipelineToken.objects.active().exists()
    assert principal_for_token(first_plaintext) is None
    revoked = _events("token.revoked")
    assert sorted(e.detail["token"] for e in revoked) == sorted([first.pk, second.pk])
    assert {(e.actor, e.detail["via"]) for e in revoked} == {("admin:alice", "admin site")}


def test_a_delete_in_the_admin_site_is_recorded_via_the_site(alice_client, pipeline) -> None:
    answer = alice_client.post(f"/admin/pipelines/pipeline/{pipeline.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert not Pipeline.objects.filter(pk=pipeline.pk).exists()
    [deleted] = _events("pipeline.deleted")
    assert deleted.actor == "admin:alice"
    assert deleted.detail == {"slug": "support", "closed": 0, "via": "admin site"}


def test_the_admin_site_deletes_a_pipeline_with_tokens_and_old_sandboxes(
    alice_client, pipeline, bot, fake_runtime
) -> None:
    """Its destroyed sandboxes' rows and its tokens go with it; a live sandbox stands in the
    way (the confirmation page says to close it first)."""
    services.issue_token(pipeline, Actor("admin", "bob"))
    sandbox = sandbox_services.open_sandbox(pipeline, CHAT, bot).sandbox
    url = f"/admin/pipelines/pipeline/{pipeline.pk}/delete/"
    refused = alice_client.get(url)
    assert "close it first" in refused.content.decode()
    alice_client.post(url, {"post": "yes"})  # the same page again: nothing deleted
    assert Pipeline.objects.filter(pk=pipeline.pk).exists()
    sandbox_services.close_sandbox(sandbox, bot, delete_workspace=True)
    assert alice_client.post(url, {"post": "yes"}).status_code == 302
    assert not Pipeline.objects.filter(pk=pipeline.pk).exists()
    assert not Sandbox.objects.filter(pk=sandbox.pk).exists()
    assert not PipelineToken.objects.exists()


# --- the create_pipeline command ----------------------------------------------------------------


def test_the_command_records_its_pipeline_and_token_as_the_commands() -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_pipeline", "helpdesk", "--print-token", stdout=out, stderr=err)
    plaintext = out.getvalue().strip()
    pipeline = Pipeline.objects.get(slug="helpdesk")
    created, issued = _events()
    assert (created.action, issued.action) == ("pipeline.created", "token.issued")
    assert {created.actor, issued.actor} == {"command:create_pipeline"}
    assert created.pipeline_id == issued.pipeline_id == pipeline.pk
    assert issued.detail["prefix"] == PipelineToken.objects.get().prefix
    assert plaintext.startswith("byd_") and plaintext not in json.dumps(issued.detail)

    call_command("create_pipeline", "helpdesk", "--scope", "{sender_id}", stderr=err)
    [changed] = _events("pipeline.changed")
    assert changed.actor == "command:create_pipeline"
    assert changed.detail == {
        "changes": {"scope_template": ["{launcher_type}_{launcher_id}", "{sender_id}"]}
    }


def test_the_command_issues_a_key_shaped_for_e2b() -> None:
    out = io.StringIO()
    call_command("create_pipeline", "agents", "--e2b-key", stdout=out, stderr=io.StringIO())
    plaintext = out.getvalue().strip()
    assert re.fullmatch(r"e2b_[0-9a-f]{40}", plaintext)
    found = principal_for_token(plaintext)
    assert found is not None and found.pipeline == Pipeline.objects.get(slug="agents")


# --- bulk destroy from the fleet ----------------------------------------------------------------


def test_a_bulk_destroy_is_done_by_a_worker_as_the_admin(
    alice_client, pipeline, bot, fake_runtime, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    sandbox = sandbox_services.open_sandbox(pipeline, CHAT, bot).sandbox
    queued: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, args=(), **_: queued.append((name, list(args)))
    )
    with django_capture_on_commit_callbacks(execute=True):
        answer = alice_client.post(reverse("fleet-destroy"), {"sandbox": [str(sandbox.pk)]})
    assert answer.status_code == 302
    destroys = [args for name, args in queued if name == "sandboxes.destroy"]
    assert len(destroys) == 1 and "admin:alice" in destroys[0]
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.RUNNING  # not yet: a worker will

    assert tasks.destroy.apply(args=destroys[0]).get() == State.DESTROYED
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.DESTROYED
    closing = Event.objects.filter(
        sandbox=sandbox, action__in=["sandbox.stopping", "sandbox.destroyed"]
    )
    assert sorted(closing.values_list("action", "actor")) == [
        ("sandbox.destroyed", "admin:alice"),
        ("sandbox.stopping", "admin:alice"),
    ]
