"""Who may see what: the permission-checked fetches every entry point shares. A pipeline's
token sees its own pipeline's sandboxes and execs and nothing else, and what it may not see
is "not found", exactly as what does not exist; an admin sees everything. Pure database."""

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser

from boxyard.errors import InvalidInput, NotFound
from pipelines.models import PipelineToken
from sandboxes.models import Exec, Sandbox, State
from sandboxes.selectors import (
    Principal,
    exec_for,
    find_sandbox,
    pipeline_for,
    principal_for_token,
    principal_for_user,
    sandbox_for,
    sandboxes_for,
    visible_sandboxes,
)
from sandboxes.services.creating import create_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def support_pipeline(make_pipeline: Any) -> Any:
    return make_pipeline(slug="support")


@pytest.fixture
def billing_pipeline(make_pipeline: Any) -> Any:
    """Another team's pipeline."""
    return make_pipeline(slug="billing")


@pytest.fixture
def support_bot(support_pipeline: Any) -> Principal:
    """The support pipeline's token, as the API sees it."""
    _, plaintext = PipelineToken.issue(support_pipeline, name="bot")
    principal = principal_for_token(plaintext)
    assert principal is not None
    return principal


@pytest.fixture
def admin_principal(django_user_model: Any) -> Principal:
    user = django_user_model.objects.create_user(
        "alice", is_staff=True
    )  # no password: nothing to hash
    principal = principal_for_user(user)
    assert principal is not None
    return principal


def sandbox(pipeline: Any, key: str, state: State = State.RUNNING) -> Sandbox:
    made = create_row(pipeline, key, {}, "system:tests")
    Sandbox.objects.filter(pk=made.pk).update(state=state)
    made.refresh_from_db()
    return made


def an_exec(of: Sandbox) -> Exec:
    return Exec.objects.create(
        sandbox=of, command="true", cwd="/workspace", timeout_seconds=5, actor="bot:x"
    )


def not_found(call: Any) -> str:
    with pytest.raises(NotFound) as refused:
        call()
    assert refused.value.status == 404
    return refused.value.message


# --- one sandbox ------------------------------------------------------------------------------


def test_a_bot_sees_its_own_pipelines_sandbox(support_pipeline, support_bot) -> None:
    mine = sandbox(support_pipeline, "group_1")
    for given in (mine.pk, str(mine.pk), mine.pk.hex):
        found = sandbox_for(support_bot, given)
        assert found.pk == mine.pk and found.pipeline is support_bot.pipeline


def test_another_pipelines_sandbox_is_not_found_like_one_that_never_was(
    billing_pipeline, support_bot
) -> None:
    """The answer for another team's sandbox must not tell it exists."""
    theirs = sandbox(billing_pipeline, "group_1")
    nowhere = uuid.uuid4()
    assert not_found(lambda: sandbox_for(support_bot, theirs.pk)) == f"no sandbox {theirs.pk}"
    assert not_found(lambda: sandbox_for(support_bot, nowhere)) == f"no sandbox {nowhere}"


def test_a_page_finds_a_sandbox_it_may_see_or_none(
    billing_pipeline: Any, support_pipeline: Any, support_bot: Any, admin_principal: Any
) -> None:
    """What the dashboard's websockets fetch with: the same rule, and None instead of a 404
    for a sandbox gone (or never there, or another pipeline's)."""
    mine, theirs = sandbox(support_pipeline, "group_1"), sandbox(billing_pipeline, "group_1")
    found = find_sandbox(support_bot, str(mine.pk))
    assert found is not None and found.pk == mine.pk
    assert find_sandbox(support_bot, theirs.pk) is None
    assert find_sandbox(support_bot, uuid.uuid4()) is None
    assert find_sandbox(support_bot, "not-a-uuid") is None
    seen = find_sandbox(admin_principal, theirs.pk)
    assert seen is not None and seen.pk == theirs.pk
    assert set(visible_sandboxes(support_bot)) == {mine}
    assert set(visible_sandboxes(admin_principal)) == {mine, theirs}


@pytest.mark.parametrize(
    "malformed", ["", "not-a-uuid", "12345", "\x00", "../../etc/passwd", None, 42, ["x"]]
)
def test_a_malformed_id_is_not_found(support_bot, admin_principal, malformed) -> None:
    for principal in (support_bot, admin_principal):
        not_found(lambda principal=principal: sandbox_for(principal, malformed))


def test_an_admin_sees_every_pipelines_sandbox(
    support_pipeline, billing_pipeline, admin_principal
) -> None:
    for pipeline in (support_pipeline, billing_pipeline):
        found = sandbox_for(admin_principal, sandbox(pipeline, "group_1").pk)
        assert found.pipeline == pipeline
    not_found(lambda: sandbox_for(admin_principal, uuid.uuid4()))


# --- lists ----------------------------------------------------------------------------------------


def keys(found: list[Sandbox]) -> list[tuple[str, str]]:
    return sorted((s.pipeline.slug, s.scope_key) for s in found)


def test_a_bot_lists_its_pipelines_live_sandboxes(
    support_pipeline, billing_pipeline, support_bot, admin_principal
) -> None:
    sandbox(support_pipeline, "running")
    sandbox(support_pipeline, "stopped", State.STOPPED)
    sandbox(support_pipeline, "gone", State.DESTROYED)
    sandbox(billing_pipeline, "theirs")
    assert keys(sandboxes_for(support_bot)) == [("support", "running"), ("support", "stopped")]
    assert keys(sandboxes_for(admin_principal)) == [
        ("billing", "theirs"),
        ("support", "running"),
        ("support", "stopped"),
    ]


def test_lists_filter_by_state_and_scope_key(
    support_pipeline, billing_pipeline, support_bot
) -> None:
    sandbox(support_pipeline, "a")
    sandbox(support_pipeline, "b", State.STOPPED)
    sandbox(support_pipeline, "c", State.DESTROYED)
    sandbox(billing_pipeline, "a", State.DESTROYED)
    assert keys(sandboxes_for(support_bot, status="stopped")) == [("support", "b")]
    assert keys(sandboxes_for(support_bot, status="destroyed")) == [("support", "c")]
    assert keys(sandboxes_for(support_bot, scope_key="a")) == [("support", "a")]
    assert sandboxes_for(support_bot, scope_key="c") == []  # destroyed: not live
    assert sandboxes_for(support_bot, status="running", scope_key="b") == []


@pytest.mark.parametrize(
    ("given", "field"),
    [({"status": "sleeping"}, "status"), ({"scope_key": "group\x00_1"}, "scope_key")],
)
def test_a_list_refuses_what_it_cannot_filter_by(support_bot, given, field) -> None:
    with pytest.raises(InvalidInput) as refused:
        sandboxes_for(support_bot, **given)
    assert refused.value.field == field and refused.value.status == 400


def test_a_list_is_newest_first_up_to_its_limit(support_pipeline, support_bot) -> None:
    made = [sandbox(support_pipeline, f"key-{n}") for n in range(3)]
    assert [s.pk for s in sandboxes_for(support_bot)] == [s.pk for s in reversed(made)]
    assert [s.pk for s in sandboxes_for(support_bot, limit=2)] == [made[2].pk, made[1].pk]


# --- execs ----------------------------------------------------------------------------------------


def test_an_exec_is_found_only_in_its_own_sandbox(support_pipeline, support_bot) -> None:
    first, second = sandbox(support_pipeline, "a"), sandbox(support_pipeline, "b")
    ran = an_exec(first)
    assert exec_for(support_bot, first, ran.pk) == ran
    assert exec_for(support_bot, first, str(ran.pk)) == ran
    not_found(lambda: exec_for(support_bot, second, ran.pk))
    not_found(lambda: exec_for(support_bot, first, uuid.uuid4()))
    not_found(lambda: exec_for(support_bot, first, "not-an-id"))


# --- pipelines and principals -----------------------------------------------------------------


def test_a_bot_reaches_only_its_own_pipeline(
    support_pipeline, billing_pipeline, support_bot
) -> None:
    assert pipeline_for(support_bot, "support") == support_pipeline
    assert not_found(lambda: pipeline_for(support_bot, "billing")) == "no pipeline 'billing'"
    assert not_found(lambda: pipeline_for(support_bot, "nowhere")) == "no pipeline 'nowhere'"


def test_an_admin_reaches_every_pipeline(
    support_pipeline, billing_pipeline, admin_principal
) -> None:
    assert pipeline_for(admin_principal, "support") == support_pipeline
    assert pipeline_for(admin_principal, "billing") == billing_pipeline
    not_found(lambda: pipeline_for(admin_principal, "nowhere"))
    not_found(lambda: pipeline_for(admin_principal, "support\x00"))


def test_a_token_names_its_pipeline_and_itself(support_pipeline, support_bot) -> None:
    token = PipelineToken.objects.get(pipeline=support_pipeline)
    assert support_bot.pipeline == support_pipeline and not support_bot.is_admin
    assert str(support_bot.actor) == f"bot:support/token-{token.pk}"


def test_a_revoked_or_unknown_token_gives_no_principal(support_pipeline) -> None:
    row, plaintext = PipelineToken.issue(support_pipeline, name="old")
    row.revoke()
    assert principal_for_token(plaintext) is None
    assert principal_for_token("byd_" + "x" * 43) is None
    assert principal_for_token("") is None


def test_only_an_active_staff_user_is_an_admin(django_user_model, admin_principal) -> None:
    assert (
        admin_principal.is_admin
        and admin_principal.pipeline is None
        and str(admin_principal.actor) == "admin:alice"
    )
    member = django_user_model.objects.create_user("bob")
    retired = django_user_model.objects.create_user("carol", is_staff=True, is_active=False)
    for user in (member, retired, AnonymousUser(), None):
        assert principal_for_user(user) is None
