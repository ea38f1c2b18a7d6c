"""A sandbox's lifetime set by its holder, within the pipeline's ceiling (the fake runtime
stands in for the engine; the reaper's side is tests/sandboxes/services/test_reaping.py)."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from boxyard.errors import InvalidInput, TakenOver
from pipelines.scope import Scope
from sandboxes import services
from sandboxes.models import Event, Sandbox
from sandboxes.services import Actor

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(pipeline: Any, bot: Actor, fake_runtime: Any) -> Sandbox:
    """A sandbox of a scope key its caller named itself (as the Bay API's cargos are)."""
    opened = services.open_scope(pipeline, Scope(key="bay-own", variables={}), bot)
    assert opened.created and opened.sandbox.scope_key == "bay-own"
    return opened.sandbox


def test_a_lifetime_within_the_ceiling_moves_the_end_and_is_recorded(
    sandbox: Sandbox, bot: Actor
) -> None:
    before = timezone.now()
    changed = services.set_lifetime(sandbox, bot, 120)
    stored = Sandbox.objects.get(pk=sandbox.pk).expires_at
    assert stored == changed.expires_at
    assert before + timedelta(seconds=120) <= stored <= timezone.now() + timedelta(seconds=120)
    [event] = Event.objects.filter(sandbox=sandbox, action="sandbox.lifetime_set")
    assert event.actor == str(bot)


@pytest.mark.parametrize("seconds", [0, -5, True, 1.5])
def test_a_lifetime_must_be_a_positive_whole_number(
    sandbox: Sandbox, bot: Actor, seconds: Any
) -> None:
    with pytest.raises(InvalidInput) as refused:
        services.set_lifetime(sandbox, bot, seconds, field="ttl")
    assert refused.value.field == "ttl"


def test_past_the_pipelines_ceiling_is_refused_and_nothing_changes(
    sandbox: Sandbox, bot: Actor, pipeline: Any
) -> None:
    with pytest.raises(InvalidInput) as before_opening:
        services.check_lifetime(pipeline, pipeline.ttl_seconds + 1, field="ttl")
    assert "ttl_seconds" in before_opening.value.message
    services.set_lifetime(sandbox, bot, 60)
    expires = Sandbox.objects.get(pk=sandbox.pk).expires_at
    # Within the ceiling as a length, past it counted from the sandbox's start.
    Sandbox.objects.filter(pk=sandbox.pk).update(
        started_at=timezone.now() - timedelta(seconds=pipeline.ttl_seconds - 30)
    )
    with pytest.raises(InvalidInput) as refused:
        services.set_lifetime(Sandbox.objects.get(pk=sandbox.pk), bot, 60, field="extend_by")
    assert refused.value.field == "extend_by" and "at most" in refused.value.message
    assert Sandbox.objects.get(pk=sandbox.pk).expires_at == expires
    assert Event.objects.filter(sandbox=sandbox, action="sandbox.lifetime_set").count() == 1


def test_a_takeover_refuses_the_holders_lifetime(
    sandbox: Sandbox, bot: Actor, alice_actor: Actor
) -> None:
    services.takeover_lease(sandbox, alice_actor, reason="looking")
    with pytest.raises(TakenOver):
        services.set_lifetime(sandbox, bot, 60)
