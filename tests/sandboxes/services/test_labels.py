"""What a caller says of its sandbox besides its chat: its labels (metadata) and environment,
kept on the row and in the history; its lifetime, within the pipeline's time to live; a
sandbox of its own when the caller names no chat; and a sandbox opened again by its id.
Bookkeeping only: the fake runtime (the E2B tests run them on the real engine)."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from boxyard.errors import InvalidInput, NotFound, TakenOver
from sandboxes import services
from sandboxes.models import Event, Sandbox, State
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db


def test_labels_and_environment_are_added_and_recorded_without_values(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox

    services.label_sandbox(sandbox, bot, metadata={"team": "a"}, env={"TOKEN": "s3cret"})
    labelled = services.label_sandbox(sandbox, bot, metadata={"run": "2"})

    assert labelled.metadata == {"team": "a", "run": "2"}
    assert Sandbox.objects.get(pk=sandbox.pk).env == {"TOKEN": "s3cret"}
    events = Event.objects.filter(sandbox=sandbox, action="sandbox.labelled").order_by("id")
    assert [event.detail for event in events] == [
        {"metadata": {"team": "a"}, "env": ["TOKEN"]},
        {"metadata": {"run": "2"}, "env": []},
    ]
    services.label_sandbox(sandbox, bot, metadata={"run": "2"})  # nothing new: no event
    assert events.count() == 2


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"metadata": {"team": 5}}, "metadata.team"),
        ({"metadata": {"": "x"}}, "metadata."),
        ({"metadata": {"a": "x\x00"}}, "metadata.a"),
        ({"env": {"1BAD": "x"}}, "env.1BAD"),
        ({"env": ["A=1"]}, "env"),
    ],
)
def test_bad_labels_are_refused_by_name_and_nothing_changes(
    pipeline: Any, bot: Any, fake_runtime: Any, given: dict[str, Any], field: str
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    with pytest.raises(InvalidInput) as refused:
        services.label_sandbox(sandbox, bot, **given)
    assert refused.value.field == field
    kept = Sandbox.objects.get(pk=sandbox.pk)
    assert (kept.metadata, kept.env) == ({}, {})


def test_the_lifetime_moves_the_end_within_the_time_to_live(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    before = sandbox.expires_at

    timed = services.set_lifetime(sandbox, bot, 90)

    assert timed.expires_at is not None and timed.expires_at != before
    assert timedelta(seconds=80) < timed.expires_at - timezone.now() <= timedelta(seconds=90)
    for wrong in (0, pipeline.ttl_seconds + 1, True, "90"):
        with pytest.raises(InvalidInput) as refused:
            services.set_lifetime(sandbox, bot, wrong, field="timeout")
        assert refused.value.field == "timeout"
    assert Sandbox.objects.get(pk=sandbox.pk).expires_at == timed.expires_at


def test_a_takeover_refuses_the_holders_labels_and_lifetime(
    pipeline: Any, bot: Any, alice_actor: Any, fake_runtime: Any
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.takeover_lease(sandbox, alice_actor)
    with pytest.raises(TakenOver):
        services.set_lifetime(sandbox, bot, 60)
    with pytest.raises(TakenOver):
        services.label_sandbox(sandbox, bot, metadata={"team": "a"})


def test_a_caller_naming_no_chat_gets_a_sandbox_of_its_own(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    chats = services.chat_or_own_sandbox(pipeline, dict(CHAT), bot).sandbox
    again = services.chat_or_own_sandbox(pipeline, dict(CHAT), bot).sandbox
    own = services.chat_or_own_sandbox(pipeline, {"purpose": "x"}, bot).sandbox
    other = services.chat_or_own_sandbox(pipeline, {}, bot).sandbox

    assert chats.pk == again.pk and chats.scope_key == "group_123456"
    assert len({chats.pk, own.pk, other.pk}) == 3
    assert own.scope_key.startswith("own-") and other.scope_key.startswith("own-")
    with pytest.raises(InvalidInput) as refused:
        services.chat_or_own_sandbox(pipeline, {"launcher_type": "group"}, bot)
    assert refused.value.field == "variables.launcher_id"
    assert Sandbox.objects.count() == 3


def test_a_stopped_sandbox_is_resumed_by_its_id_and_a_destroyed_one_is_not(
    pipeline: Any, bot: Any, fake_runtime: Any
) -> None:
    own = services.open_own_sandbox(pipeline, {}, bot).sandbox
    services.close_sandbox(own, bot)
    stopped = Sandbox.objects.select_related("pipeline").get(pk=own.pk)
    assert stopped.state == State.STOPPED

    resumed = services.resume_sandbox(stopped, bot)

    assert resumed.sandbox.pk == own.pk and not resumed.created
    assert resumed.sandbox.state == State.RUNNING
    assert resumed.sandbox.generation == stopped.generation + 1
    services.close_sandbox(resumed.sandbox, bot, delete_workspace=True)
    gone = Sandbox.objects.select_related("pipeline").get(pk=own.pk)
    with pytest.raises(NotFound):
        services.resume_sandbox(gone, bot)
    assert Sandbox.objects.count() == 1
