"""The server's heap after start-up: settled, so the garbage collector leaves it alone.

What start-up makes (Django, the apps, the URL conf, Celery, daphne, docker-py: some 150,000
objects) lives as long as the process, yet CPython's oldest generation walks all of it at
each full collection: 100 to 300 ms on a 2-core machine, during which no request is answered
and no dashboard hears of a change. Frozen, those objects are left out of every collection
(`gc.freeze`), and full collections only walk what was made since.
"""

import gc


def settle() -> None:
    """Free start-up's garbage, then freeze what is left. Call it once the process has loaded
    what it serves with; calling it again later freezes what was made meanwhile."""
    gc.collect()
    gc.freeze()
