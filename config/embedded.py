"""The embedded mode's worker: Celery's worker and beat scheduler in threads of the web
process, on the in-memory broker, so that one process runs everything (`manage.py serve`)."""

import logging
import socket
import threading

from celery.beat import EmbeddedService
from celery.worker import WorkController
from django.conf import settings

from config.celery import app
from hosts.keeper import served_queues, start_keeping

log = logging.getLogger(__name__)


def start_worker_and_scheduler() -> WorkController:
    """Start the worker (a pool of threads) and the periodic scheduler; both are daemon
    threads that end with the process, as is the engine-event follower. Tasks lost with the
    process are made good by the reconciler, which the worker runs as soon as it is ready."""
    hostname = f"embedded@{socket.gethostname()}"
    worker = WorkController(
        app=app,
        hostname=hostname,
        # Every Docker host's queue besides the default one (with host queues: a Redis broker).
        queues=[settings.CELERY_TASK_DEFAULT_QUEUE, *served_queues()],
        pool_cls="threads",
        concurrency=settings.BOXYARD_WORKER_THREADS,
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel=settings.LOGGING["root"]["level"],
    )
    threading.Thread(target=worker.start, name="celery-worker", daemon=True).start()
    scheduler = EmbeddedService(
        app, thread=True, schedule_filename=settings.CELERY_BEAT_SCHEDULE_FILENAME
    )
    assert isinstance(scheduler, threading.Thread)  # as thread=True asks
    scheduler.daemon = True
    scheduler.start()
    # The Docker hosts' health, and containers that die outside Boxyard marked lost as it
    # happens; both stop with the process.
    start_keeping(worker=hostname if settings.BOXYARD_HOST_QUEUES else None)
    log.info("embedded worker (%d threads) and scheduler started", settings.BOXYARD_WORKER_THREADS)
    return worker
