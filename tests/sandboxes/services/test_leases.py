"""Leases and fencing. Pure lease logic: the fake runtime stands in for the engine."""

from datetime import timedelta

import pytest
from django.utils import timezone

from boxyard.errors import LeaseBusy, StaleEpoch, TakenOver
from sandboxes import services
from sandboxes.models import Event, Lease
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db


@pytest.fixture
def opened(pipeline, bot, fake_runtime):
    return services.open_sandbox(pipeline, CHAT, bot, holder="agent-a")


def expire(lease: Lease) -> None:
    Lease.objects.filter(pk=lease.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


def test_open_takes_the_lease_with_epoch_one(opened) -> None:
    assert opened.lease.holder == "agent-a"
    assert opened.lease.epoch == 1
    assert opened.lease.expires_at > timezone.now()


def test_same_holder_shares_the_lease(opened, pipeline, bot) -> None:
    again = services.open_sandbox(pipeline, CHAT, bot, holder="agent-a")
    assert again.sandbox.pk == opened.sandbox.pk
    assert again.lease.epoch == 1


def test_another_holder_is_told_who_holds_it_and_until_when(opened, pipeline, bot) -> None:
    with pytest.raises(LeaseBusy) as caught:
        services.open_sandbox(pipeline, CHAT, bot, holder="agent-b")
    assert caught.value.status == 409
    assert caught.value.extra["holder"] == "agent-a"
    assert caught.value.extra["expires_at"] == Lease.objects.get().expires_at


def test_expired_lease_goes_to_the_next_caller_with_a_new_epoch(opened, pipeline, bot) -> None:
    expire(opened.lease)
    taken = services.open_sandbox(pipeline, CHAT, bot, holder="agent-b")
    assert (taken.lease.holder, taken.lease.epoch) == ("agent-b", 2)


def test_stale_epoch_is_refused_after_the_lease_changed_hands(opened, pipeline, bot) -> None:
    expire(opened.lease)
    services.open_sandbox(pipeline, CHAT, bot, holder="agent-b")
    with pytest.raises((LeaseBusy, StaleEpoch)):
        services.renew_lease(opened.sandbox, bot, holder="agent-a", epoch=1)
    services.release_lease(opened.sandbox, bot, holder="agent-b", epoch=2)
    # Free again, but agent-a's epoch 1 predates agent-b's tenure: fenced off.
    with pytest.raises(StaleEpoch):
        services.renew_lease(opened.sandbox, bot, holder="agent-a", epoch=1)


def test_renew_extends_and_release_frees(opened, bot) -> None:
    """A renew moves the expiry to a full lease from now. The lease is first made to expire
    in five seconds, so a renew that did nothing (or moved it by less) is caught."""
    soon = timezone.now() + timedelta(seconds=5)
    Lease.objects.filter(pk=opened.lease.pk).update(expires_at=soon)
    renewed = services.renew_lease(opened.sandbox, bot, holder="agent-a", epoch=1)
    full = timedelta(seconds=opened.sandbox.pipeline.lease_timeout_seconds)
    assert renewed.expires_at >= timezone.now() + full - timedelta(seconds=5)
    assert Lease.objects.get(pk=opened.lease.pk).expires_at == renewed.expires_at  # stored
    assert (renewed.holder, renewed.epoch) == ("agent-a", 1)  # the same tenure, renewed
    released = services.release_lease(opened.sandbox, bot, holder="agent-a", epoch=1)
    assert released.holder == ""
    assert Lease.objects.get(pk=opened.lease.pk).holder == ""


def test_release_by_a_non_holder_is_refused(opened, bot) -> None:
    with pytest.raises(LeaseBusy):
        services.release_lease(opened.sandbox, bot, holder="agent-b")


def test_takeover_bumps_the_epoch_and_the_old_holder_gets_423(
    opened, pipeline, bot, alice_actor
) -> None:
    lease = services.takeover_lease(
        opened.sandbox, alice_actor, holder="admin:alice", reason="debugging"
    )
    assert (lease.holder, lease.epoch, lease.taken_over_from) == ("admin:alice", 2, "agent-a")
    with pytest.raises(TakenOver) as caught:
        services.renew_lease(opened.sandbox, bot, holder="agent-a", epoch=1)
    assert caught.value.status == 423
    assert "admin:alice" in caught.value.message
    with pytest.raises(TakenOver):
        services.open_sandbox(pipeline, CHAT, bot, holder="agent-a")
    # A third party is merely busy, not taken over.
    with pytest.raises(LeaseBusy):
        services.open_sandbox(pipeline, CHAT, bot, holder="agent-c")
    assert Event.objects.filter(action="lease.taken_over", reason="debugging").exists()


def test_after_release_of_a_takeover_the_bot_continues(opened, pipeline, bot, alice_actor) -> None:
    services.takeover_lease(opened.sandbox, alice_actor, holder="admin:alice")
    services.release_lease(opened.sandbox, alice_actor, holder="admin:alice")
    back = services.open_sandbox(pipeline, CHAT, bot, holder="agent-a")
    assert back.sandbox.pk == opened.sandbox.pk
    assert (back.lease.holder, back.lease.epoch) == ("agent-a", 3)


def test_default_holder_is_the_scope_key(pipeline, bot, fake_runtime) -> None:
    opened = services.open_sandbox(pipeline, CHAT, bot)
    assert opened.lease.holder == "group_123456"
    # A simple bot never passes holder or epoch and is never refused by itself.
    services.renew_lease(opened.sandbox, bot)
    assert services.open_sandbox(pipeline, CHAT, bot).lease.epoch == 1


def test_holder_and_epoch_are_validated(opened, bot) -> None:
    from boxyard.errors import InvalidInput

    with pytest.raises(InvalidInput, match="epoch"):
        services.renew_lease(opened.sandbox, bot, holder="agent-a", epoch=-1)
    with pytest.raises(InvalidInput, match="holder"):
        services.renew_lease(opened.sandbox, bot, holder="x" * 500)


def test_close_that_the_engine_refuses_changes_nothing(opened, bot, fake_runtime) -> None:
    from boxyard.errors import RuntimeUnavailable
    from sandboxes.models import Sandbox

    def unreachable(name_or_id: str) -> None:
        raise RuntimeUnavailable("the Docker Engine is unreachable")

    fake_runtime.remove_container = unreachable
    with pytest.raises(RuntimeUnavailable):
        services.close_sandbox(opened.sandbox, bot, holder="agent-a")
    assert Sandbox.objects.get().state == "running"


def test_the_lease_says_who_took_it_for_its_holder(opened, bot, alice_actor) -> None:
    from sandboxes.templatetags.boxyard import actor

    sandbox = opened.sandbox
    assert Lease.objects.get(sandbox=sandbox).acquired_by == str(bot)
    services.takeover_lease(sandbox, alice_actor)
    assert Lease.objects.get(sandbox=sandbox).acquired_by == "admin:alice"
    services.release_lease(sandbox, alice_actor, force=True)
    assert Lease.objects.get(sandbox=sandbox).acquired_by == ""
    # As the dashboard says it.
    assert actor("bot:support/token-3") == "the token 3 of support"
    assert actor("admin:alice") == "the admin alice"
    assert actor("system:boxyard") == "Boxyard"
