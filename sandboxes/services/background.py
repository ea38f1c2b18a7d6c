"""Work handed to the Celery workers.

Services name tasks rather than import them (the tasks module is an entry point and sits
above the services), and hand them over only once the transaction that made them necessary
has committed: a worker must find the row it is given.
"""

from typing import Any

from celery import current_app
from django.db import transaction

BOOT = "sandboxes.boot"
DESTROY = "sandboxes.destroy"
REFILL_POOLS = "sandboxes.refill_pools"


def later(task: str, *args: Any) -> None:
    """Queue `task(*args)` when the current transaction commits (at once outside one). A
    broker that cannot take it is logged, not raised: what was committed stands, and the
    periodic jobs (the reconciler, the pool refill) do what the task would have done."""
    transaction.on_commit(lambda: current_app.send_task(task, args=list(args)), robust=True)
