"""Work handed to the Celery workers.

Services name tasks rather than import them (the tasks module is an entry point and sits
above the services), and hand them over only once the transaction that made them necessary
has committed: a worker must find the row it is given.
"""

from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction

from hosts.models import queue_of

BOOT = "sandboxes.boot"
DESTROY = "sandboxes.destroy"
REFILL_POOLS = "sandboxes.refill_pools"
RECONCILE = "sandboxes.reconcile"
MOVE = "sandboxes.move"
MOVE_ALL = "sandboxes.move_all"


def later(task: str, *args: Any, host: int | None = None) -> None:
    """Queue `task(*args)` when the current transaction commits (at once outside one); engine
    work for a Docker host (`host`, its id) goes to that host's queue (BOXYARD_HOST_QUEUES).
    A broker that cannot take it is logged, not raised: what was committed stands, and the
    periodic jobs (the reconciler, the pool refill) do what the task would have done."""

    def send() -> None:
        if host is not None and settings.BOXYARD_HOST_QUEUES:
            current_app.send_task(task, args=list(args), queue=queue_of(host))
        else:
            current_app.send_task(task, args=list(args))

    transaction.on_commit(send, robust=True)
