"""What one caller may hold at once of what all callers share.

Every request is made by a caller: a pipeline (by its token), an admin (by their session), or
an address without either. `Slots` counts what callers hold of one thing (long calls, bytes
of request bodies) and refuses a caller past its share with `Throttled` (429 and
`Retry-After`); `Turns` shares the request pool's threads: a caller past its share waits its
turn on the event loop, holding no thread, and past a queue of its own is refused too.
"""

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from contextvars import ContextVar

from boxyard.errors import N_, Throttled

# The caller of the request this code runs for (set by the gate, config.gate); "" outside a
# request (a task, a command), which no share limits.
CALLER: ContextVar[str] = ContextVar("boxyard_caller", default="")


class Held:
    """One holding of `Slots`: given back by `release()` (once, however often it is called)."""

    def __init__(self, slots: "Slots", key: str, weight: int) -> None:
        self._slots = slots
        self._key = key
        self._weight = weight
        self._released = False

    def release(self) -> None:
        with self._slots.lock:
            if self._released:
                return
            self._released = True
        self._slots.give_back(self._key, self._weight)

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


class Slots:
    """Up to `limit()` units of something per key (thread-safe); `what` names it in refusals."""

    def __init__(self, what: str, limit: Callable[[], int], retry_after: int = 1) -> None:
        self.what = what
        self.limit = limit
        self.retry_after = retry_after
        self.lock = threading.Lock()
        self._held: dict[str, int] = {}

    def take(self, key: str, weight: int = 1) -> Held:
        """Hold `weight` units for `key`, or raise Throttled if that would pass its share."""
        limit = self.limit()
        with self.lock:
            held = self._held.get(key, 0)
            if held + weight > limit and (held or weight <= limit):
                raise Throttled(
                    N_(
                        "too many %(what)s at once for this caller (the limit is %(limit)d); "
                        "try again when one has ended",
                        what=self.what,
                        limit=limit,
                    ),
                    retry_after=self.retry_after,
                    limit=limit,
                )
            self._held[key] = held + weight
        return Held(self, key, weight)

    def give_back(self, key: str, weight: int) -> None:
        with self.lock:
            left = self._held.get(key, 0) - weight
            if left > 0:
                self._held[key] = left
            else:
                self._held.pop(key, None)

    def held(self, key: str) -> int:
        with self.lock:
            return self._held.get(key, 0)


def _nothing() -> None:
    pass


class _Queue:
    __slots__ = ("running", "waiting")

    def __init__(self) -> None:
        self.running = 0
        self.waiting: deque[asyncio.Future[None]] = deque()


class Turns:
    """At most `running()` calls at once per caller; the caller's next ones wait in order on
    the event loop (no thread held), at most `queued()` of them; one more is refused."""

    def __init__(self, running: Callable[[], int], queued: Callable[[], int]) -> None:
        self.running = running
        self.queued = queued
        self._callers: dict[str, _Queue] = {}

    async def enter(self, caller: str) -> Callable[[], None]:
        """Wait for the caller's turn (or raise Throttled); returns what gives it back, to be
        called once the call has really ended (a thread goes on after its client has gone)."""
        if not caller:  # not a request: nothing to share out
            return _nothing
        line = self._callers.setdefault(caller, _Queue())
        if line.running >= self.running():
            if len(line.waiting) >= self.queued():
                self._tidy(caller, line)
                raise Throttled(
                    N_(
                        "too many requests at once from this caller (%(running)d running, "
                        "%(queued)d waiting); try again when some have been answered",
                        running=line.running,
                        queued=len(line.waiting),
                    ),
                    retry_after=1,
                )
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            line.waiting.append(ready)
            try:
                await ready  # the turn of a call that ended, handed on (running unchanged)
            except BaseException:
                if ready.done() and not ready.cancelled():
                    self._hand_on(caller, line)  # handed a turn just as it was cancelled
                else:
                    line.waiting.remove(ready)
                    self._tidy(caller, line)
                raise
        else:
            line.running += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._hand_on(caller, line)

        return give_back

    def _hand_on(self, caller: str, line: _Queue) -> None:
        while line.waiting:
            waiter = line.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        line.running -= 1
        self._tidy(caller, line)

    def _tidy(self, caller: str, line: _Queue) -> None:
        if not line.running and not line.waiting and self._callers.get(caller) is line:
            del self._callers[caller]

    def busy(self, caller: str) -> tuple[int, int]:
        """(running, waiting) of a caller, for tests and the dashboard."""
        line = self._callers.get(caller)
        return (line.running, len(line.waiting)) if line else (0, 0)


class _Line:
    __slots__ = ("running", "waiting")

    def __init__(self) -> None:
        self.running = 0
        self.waiting: deque[threading.Lock] = deque()


class Runs:
    """At most `running()` threads per caller run at once, in the order they asked (the
    thread-side twin of `Turns`). Python runs one thread at a time: a caller with many
    threads ready to run would get as many shares of the interpreter as it has threads, and
    another caller's one thread would wait behind all of them at every step."""

    def __init__(self, running: Callable[[], int]) -> None:
        self.running = running
        self._lock = threading.Lock()
        self._callers: dict[str, _Line] = {}

    def take(self, caller: str) -> None:
        """Block until the caller may run (no-op outside a request: "" is nobody's)."""
        if not caller:
            return
        with self._lock:
            line = self._callers.setdefault(caller, _Line())
            if line.running < self.running():
                line.running += 1
                return
            handed = threading.Lock()
            handed.acquire()
            line.waiting.append(handed)
        handed.acquire()  # released by give_back: the turn handed on (running unchanged)

    def give_back(self, caller: str) -> None:
        if not caller:
            return
        with self._lock:
            line = self._callers[caller]
            if line.waiting:
                line.waiting.popleft().release()
                return
            line.running -= 1
            if not line.running:
                del self._callers[caller]

    def busy(self, caller: str) -> tuple[int, int]:
        """(running, waiting) threads of a caller, for tests."""
        with self._lock:
            line = self._callers.get(caller)
            return (line.running, len(line.waiting)) if line else (0, 0)
