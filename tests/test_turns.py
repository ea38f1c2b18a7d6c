"""The request pool shared out per caller (boxyard.slots.Turns, as boxyard.threads.in_pool
uses it): a caller runs at most its share at once, its further calls wait in order without a
thread, past its queue it is refused; other callers are not held up; a call whose client went
away keeps its turn until its thread is free. In the thread, a caller's calls run one at a time
(boxyard.slots.Runs), each letting its turn go while it waits on something outside."""

import asyncio
import contextlib
import threading
import time
from functools import partial
from typing import Any

import pytest
from django.db import transaction

from boxyard.errors import Throttled
from boxyard.slots import CALLER, Runs, Slots, Turns
from boxyard.threads import RUNS, TURNS, in_pool, locked, waiting
from sandboxes.runtime.docker.common import translate
from tests.conftest import until, wait_for


def test_a_caller_runs_its_share_waits_in_order_and_is_refused_past_its_queue() -> None:
    turns = Turns(lambda: 2, lambda: 2)

    async def scenario() -> tuple[list[str], list[str]]:
        order: list[str] = []
        release = asyncio.Event()

        async def call(caller: str, name: str) -> str:
            give_back = await turns.enter(caller)
            order.append(name)
            try:
                if caller == "hog":
                    await release.wait()
                return name
            finally:
                give_back()

        hogs = [asyncio.ensure_future(call("hog", f"h{i}")) for i in range(6)]
        await until(lambda: turns.busy("hog") == (2, 2))  # two run, two wait, two refused
        # Another caller is not held up by the hog's queue.
        assert await asyncio.wait_for(call("other", "o"), 1) == "o"
        release.set()
        results = await asyncio.gather(*hogs, return_exceptions=True)
        refused = [r for r in results if isinstance(r, Throttled)]
        assert len(refused) == 2
        assert turns.busy("hog") == (0, 0)
        return order, [r for r in results if isinstance(r, str)]

    order, served = asyncio.run(scenario())
    assert order == ["h0", "h1", "o", "h2", "h3"]
    assert served == ["h0", "h1", "h2", "h3"]


def test_a_cancelled_waiter_leaves_the_queue_and_a_running_call_keeps_its_turn(
    settings: Any,
) -> None:
    settings.BOXYARD_THREADS_PER_CALLER = 1
    settings.BOXYARD_QUEUED_PER_CALLER = 5
    gate = threading.Event()

    def blocking() -> str:
        gate.wait(5)
        return "done"

    async def scenario() -> None:
        CALLER.set("pipeline:1")
        first = asyncio.ensure_future(in_pool(blocking))
        await until(lambda: TURNS.busy("pipeline:1") == (1, 0))
        second = asyncio.ensure_future(in_pool(lambda: "second"))
        await until(lambda: TURNS.busy("pipeline:1") == (1, 1))
        # Both clients go away: the waiter leaves the queue, but the thread still runs,
        # and its turn is held until it is free.
        first.cancel()
        second.cancel()
        await until(lambda: TURNS.busy("pipeline:1") == (1, 0))
        gate.set()
        await until(lambda: TURNS.busy("pipeline:1") == (0, 0))

    asyncio.run(scenario())


def test_slots_refuse_past_the_share_and_give_back_once() -> None:
    slots = Slots("long calls", lambda: 2, retry_after=3)
    first, second = slots.take("a"), slots.take("a")
    with pytest.raises(Throttled) as refused:
        slots.take("a")
    assert refused.value.extra["retry_after"] == 3
    slots.take("b").release()  # another key has its own share
    first.release()
    first.release()  # given back once, however often
    assert slots.held("a") == 1
    slots.take("a")
    second.release()


def _queued_is(runs: Runs, caller: str, count: int) -> bool:
    return runs.busy(caller)[1] == count


def test_runs_let_a_caller_run_its_share_in_order_and_others_alongside() -> None:
    runs = Runs(lambda: 1)
    order: list[str] = []
    runs.take("hog")

    def later(caller: str, name: str) -> None:
        runs.take(caller)
        order.append(name)
        runs.give_back(caller)

    hogs = [threading.Thread(target=later, args=("hog", f"h{i}")) for i in range(3)]
    for queued, thread in enumerate(hogs, start=1):
        thread.start()
        wait_for(partial(_queued_is, runs, "hog", queued), 5)
    # Another caller runs at once, past the hog's queue.
    later("other", "o")
    assert runs.busy("hog") == (1, 3)
    runs.give_back("hog")
    for thread in hogs:
        thread.join(5)
    assert order == ["o", "h0", "h1", "h2"]
    assert runs.busy("hog") == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_a_caller_runs_one_call_at_a_time_but_lets_its_turn_go_while_it_waits(
    settings: Any,
) -> None:
    """In the request pool, a caller's calls take turns to run (BOXYARD_RUNNING_PER_CALLER);
    one that waits on something outside (`waiting`) lets the next run meanwhile, except in a
    transaction; another caller is never held up by them."""
    settings.BOXYARD_RUNNING_PER_CALLER = 1
    outside = threading.Event()
    running: list[str] = []
    most = [0]

    def call(name: str, wait: bool = False, atomic: bool = False) -> str:
        running.append(name)
        most[0] = max(most[0], len([n for n in running if n.startswith("c")]))
        try:
            if wait:
                with transaction.atomic() if atomic else contextlib.nullcontext(), waiting():
                    outside.wait(5)
            else:
                time.sleep(0.05)
            return name
        finally:
            running.remove(name)

    async def scenario(atomic: bool) -> list[str]:
        CALLER.set("pipeline:1")
        ended: list[str] = []

        async def done(name: str, *args: Any) -> None:
            ended.append(await in_pool(call, name, *args))

        waiter = asyncio.ensure_future(done("waiter", True, atomic))
        await until(lambda: "waiter" in running)
        others = [asyncio.ensure_future(done(f"c{i}")) for i in range(3)]
        CALLER.set("pipeline:2")
        stranger = asyncio.ensure_future(done("stranger"))
        await asyncio.wait_for(stranger, 2)
        if atomic:  # the others wait for the waiter's turn, each in its thread
            await until(lambda: RUNS.busy("pipeline:1") == (1, 3))
        else:  # the others ran while the waiter waited
            await until(lambda: len(ended) == 4)
        outside.set()
        await asyncio.wait_for(asyncio.gather(waiter, *others), 5)
        return ended

    ended = asyncio.run(scenario(atomic=False))
    # The waiter let its turn go: the caller's other calls ran, one at a time and in order,
    # before it ended.
    assert ended[-1] == "waiter"
    assert [name for name in ended if name != "stranger"] == ["c0", "c1", "c2", "waiter"]
    assert most[0] == 1
    assert RUNS.busy("pipeline:1") == (0, 0)
    outside.clear()
    ended = asyncio.run(scenario(atomic=True))
    # In a transaction it keeps its turn: the caller's others wait for it; the stranger not.
    assert ended == ["stranger", "waiter", "c0", "c1", "c2"]


@pytest.mark.django_db(transaction=True)  # the pool's threads check their connections
def test_a_call_waiting_on_the_engine_lets_its_turn_go(settings: Any) -> None:
    """Every call to the engine's API (through `translate`) lets the caller's turn go while
    the engine answers."""
    settings.BOXYARD_RUNNING_PER_CALLER = 1
    engine_answers = threading.Event()
    asked = threading.Event()

    class Engine:
        @translate
        def slow(self) -> str:
            asked.set()
            engine_answers.wait(5)
            return "engine"

    async def scenario() -> list[str]:
        CALLER.set("pipeline:1")
        slow = asyncio.ensure_future(in_pool(Engine().slow))
        await until(asked.is_set)  # the engine is asked: the call waits for its answer
        quick = await asyncio.wait_for(in_pool(lambda: "quick"), 2)
        engine_answers.set()
        return [quick, await slow]

    assert asyncio.run(scenario()) == ["quick", "engine"]


@pytest.mark.django_db(transaction=True)  # the pool's threads check their connections
def test_a_lock_held_across_a_wait_is_waited_for_without_the_turn(settings: Any) -> None:
    """One call holds a lock through a wait (an agent's channel opening, through the
    engine's answers); another call of the same caller, holding the turn, asks for the lock.
    `locked` lets the turn go while it waits for the lock: both end (with a bare `with lock`
    each would wait for the other for ever)."""
    settings.BOXYARD_RUNNING_PER_CALLER = 1
    lock = threading.Lock()
    engine_answers = threading.Event()

    def opening() -> str:
        with locked(lock), waiting():
            engine_answers.wait(5)
        return "opened"

    asking = threading.Event()

    def also_opening() -> str:
        asking.set()  # in the caller's turn, which it holds until it waits for the lock
        with locked(lock):
            return "reused"

    async def scenario() -> list[str]:
        CALLER.set("pipeline:1")
        first = asyncio.ensure_future(in_pool(opening))
        await until(lock.locked)  # the first holds the lock through its wait
        second = asyncio.ensure_future(in_pool(also_opening))
        await until(asking.is_set)
        engine_answers.set()
        return list(await asyncio.wait_for(asyncio.gather(first, second), 3))

    assert asyncio.run(scenario()) == ["opened", "reused"]


def test_the_server_hands_the_interpreter_on_every_millisecond(monkeypatch: Any) -> None:
    """A thread back from I/O waits at most 1 ms, not Python's 5 ms, for the next step of its
    request (`manage.py serve` and `python -m config.serving` both serve through this)."""
    import sys

    import uvicorn

    from config import serving

    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        serving.serve("127.0.0.1", 0)
        assert sys.getswitchinterval() == pytest.approx(0.001)
    finally:
        sys.setswitchinterval(before)
