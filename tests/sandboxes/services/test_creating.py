"""New sandboxes' rows: what a new row is (creating, a free lease, named for its first
container, its time to live set, its event and its count) and the quotas that refuse one,
the pipeline's and the operator's. Pure database: no container is made here."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from boxyard.actors import SYSTEM
from boxyard.errors import QuotaExceeded
from sandboxes import metrics
from sandboxes.models import Event, Lease, Sandbox, State
from sandboxes.services import specs
from sandboxes.services.creating import check_quota, create_row

pytestmark = pytest.mark.django_db


def created(pipeline: Any) -> int:
    return (
        metrics.flush_and_snapshot(pipeline)["pipelines"].get(pipeline.slug, {}).get("created", 0)
    )


def put(sandbox: Sandbox, state: State) -> None:
    Sandbox.objects.filter(pk=sandbox.pk).update(state=state)


def test_a_new_row_is_creating_with_a_free_lease_named_for_generation_one(pipeline, bot) -> None:
    before = timezone.now()
    sandbox = create_row(pipeline, "group_1", {"launcher_id": "1"}, bot)
    after = timezone.now()

    row = Sandbox.objects.select_related("lease").get(pk=sandbox.pk)
    assert (row.state, row.generation, row.container_id) == (State.CREATING, 1, "")
    assert (row.scope_key, row.variables) == ("group_1", {"launcher_id": "1"})
    assert row.container_name.endswith("-g1") and row.id.hex in row.container_name
    assert row.volume_name == f"by-ws-{row.id.hex}"
    assert (row.image, row.retention, row.pooled) == (pipeline.effective_image, "temporary", False)
    assert row.profile == specs.profile_digest(pipeline)
    ttl = timedelta(seconds=pipeline.ttl_seconds)
    slack = timedelta(seconds=2)  # the database's clock, read at its own moment
    assert before + ttl - slack <= row.expires_at <= after + ttl + slack
    assert (row.lease.holder, row.lease.epoch, row.lease.expires_at) == ("", 0, None)
    # The caller's copy is the row as stored, names included.
    assert (sandbox.container_name, sandbox.volume_name) == (row.container_name, row.volume_name)

    [event] = Event.objects.filter(sandbox=sandbox)
    assert (event.action, event.actor) == ("sandbox.created", "bot:support-bot")
    assert event.detail == {"scope_key": "group_1", "host": "local"}
    assert created(pipeline) == 1


def test_a_pooled_row_says_so(pipeline) -> None:
    sandbox = create_row(pipeline, "pool:abc", {}, SYSTEM, pooled=True)
    assert Sandbox.objects.get(pk=sandbox.pk).pooled
    event = Event.objects.get(sandbox=sandbox, action="sandbox.created")
    assert event.detail == {"scope_key": "pool:abc", "pooled": True, "host": "local"}
    assert created(pipeline) == 1


def test_the_pipelines_maximum_refuses_and_creates_nothing(make_pipeline, bot) -> None:
    pipeline = make_pipeline(max_live_sandboxes=2)
    create_row(pipeline, "a", {}, bot)
    create_row(pipeline, "b", {}, bot)
    with pytest.raises(QuotaExceeded) as refused:
        create_row(pipeline, "c", {}, bot)
    assert refused.value.status == 429 and refused.value.extra["limit"] == 2
    assert "max_live_sandboxes=2" in refused.value.message
    assert pipeline.slug in refused.value.message
    assert sorted(Sandbox.objects.values_list("scope_key", flat=True)) == ["a", "b"]
    assert Lease.objects.count() == 2
    assert Event.objects.filter(action="sandbox.created").count() == 2
    assert created(pipeline) == 2


def test_the_operators_maximum_counts_every_pipeline(make_pipeline, bot, settings) -> None:
    first, second = make_pipeline(), make_pipeline()
    settings.BOXYARD_MAX_LIVE_SANDBOXES = 2
    create_row(first, "a", {}, bot)
    create_row(second, "a", {}, bot)
    with pytest.raises(QuotaExceeded) as refused:
        create_row(second, "b", {}, bot)
    assert refused.value.extra["limit"] == 2
    assert "BOXYARD_MAX_LIVE_SANDBOXES=2" in refused.value.message
    assert Sandbox.objects.count() == 2
    assert created(second) == 1


@pytest.mark.parametrize("state", [State.STOPPED, State.DESTROYED])
def test_a_sandbox_without_a_container_holds_no_slot(make_pipeline, bot, state) -> None:
    pipeline = make_pipeline(max_live_sandboxes=1)
    put(create_row(pipeline, "a", {}, bot), state)
    check_quota(pipeline)
    create_row(pipeline, "b", {}, bot)
    with pytest.raises(QuotaExceeded):
        check_quota(pipeline)


@pytest.mark.parametrize("state", [State.RUNNING, State.STOPPING, State.UNKNOWN])
def test_a_sandbox_that_may_have_a_container_holds_its_slot(make_pipeline, bot, state) -> None:
    pipeline = make_pipeline(max_live_sandboxes=1)
    put(create_row(pipeline, "a", {}, bot), state)
    with pytest.raises(QuotaExceeded):
        create_row(pipeline, "b", {}, bot)


def test_a_second_live_row_for_a_key_spoils_only_its_own_savepoint(pipeline, bot) -> None:
    """Two opens of a new key race; the loser's IntegrityError must leave its transaction
    usable, so that it can read the winner's row."""
    with transaction.atomic():
        winner = create_row(pipeline, "group_1", {}, bot)
        with pytest.raises(IntegrityError):
            create_row(pipeline, "group_1", {}, bot)
        assert Sandbox.objects.live().get(pipeline=pipeline, scope_key="group_1") == winner
        create_row(pipeline, "group_2", {}, bot)
    assert sorted(Sandbox.objects.values_list("scope_key", flat=True)) == ["group_1", "group_2"]
    assert Lease.objects.count() == 2
    assert Event.objects.filter(action="sandbox.created").count() == 2


def test_a_destroyed_sandbox_frees_its_key(pipeline, bot) -> None:
    old = create_row(pipeline, "group_1", {}, bot)
    put(old, State.DESTROYED)
    new = create_row(pipeline, "group_1", {}, bot)
    assert new.pk != old.pk and new.volume_name != old.volume_name
