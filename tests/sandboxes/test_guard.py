"""The guard of every change: the row read again under its lock, the state the operation
needs, the lease taken, renewed or refusing, activity counted, and nothing left changed when
anything refuses. Pure lease and state logic: the fake runtime stands in for the engine."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from boxyard.errors import InvalidInput, InvalidState, LeaseBusy, StaleEpoch, TakenOver
from sandboxes import services
from sandboxes.guard import LIVE, acting_on
from sandboxes.models import Event, Lease, Sandbox, State
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(pipeline: Any, bot: Any, fake_runtime: Any) -> Sandbox:
    return services.open_sandbox(pipeline, CHAT, bot, holder="agent-a").sandbox


def test_the_body_sees_the_row_as_it_is_now(sandbox, bot) -> None:
    Sandbox.objects.filter(pk=sandbox.pk).update(health_failures=7)
    with acting_on(sandbox, bot, "look", holder="agent-a") as acting:
        assert acting.sandbox.health_failures == 7
        assert acting.sandbox is not sandbox
        assert acting.sandbox.pipeline is sandbox.pipeline  # not read again
        assert (acting.holder, acting.lease.holder, acting.lease.epoch) == ("agent-a", "agent-a", 1)


def test_a_stopped_sandbox_refuses_naming_the_operation(sandbox, bot) -> None:
    services.close_sandbox(sandbox, bot, holder="agent-a")
    stopped = "cannot exec: the sandbox is stopped \\(closed\\)"
    with (
        pytest.raises(InvalidState, match=stopped),
        acting_on(sandbox, bot, "exec", holder="agent-a"),
    ):
        pass
    # The lease's own operations work in every live state.
    with acting_on(sandbox, bot, "renew", holder="agent-a", states=LIVE) as acting:
        assert acting.sandbox.state == State.STOPPED


def test_another_holder_is_refused_and_one_taken_over_is_told(sandbox, bot, alice_actor) -> None:
    with pytest.raises(LeaseBusy), acting_on(sandbox, bot, "exec", holder="agent-b"):
        pass
    services.takeover_lease(sandbox, alice_actor, holder="admin:alice")
    with pytest.raises(TakenOver), acting_on(sandbox, bot, "exec", holder="agent-a"):
        pass


def test_a_stale_epoch_is_refused(sandbox, bot) -> None:
    with pytest.raises(StaleEpoch), acting_on(sandbox, bot, "exec", holder="agent-a", epoch=2):
        pass
    with acting_on(sandbox, bot, "exec", holder="agent-a", epoch=1) as acting:
        assert acting.lease.epoch == 1


def test_a_free_lease_is_taken_and_a_refusal_inside_takes_it_back(sandbox, bot) -> None:
    services.release_lease(sandbox, bot, holder="agent-a")
    with pytest.raises(InvalidInput), acting_on(sandbox, bot, "exec", holder="agent-b"):
        raise InvalidInput("cmd", "refused after the lease was taken")
    lease = Lease.objects.get(sandbox=sandbox)
    assert (lease.holder, lease.epoch) == ("", 1)  # rolled back with the body
    assert not Event.objects.filter(action="lease.acquired", detail__holder="agent-b").exists()
    with acting_on(sandbox, bot, "exec", holder="agent-b") as acting:
        assert (acting.lease.holder, acting.lease.epoch) == ("agent-b", 2)
    assert Event.objects.filter(action="lease.acquired", detail__holder="agent-b").count() == 1


def test_the_callers_lease_is_renewed(sandbox, bot) -> None:
    soon = timezone.now() + timedelta(seconds=5)
    Lease.objects.filter(sandbox=sandbox).update(expires_at=soon)
    with acting_on(sandbox, bot, "exec", holder="agent-a"):
        pass
    assert Lease.objects.get(sandbox=sandbox).expires_at > soon + timedelta(seconds=60)


def test_without_the_lease_an_admin_acts_whoever_holds_it(sandbox, alice_actor) -> None:
    with acting_on(sandbox, alice_actor, "stop", hold_lease=False) as acting:
        assert acting.lease is None
    assert Lease.objects.get(sandbox=sandbox).holder == "agent-a"  # untouched


def test_activity_is_counted_only_when_asked(sandbox, bot) -> None:
    long_ago = timezone.now() - timedelta(hours=1)
    Sandbox.objects.filter(pk=sandbox.pk).update(last_activity_at=long_ago)
    with acting_on(sandbox, bot, "read", holder="agent-a"):
        pass
    assert Sandbox.objects.get(pk=sandbox.pk).last_activity_at == long_ago
    with acting_on(sandbox, bot, "write", holder="agent-a", activity=True):
        pass
    assert Sandbox.objects.get(pk=sandbox.pk).last_activity_at > long_ago


def test_bad_holders_and_epochs_are_refused_before_anything(sandbox, bot) -> None:
    bad = [("x" * 201, None, "holder"), ("a\nb", None, "holder"), ("agent-a", -1, "epoch")]
    for holder, epoch, field in [*bad, ("agent-a", True, "epoch")]:
        refused = pytest.raises(InvalidInput, match=field)
        with refused, acting_on(sandbox, bot, "exec", holder=holder, epoch=epoch):
            pass


def test_a_sandbox_that_is_gone_is_not_found(sandbox, bot) -> None:
    from boxyard.errors import NotFound

    Sandbox.objects.filter(pk=sandbox.pk).delete()
    with pytest.raises(NotFound), acting_on(sandbox, bot, "exec"):
        pass
