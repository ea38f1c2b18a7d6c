"""The operator's rate limit per pipeline (BOXYARD_RATE_LIMIT, such as `600/minute`; `off`: none).

Counted with the `limits` library's sliding window: in this process's memory in the embedded
mode, in Redis when the distributed mode has it (REDIS_URL), so that every web process counts
the same requests.
"""

import math
import time
from functools import cache

from django.conf import settings
from limits import RateLimitItem, parse, storage, strategies

_OFF = {"", "off", "none", "0"}
# Pipelines refused until a moment (monotonic): a caller that goes on past its limit is
# refused again without asking the counter, the cheapest answer the server has.
_blocked: dict[int, float] = {}


class _CountsReadLazily(storage.MemoryStorage):
    """The library's in-memory counts, without the timer thread it starts again on every count
    once the last has ended: started from the event loop, a thread stalls it for as long as
    the new thread waits to run (under load, milliseconds a request, for every caller). Counts
    past their window are dropped as they are read instead; what stays is two counts per
    pipeline."""

    def _MemoryStorage__schedule_expiry(self) -> None:  # the library's private hook
        pass


@cache
def _limiter(spec: str, redis_url: str) -> tuple[strategies.RateLimiter, RateLimitItem] | None:
    if spec.strip().lower() in _OFF:
        return None
    item = parse(spec)
    store = storage.storage_from_string(redis_url) if redis_url else _CountsReadLazily()
    return strategies.SlidingWindowCounterRateLimiter(store), item


def check(spec: str) -> None:
    """Raise ValueError naming what is wrong with a BOXYARD_RATE_LIMIT value."""
    if spec.strip().lower() not in _OFF:
        parse(spec)


def refusal(pipeline: int) -> int | None:
    """None when the pipeline may make one more request now (counted); otherwise the seconds
    to wait before it may."""
    limiter = _limiter(settings.BOXYARD_RATE_LIMIT, settings.REDIS_URL)
    if limiter is None:
        return None
    now = time.monotonic()
    until = _blocked.get(pipeline)
    if until is not None:
        if now < until:
            return max(1, math.ceil(until - now))
        del _blocked[pipeline]
    strategy, item = limiter
    # Named by the deployment too: installs that share a Redis count apart.
    keys = (settings.BOXYARD_DEPLOYMENT, "pipeline", str(pipeline))
    if strategy.hit(item, *keys):
        return None
    reset = strategy.get_window_stats(item, *keys).reset_time
    wait = max(1, math.ceil(reset - time.time()))
    # Until the counter may let one more through (its window slides: asked again then).
    _blocked[pipeline] = now + min(wait, 1)
    return wait
