"""The threads that serve HTTP requests, shared by the ASGI handler and async views, and
what a thread that waits long lets go of meanwhile."""

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django import db
from django.conf import settings
from django.db import close_old_connections

from boxyard.slots import CALLER, Runs, Turns

T = TypeVar("T")

# The request pool shared out among callers: BOXYARD_THREADS_PER_CALLER threads each at most.
TURNS = Turns(
    lambda: settings.BOXYARD_THREADS_PER_CALLER, lambda: settings.BOXYARD_QUEUED_PER_CALLER
)

# Of a caller's threads, BOXYARD_RUNNING_PER_CALLER run at once; one that waits on something
# outside lets its turn go meanwhile (`waiting`).
RUNS = Runs(lambda: settings.BOXYARD_RUNNING_PER_CALLER)
_running = threading.local()  # .caller: whose turn this thread holds now ("" or unset: none)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def request_pool() -> ThreadPoolExecutor:
    """The threads that serve requests (`BOXYARD_API_THREADS` of them), made on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.BOXYARD_API_THREADS, thread_name_prefix="http"
            )
        return _pool


def start_request_threads() -> None:
    """Start every thread of the request pool now, not one per request of the first burst:
    a pool starts a thread from the thread that submits work (the server's event loop), which
    then waits for the new thread to run, behind every busy thread of the burst."""
    pool = request_pool()
    count = settings.BOXYARD_API_THREADS
    # Each task holds its thread until all have one, so the pool must start `count` of them.
    everyone_started = threading.Barrier(count, timeout=10)

    def hold() -> None:
        try:
            everyone_started.wait()
        except threading.BrokenBarrierError:
            pass  # some threads were busy already: the pool starts the rest when needed

    futures = [pool.submit(hold) for _ in range(count)]
    for future in futures:
        future.result()


def with_fresh_connection(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `function` with this thread's database connection checked before and after:
    broken ones and those past `CONN_MAX_AGE` are closed, as Django does around a request."""
    close_old_connections()
    try:
        return function(*args, **kwargs)
    finally:
        close_old_connections()


def _in_turn(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    caller = CALLER.get()
    RUNS.take(caller)
    _running.caller = caller
    try:
        return with_fresh_connection(function, *args, **kwargs)
    finally:
        RUNS.give_back(_running.caller)
        _running.caller = ""


@contextmanager
def waiting() -> Iterator[None]:
    """Around a wait on something outside this process (the engine, a sandbox's agent, a
    client's body, another thread): this thread's caller lets its turn to run go meanwhile
    (`RUNS`) and takes it again after, in order. Not inside a transaction: a thread that
    waited for its turn with the database's lock held could keep another of its caller's
    threads, which holds the turn, waiting on that lock."""
    caller = getattr(_running, "caller", "")
    if not caller or db.connection.in_atomic_block:
        yield
        return
    _running.caller = ""
    RUNS.give_back(caller)
    try:
        yield
    finally:
        RUNS.take(caller)
        _running.caller = caller


@contextmanager
def locked(lock: threading.Lock) -> Iterator[None]:
    """`with lock:` for a lock held across a wait (`waiting`), its own wait for the lock a
    wait too: otherwise a thread that holds the lock and waits for its turn back, and another
    of its caller's that holds the turn and waits for the lock, would wait for each other."""
    with waiting():
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def release_connection() -> None:
    """Give this thread's database connection back while it waits on a sandbox (the next
    query opens one again); not inside a transaction, which must keep its connection.

    Only a database server counts its connections: an SQLite connection is a file handle,
    cheaper to keep than to open again."""
    if db.connection.vendor != "sqlite" and not db.connection.in_atomic_block:
        db.connection.close()


async def in_pool(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a blocking function from async code in a thread of the request pool, in the
    caller's turn (`TURNS`): a caller that holds its share of the pool waits, without a
    thread, or is refused (`Throttled`) when too many of its calls wait already. In the
    thread, it runs in the caller's turn to run (`RUNS`)."""
    call = sync_to_async(_in_turn, thread_sensitive=False, executor=request_pool())
    give_back = await TURNS.enter(CALLER.get())
    running = asyncio.ensure_future(call(function, *args, **kwargs))
    # A thread cannot be stopped: a call whose client went away keeps its turn until its
    # thread is free again, so going away never lets a caller past its share.
    running.add_done_callback(lambda ended: _ended(ended, give_back))
    return await asyncio.shield(running)


def _ended(call: "asyncio.Future[Any]", give_back: Callable[[], None]) -> None:
    give_back()
    if not call.cancelled():
        call.exception()  # retrieved: a call nobody waits for any more fails quietly


async def pulled(
    items: Iterable[T], close: Callable[[], None] | None = None, *, batch: int = 1
) -> AsyncIterator[T]:
    """A blocking iterator (a file read from a sandbox) consumed from async code, up to `batch`
    items at a time in the request pool: neither side holds more than the batch in hand.
    `close` is called at the end, however it ends (a client that went away ends it early)."""
    iterator = iter(items)
    try:
        while taken := await in_pool(_take, iterator, batch):
            for item in taken:
                yield item
    finally:
        if close is not None:
            await in_pool(close)


def _take(iterator: Iterator[T], count: int) -> list[T]:
    return list(itertools.islice(iterator, count))
