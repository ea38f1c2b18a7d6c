"""What joins the apps to a Celery worker, connected for every process that loads the Celery
app (`config.celery`): a worker consumes the queues of the Docker hosts it serves, keeps those
hosts (their health, their containers' events) while it runs, and reconciles rows and
containers once it is ready. The embedded worker (`config.embedded`) does the same itself.

The handlers import the apps when they run: this module is loaded with the settings, before
Django's apps are."""

from typing import Any

from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown
from django.conf import settings


@celeryd_after_setup.connect
def _consume_the_hosts_queues(sender: str, instance: Any, **_: Any) -> None:
    """A worker consumes the queues of the Docker hosts it serves (BOXYARD_WORKER_HOSTS)
    besides the default one; hosts added later are added by its keeper. This machine's engine
    is a host first, whatever happened to its row."""
    from hosts.keeper import served_queues
    from hosts.services import ensure_default_host

    ensure_default_host()
    queues = served_queues()
    if queues:  # selecting any queue leaves out the default one unless it is selected too
        instance.app.amqp.queues.select_add(settings.CELERY_TASK_DEFAULT_QUEUE)
    for queue in queues:
        instance.app.amqp.queues.select_add(queue)


@worker_ready.connect
def _reconcile_at_start(**_: Any) -> None:
    from sandboxes.tasks import reconcile

    reconcile.delay()


@worker_ready.connect
def _keep_the_hosts(sender: Any = None, **_: Any) -> None:
    """The served hosts' health checked, and a container that dies outside Boxyard marked
    lost at once (the embedded worker starts its keeper itself: it sends no worker_ready)."""
    from hosts.keeper import start_keeping

    start_keeping(worker=getattr(sender, "hostname", None))


@worker_shutdown.connect
def _stop_keeping(**_: Any) -> None:
    from hosts.keeper import stop_keeping

    stop_keeping()
