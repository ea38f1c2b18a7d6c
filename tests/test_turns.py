"""The request pool shared out per caller (boxyard.slots.Turns, as boxyard.threads.in_pool
uses it): a caller runs at most its share at once, its further calls wait in order without a
thread, past its queue it is refused; other callers are not held up; a call whose client went
away keeps its turn until its thread is free."""

import asyncio
import threading
from typing import Any

import pytest

from boxyard.errors import Throttled
from boxyard.slots import CALLER, Slots, Turns
from boxyard.threads import TURNS, in_pool


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
        await asyncio.sleep(0.05)
        assert turns.busy("hog") == (2, 2)
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
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(in_pool(lambda: "second"))
        await asyncio.sleep(0.05)
        assert TURNS.busy("pipeline:1") == (1, 1)
        # Both clients go away: the waiter leaves the queue, but the thread still runs,
        # and its turn is held until it is free.
        first.cancel()
        second.cancel()
        await asyncio.sleep(0.05)
        assert TURNS.busy("pipeline:1") == (1, 0)
        gate.set()
        for _ in range(100):
            if TURNS.busy("pipeline:1") == (0, 0):
                break
            await asyncio.sleep(0.02)
        assert TURNS.busy("pipeline:1") == (0, 0)

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
