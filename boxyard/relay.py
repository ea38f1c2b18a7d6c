"""Items handed from a thread to a coroutine, held up to a size.

A sandbox's agent pushes an exec's output from its channel's reader thread as fast as the
command prints; the coroutine that passes it on to an HTTP client goes at the client's pace.
Queued without a bound, a slow client would make the server hold everything the command
printed. A relay holds at most `limit` (in the units `size` measures); past it, it drops what
is pushed from then on and says it `overflowed`, so the consumer, once it has taken what was
held, can fetch the rest from where it is kept (the agent keeps an exec's output) at its own
pace.
"""

import asyncio
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedRelay(Generic[T]):
    def __init__(
        self, loop: asyncio.AbstractEventLoop | None, limit: int, size: Callable[[T], int]
    ) -> None:
        # None: the loop of the first `get` (a thread may push before any coroutine reads:
        # what it pushes waits here until then).
        self._loop = loop
        self._early: list[tuple[T | None, int]] = []
        self._limit = limit
        self._size = size
        self._queue: asyncio.Queue[tuple[T | None, int]] = asyncio.Queue()
        self._lock = threading.Lock()
        self._held = 0
        self.overflowed = False

    @property
    def held(self) -> int:
        """What is held now, in the units of `size`."""
        with self._lock:
            return self._held

    def push(self, item: T) -> bool:
        """Hand an item over (from any thread); False if it was dropped."""
        size = max(1, self._size(item))
        with self._lock:
            accepted = not self.overflowed and self._held + size <= self._limit
            wake = not accepted and not self.overflowed
            if accepted:
                self._held += size
            else:
                self.overflowed = True
        if accepted:
            self._deliver(item, size)
        elif wake:  # a consumer waiting on an empty queue must hear of the overflow
            self._deliver(None, 0)
        return accepted

    def _deliver(self, item: T | None, size: int) -> None:
        with self._lock:
            if self._loop is None:
                self._early.append((item, size))
                return
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (item, size))
        except RuntimeError:
            pass  # the loop is closed: nobody is listening any more

    async def get(self, timeout: float) -> T | None:
        """The next item; None when the relay has overflowed and everything held before has
        been taken. Raises TimeoutError after `timeout` seconds without an item."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
                for early in self._early:
                    self._queue.put_nowait(early)
                self._early = []
        while True:
            with self._lock:
                if self.overflowed and self._held == 0:
                    return None
            item, size = await asyncio.wait_for(self._queue.get(), timeout)
            if item is None:
                continue  # the overflow's wake-up
            with self._lock:
                self._held -= size
            return item
