"""Claiming, the database half of an open, on its own: which sandbox a scope key gets (its
own, one from the warm pool, or a new row), with the caller's lease, and what is counted.
No container is made here (booting does that), so the rows are put in the states the story
needs directly. The pool and the opens end to end are proven on the real engine in
test_pool.py and test_opening.py."""

import contextlib
import threading
from typing import Any

import pytest
from celery import current_app
from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from boxyard.errors import InvalidState, LeaseBusy, PoolExhausted, QuotaExceeded
from pipelines.models import PoolPolicy
from pipelines.scope import scope_of
from sandboxes import lifecycle, metrics
from sandboxes.models import Event, Lease, Sandbox, State
from sandboxes.services import claiming, creating, specs
from sandboxes.services.claiming import claim
from sandboxes.services.creating import create_row
from tests.conftest import CHAT

pytestmark = pytest.mark.django_db

KEY = "group_123456"  # CHAT's key under the default scope


@pytest.fixture(autouse=True)
def _no_engine(fake_runtime: Any) -> None:
    """A claim never reaches the engine; should it, the fake answers."""


@pytest.fixture
def queued(monkeypatch: Any) -> list[tuple[str, list[Any]]]:
    """The tasks handed to the workers."""
    sent: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(
        current_app, "send_task", lambda name, args=(), **_: sent.append((name, list(args)))
    )
    return sent


def claim_chat(pipeline: Any, bot: Any, holder: str | None = "agent-a", **chat: str) -> Any:
    return claim(pipeline, scope_of(pipeline.scope_template, {**CHAT, **chat}), bot, holder)


def counts(pipeline: Any) -> dict[str, int]:
    entry = metrics.flush_and_snapshot(pipeline)["pipelines"].get(pipeline.slug, {})
    names = ("created", "reused", "pool_hits", "pool_misses")
    return {name: entry.get(name, 0) for name in names if entry.get(name, 0)}


def put(sandbox: Sandbox, state: State, **fields: Any) -> Sandbox:
    Sandbox.objects.filter(pk=sandbox.pk).update(state=state, **fields)
    sandbox.refresh_from_db()
    return sandbox


def pooled(pipeline: Any) -> Sandbox:
    """A ready sandbox in the pipeline's warm pool, made with its profile as it is now."""
    made = create_row(pipeline, "pool:ready", {}, "system:boxyard", pooled=True)
    return put(made, State.RUNNING, container_id="c-pooled")


# --- the three sources ------------------------------------------------------------------------


def test_a_new_key_gets_a_new_row_with_the_callers_lease(pipeline, bot) -> None:
    claimed = claim_chat(pipeline, bot)
    assert claimed.source == "cold"
    assert (claimed.sandbox.scope_key, claimed.sandbox.state) == (KEY, State.CREATING)
    assert claimed.sandbox.variables == CHAT
    assert (claimed.lease.holder, claimed.lease.epoch) == ("agent-a", 1)
    assert Lease.objects.get(sandbox=claimed.sandbox).holder == "agent-a"
    assert counts(pipeline) == {"created": 1}


def test_a_known_key_gets_its_own_sandbox_and_counts_a_reuse(pipeline, bot) -> None:
    first = claim_chat(pipeline, bot)
    again = claim_chat(pipeline, bot, sender_id="someone-else")
    assert again.source == "existing" and again.sandbox.pk == first.sandbox.pk
    assert again.lease.epoch == 1  # shared, not taken again
    assert Sandbox.objects.count() == 1
    assert counts(pipeline) == {"created": 1, "reused": 1}


def test_without_a_holder_the_scope_key_holds_the_lease(pipeline, bot) -> None:
    assert claim_chat(pipeline, bot, holder=None).lease.holder == KEY


def test_a_new_key_takes_a_ready_pooled_sandbox_and_has_the_pool_refilled(
    make_pipeline, bot, queued, django_capture_on_commit_callbacks
) -> None:
    pipeline = make_pipeline(pool_size=1)
    ready = pooled(pipeline)
    with django_capture_on_commit_callbacks(execute=True):
        claimed = claim_chat(pipeline, bot)
    assert (claimed.source, claimed.sandbox.pk) == ("pool", ready.pk)
    row = Sandbox.objects.get(pk=ready.pk)
    assert (row.scope_key, row.pooled, row.state) == (KEY, False, State.RUNNING)
    assert ("sandboxes.refill_pools", []) in queued
    assert counts(pipeline) == {"created": 1, "pool_hits": 1}
    assert not Event.objects.filter(action="pool.missed").exists()


def test_a_concurrent_claim_of_the_key_is_joined(pipeline, bot, monkeypatch) -> None:
    """Two opens of a new key: the one that loses the race to create the row takes the
    winner's."""
    real_create_row = claiming.create_row
    winners: list[Sandbox] = []

    def another_open_first(pipeline: Any, key: str, *args: Any, **kwargs: Any) -> Sandbox:
        winners.append(real_create_row(pipeline, key, *args, **kwargs))
        monkeypatch.setattr(claiming, "create_row", real_create_row)
        return real_create_row(pipeline, key, *args, **kwargs)  # refused: the key is taken

    monkeypatch.setattr(claiming, "create_row", another_open_first)
    claimed = claim_chat(pipeline, bot)
    assert claimed.source == "existing"
    assert Sandbox.objects.get().pk == claimed.sandbox.pk == winners[0].pk
    assert claimed.lease.holder == "agent-a"


# --- a sandbox that needs starting again --------------------------------------------------------


def test_a_stopped_sandbox_starts_again_in_a_new_generation(pipeline, bot) -> None:
    first = claim_chat(pipeline, bot).sandbox
    put(first, State.STOPPED, stop_reason="idle", stopped_at=Now())
    Lease.objects.filter(sandbox=first).update(holder="", expires_at=None)
    claimed = claim_chat(pipeline, bot, holder="agent-b")
    row = claimed.sandbox
    assert (claimed.source, row.pk, row.state, row.generation) == (
        "existing",
        first.pk,
        State.CREATING,
        2,
    )
    assert row.container_name == first.container_name.removesuffix("-g1") + "-g2"
    assert (row.stop_reason, row.stopped_at) == ("", None)
    restarting = Event.objects.get(sandbox=row, action="sandbox.restarting")
    assert restarting.detail == {"previous_state": "stopped", "generation": 2}
    assert (claimed.lease.holder, claimed.lease.epoch) == ("agent-b", 2)
    assert counts(pipeline)["reused"] == 1


def test_a_stopped_sandbox_needs_a_free_slot_to_start_again(make_pipeline, bot) -> None:
    pipeline = make_pipeline(max_live_sandboxes=1)
    first = claim_chat(pipeline, bot).sandbox
    put(first, State.STOPPED)
    claim_chat(pipeline, bot, launcher_id="other")  # takes the one slot
    with pytest.raises(QuotaExceeded, match="max_live_sandboxes=1"):
        claim_chat(pipeline, bot)
    row = Sandbox.objects.get(pk=first.pk)
    assert (row.state, row.generation) == (State.STOPPED, 1)


def test_an_errored_sandbox_needs_a_free_slot_to_start_again(make_pipeline, bot) -> None:
    pipeline = make_pipeline(max_live_sandboxes=1)
    first = claim_chat(pipeline, bot).sandbox
    put(first, State.ERROR, stop_reason="error")
    claim_chat(pipeline, bot, launcher_id="other")  # takes the one slot
    with pytest.raises(QuotaExceeded):
        claim_chat(pipeline, bot)
    assert Sandbox.objects.filter(state=State.CREATING).count() == 1


def test_a_stopped_sandbox_counts_the_quota_under_the_pipelines_lock(
    pipeline, bot, monkeypatch
) -> None:
    """Two stopped sandboxes of a pipeline starting again at once count the quota in turn
    (on PostgreSQL, without the lock both would see the last free slot), as new keys do."""
    put(claim_chat(pipeline, bot).sandbox, State.STOPPED)
    steps: list[str] = []
    real_lock, real_count = creating.lock_pipeline, Sandbox.objects.filter
    monkeypatch.setattr(
        creating, "lock_pipeline", lambda p: (steps.append(f"lock {p.slug}"), real_lock(p))[1]
    )
    monkeypatch.setattr(
        Sandbox.objects, "filter", lambda *a, **k: (steps.append("count"), real_count(*a, **k))[1]
    )
    claim_chat(pipeline, bot)
    assert steps[:2] == [f"lock {pipeline.slug}", "count"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    "sqlite" in settings.DATABASES["default"]["ENGINE"],
    reason="SQLite runs one writing transaction at a time: the race needs PostgreSQL "
    "(bin/with-postgres)",
)
def test_two_stopped_sandboxes_racing_for_the_last_slot_start_one(
    make_pipeline, bot, monkeypatch
) -> None:
    """Each claim counts the quota, then waits (up to a second) for the other to have counted
    too before it restarts its sandbox: without the pipeline's lock both count the one free
    slot and both start; with it the second counts after the first commits, and is refused."""
    pipeline = make_pipeline(max_live_sandboxes=1)
    for launcher in ("a", "b"):
        put(claim_chat(pipeline, bot, launcher_id=launcher).sandbox, State.STOPPED)
    both_counted = threading.Barrier(2, timeout=1)
    real_move = lifecycle.move

    def move_when_both_counted(sandbox: Any, transition: Any, *args: Any, **kwargs: Any) -> Any:
        if transition is lifecycle.RESTART:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_counted.wait()  # the other claim waits for this one's lock: no wait here
        return real_move(sandbox, transition, *args, **kwargs)

    monkeypatch.setattr(lifecycle, "move", move_when_both_counted)
    outcomes: dict[str, str] = {}

    def open_chat(launcher: str) -> None:
        try:
            claim_chat(pipeline, bot, launcher_id=launcher)
            outcomes[launcher] = "started"
        except QuotaExceeded:
            outcomes[launcher] = "refused"
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=open_chat, args=(launcher,)) for launcher in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes.values()) == ["refused", "started"]
    assert Sandbox.objects.filter(pipeline=pipeline, state=State.CREATING).count() == 1


def test_a_refused_lease_leaves_a_stopped_sandbox_stopped(pipeline, bot) -> None:
    """The restart and the lease are one transaction: a claim the lease refuses starts
    nothing."""
    first = claim_chat(pipeline, bot).sandbox
    put(first, State.STOPPED)
    with pytest.raises(LeaseBusy):
        claim_chat(pipeline, bot, holder="agent-b")
    row = Sandbox.objects.get(pk=first.pk)
    assert (row.state, row.generation) == (State.STOPPED, 1)
    assert not Event.objects.filter(action="sandbox.restarting").exists()
    assert counts(pipeline) == {"created": 1}


def test_a_stopping_sandbox_is_refused_for_the_moment(pipeline, bot) -> None:
    first = claim_chat(pipeline, bot).sandbox
    put(first, State.STOPPING)
    Lease.objects.filter(sandbox=first).update(holder="", expires_at=None)
    events_before = Event.objects.count()
    with pytest.raises(InvalidState, match="stopping") as refused:
        claim_chat(pipeline, bot, holder="agent-b")
    assert refused.value.extra["state"] == State.STOPPING
    assert Sandbox.objects.get(pk=first.pk).state == State.STOPPING
    assert Lease.objects.get(sandbox=first).holder == ""
    assert Event.objects.count() == events_before
    assert counts(pipeline) == {"created": 1}


# --- an empty pool --------------------------------------------------------------------------------


def test_an_empty_pool_is_a_miss_and_a_cold_row_by_default(
    make_pipeline, bot, queued, django_capture_on_commit_callbacks
) -> None:
    pipeline = make_pipeline(pool_size=1)
    with django_capture_on_commit_callbacks(execute=True):
        claimed = claim_chat(pipeline, bot)
    assert claimed.source == "cold" and not claimed.sandbox.pooled
    assert counts(pipeline) == {"created": 1, "pool_misses": 1}
    assert ("sandboxes.refill_pools", []) in queued


def test_an_empty_pool_can_refuse_at_once(
    make_pipeline, bot, queued, django_capture_on_commit_callbacks
) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.FAIL)
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(PoolExhausted, match=pipeline.slug) as refused,
    ):
        claim_chat(pipeline, bot)
    assert refused.value.retry_after == 1
    assert not Sandbox.objects.exists() and not Lease.objects.exists()
    assert counts(pipeline) == {"pool_misses": 1}


def test_a_refused_claim_still_records_the_miss_and_asks_for_a_refill(
    make_pipeline, bot, queued, django_capture_on_commit_callbacks
) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.FAIL)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(PoolExhausted):
        claim_chat(pipeline, bot)
    assert Event.objects.filter(action="pool.missed", pipeline=pipeline).count() == 1
    assert ("sandboxes.refill_pools", []) in queued


class Clock:
    """Stands in for `claiming.time`: sleeping moves the clock on at once."""

    def __init__(self, on_sleep: Any = None) -> None:
        self.now, self.slept, self.on_sleep = 1000.0, 0, on_sleep

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += 1
        if self.on_sleep is not None:
            self.on_sleep(self.slept)


def test_an_empty_pool_can_be_waited_for_counting_one_miss(make_pipeline, bot, monkeypatch) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.WAIT, pool_wait_seconds=5)
    refilled: list[Sandbox] = []
    clock = Clock(lambda slept: slept == 3 and refilled.append(pooled(pipeline)))
    monkeypatch.setattr(claiming, "time", clock)
    claimed = claim_chat(pipeline, bot)
    assert (claimed.source, claimed.sandbox.pk) == ("pool", refilled[0].pk)
    assert clock.slept == 3
    assert counts(pipeline) == {"created": 1, "pool_hits": 1, "pool_misses": 1}
    assert Event.objects.filter(action="pool.missed").count() == 1


def test_waiting_for_an_empty_pool_ends_at_its_limit(make_pipeline, bot, monkeypatch) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.WAIT, pool_wait_seconds=2)
    clock = Clock()
    monkeypatch.setattr(claiming, "time", clock)
    with pytest.raises(PoolExhausted, match="waited 2 s"):
        claim_chat(pipeline, bot)
    assert 2 <= clock.now - 1000.0 < 2 + 2 * claiming._POOL_POLL_SECONDS
    assert not Sandbox.objects.exists()
    assert counts(pipeline) == {"pool_misses": 1}


def test_a_pooled_sandbox_of_another_profile_is_not_handed_out(make_pipeline, bot) -> None:
    pipeline = make_pipeline(pool_size=1)
    stale = pooled(pipeline)
    put(stale, State.RUNNING, profile="an-older-profile")
    assert specs.profile_digest(pipeline) != "an-older-profile"
    claimed = claim_chat(pipeline, bot)
    assert claimed.source == "cold" and claimed.sandbox.pk != stale.pk
    assert Sandbox.objects.get(pk=stale.pk).pooled
