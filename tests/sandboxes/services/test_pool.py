"""The warm pool and the health check before reuse, against the real engine."""

import threading
import time
from typing import Any

import pytest
from django.db import connection

from boxyard.errors import PoolExhausted, QuotaExceeded
from pipelines.models import PoolPolicy
from sandboxes import services
from sandboxes.models import Event, Sandbox, State
from sandboxes.services import pool
from tests.conftest import CHAT, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

OTHER = {"launcher_type": "group", "launcher_id": "other"}


def run(sandbox: Sandbox, bot: Any, cmd: str) -> Any:
    sandbox = Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk)
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), bot)


def test_a_new_scope_key_claims_a_ready_sandbox_and_the_pool_refills(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(pool_size=2)
    assert pool.refill(pipeline) == 2
    assert pool.pooled_for(pipeline) == 2
    opened = services.open_sandbox(pipeline, CHAT, bot)
    assert (opened.source, opened.created) == ("pool", True)
    sandbox = opened.sandbox
    assert (sandbox.scope_key, sandbox.variables["launcher_id"]) == ("group_123456", "123456")
    assert not sandbox.pooled and opened.lease.holder == "group_123456"
    assert run(sandbox, bot, "pwd").stdout == "/workspace\n"
    assert pool.pooled_for(pipeline) == 1
    assert pool.refill(pipeline) == 1 and pool.pooled_for(pipeline) == 2
    # The same key again is its own sandbox, not another claim.
    assert services.open_sandbox(pipeline, CHAT, bot).source == "existing"
    assert Event.objects.filter(action="sandbox.claimed", sandbox=sandbox).exists()


def test_pooled_sandboxes_of_an_old_profile_are_retired_not_handed_out(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(pool_size=1)
    pool.refill(pipeline)
    old = Sandbox.objects.get(pipeline=pipeline, pooled=True)
    pipeline.env = {"NEW": "1"}
    pipeline.save()
    opened = services.open_sandbox(pipeline, CHAT, bot)
    assert opened.source == "cold"
    assert run(opened.sandbox, bot, 'echo "$NEW"').stdout == "1\n"
    pool.refill(pipeline)
    old.refresh_from_db()
    assert old.state == State.DESTROYED
    fresh = Sandbox.objects.get(pipeline=pipeline, pooled=True, state=State.RUNNING)
    assert fresh.pk != old.pk


def test_a_smaller_pool_retires_its_surplus(make_pipeline, docker_engine) -> None:
    pipeline = make_pipeline(pool_size=3)
    pool.refill(pipeline)
    pipeline.pool_size = 1
    pipeline.save()
    pool.refill(pipeline)
    assert pool.pooled_for(pipeline) == 1
    assert Sandbox.objects.filter(pipeline=pipeline, state=State.DESTROYED).count() == 2


def test_an_empty_pool_creates_cold_by_default_and_says_so(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(pool_size=1)
    opened = services.open_sandbox(pipeline, CHAT, bot)
    assert opened.source == "cold" and opened.sandbox.state == State.RUNNING
    assert Event.objects.filter(action="pool.missed", pipeline=pipeline).count() == 1


def test_an_empty_pool_can_fail_fast(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.FAIL)
    with pytest.raises(PoolExhausted) as refused:
        services.open_sandbox(pipeline, CHAT, bot)
    assert refused.value.status == 503 and refused.value.retry_after >= 1
    assert not Sandbox.objects.filter(pipeline=pipeline, pooled=False).exists()


def test_an_empty_pool_can_be_waited_for(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.WAIT, pool_wait_seconds=20)

    def refill_once_the_open_waits() -> None:
        # The miss is committed before the open's first wait: the open is waiting by then.
        try:
            wait_for(
                Event.objects.filter(action="pool.missed", pipeline=pipeline).exists,
                10,
                lambda: "the open recorded no miss",
            )
            pool.refill(pipeline)
        finally:
            connection.close()

    filler = threading.Thread(target=refill_once_the_open_waits)
    filler.start()
    opened = services.open_sandbox(pipeline, CHAT, bot)
    filler.join()
    assert opened.source == "pool"


def test_waiting_for_an_empty_pool_gives_up(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(pool_size=1, pool_exhausted=PoolPolicy.WAIT, pool_wait_seconds=1)
    started = time.monotonic()
    with pytest.raises(PoolExhausted, match="waited 1 s"):
        services.open_sandbox(pipeline, CHAT, bot)
    assert time.monotonic() - started >= 1


def test_the_pool_counts_against_the_quota(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(pool_size=2, max_live_sandboxes=3)
    pool.refill(pipeline)
    services.open_sandbox(pipeline, CHAT, bot)
    assert pool.refill(pipeline) == 1  # 1 claimed + 2 pooled: the quota
    services.open_sandbox(pipeline, OTHER, bot)
    assert pool.refill(pipeline) == 0  # 2 claimed + 1 pooled
    third = services.open_sandbox(pipeline, {"launcher_type": "group", "launcher_id": "3"}, bot)
    assert third.source == "pool"
    with pytest.raises(QuotaExceeded, match="max_live_sandboxes=3"):
        services.open_sandbox(pipeline, {"launcher_type": "group", "launcher_id": "4"}, bot)


def test_a_pooled_sandbox_that_died_is_replaced_at_its_claim(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(pool_size=1)
    pool.refill(pipeline)
    dead = Sandbox.objects.get(pipeline=pipeline, pooled=True)
    docker_engine.stop_container(dead.container_id, timeout=0)
    opened = services.open_sandbox(pipeline, CHAT, bot)
    assert opened.sandbox.pk == dead.pk and opened.sandbox.generation == 2
    assert run(opened.sandbox, bot, "echo fine").stdout == "fine\n"


def test_reuse_checks_health_and_replaces_a_dead_container_keeping_the_workspace(
    pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo precious > data.txt")
    docker_engine.stop_container(sandbox.container_id, timeout=0)
    reopened = services.open_sandbox(pipeline, CHAT, bot)
    assert reopened.source == "existing" and reopened.sandbox.pk == sandbox.pk
    assert reopened.sandbox.state == State.RUNNING and reopened.sandbox.generation == 2
    assert reopened.sandbox.health_failures == 1
    assert run(reopened.sandbox, bot, "cat data.txt").stdout == "precious\n"
    assert Event.objects.filter(action="sandbox.health_failed", sandbox=sandbox).count() == 1
    assert len(docker_engine.list_containers({"io.boxyard.sandbox": str(sandbox.pk)})) == 1


def test_the_sandboxs_own_code_cannot_kill_its_agent(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    run(sandbox, bot, "echo kept > data.txt")
    killer = run(sandbox, bot, "pkill -9 -f 'boxyard-agent'; kill -9 1; echo tried")
    assert killer.stdout == "tried\n"
    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert reopened.generation == 1 and reopened.health_failures == 0
    assert run(reopened, bot, "cat data.txt").stdout == "kept\n"
