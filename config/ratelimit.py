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


@cache
def _limiter(spec: str, redis_url: str) -> tuple[strategies.RateLimiter, RateLimitItem] | None:
    if spec.strip().lower() in _OFF:
        return None
    item = parse(spec)
    store = storage.storage_from_string(redis_url) if redis_url else storage.MemoryStorage()
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
    strategy, item = limiter
    key = str(pipeline)
    if strategy.hit(item, "pipeline", key):
        return None
    reset = strategy.get_window_stats(item, "pipeline", key).reset_time
    return max(1, math.ceil(reset - time.time()))
