"""The Docker hosts a worker process serves, kept: every CHECK_SECONDS each host's engine is
asked what it is (within CHECK_TIMEOUT, up to 8 hosts at once); a host that answers is followed
(its containers' events, `sandboxes.services.watching`) and, when it was down, reconciled; a
host that does not is marked down once nothing has reached it for `services.DOWN_AFTER`, and
no longer followed. Its sandboxes then answer `host_unavailable` at once (`engines`).

Which hosts: BOXYARD_WORKER_HOSTS, their names (comma-separated), or `*` (the default) for
every host. The embedded worker serves every host."""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from celery import current_app
from django.conf import settings
from django.db import close_old_connections, connection

from boxyard.errors import BoxyardError
from hosts import services
from hosts.engines import engine_of
from hosts.models import DockerHost
from sandboxes.services.background import RECONCILE, later
from sandboxes.services.watching import follow, following, unfollow

log = logging.getLogger(__name__)

CHECK_SECONDS = 2.0
CHECK_TIMEOUT = 2.0
_CHECKS_AT_ONCE = 8


def served_queues() -> list[str]:
    """The queues of the hosts this worker serves (none without host queues)."""
    if not settings.BOXYARD_HOST_QUEUES:
        return []
    return [host.queue for host in served()]


def served() -> list[DockerHost]:
    """The hosts this process serves (BOXYARD_WORKER_HOSTS)."""
    names = [name.strip() for name in settings.BOXYARD_WORKER_HOSTS.split(",") if name.strip()]
    hosts = DockerHost.objects.all()
    if "*" not in names:
        hosts = hosts.filter(name__in=names)
    return list(hosts)


def check(host: DockerHost) -> bool:
    """Ask the host's engine what it is, and record the answer (or its absence): True if it
    answered."""
    close_old_connections()
    try:
        try:
            facts = engine_of(host).engine_facts(CHECK_TIMEOUT)
        except BoxyardError as error:
            if services.unreachable(host, error):
                log.warning("Docker host %s is down: %s", host.name, error)
            return False
        try:
            back = services.seen(host, facts)
        except services.EngineTaken as error:  # marked down: neither followed nor reconciled
            log.warning("Docker host %s refused: %s", host.name, error)
            return False
        if back:
            log.info("Docker host %s is back; reconciling it", host.name)
            later(RECONCILE, host.pk, host=host.pk)
        return True
    finally:
        close_old_connections()


class Keeper:
    """The thread that keeps this process's hosts (see the module)."""

    def __init__(self, worker: str | None = None) -> None:
        self.worker = worker  # the Celery worker's name, whose queues this keeper adds to
        self.consuming = set(served_queues()) if worker else set()
        self._stopping = threading.Event()
        self._checks = ThreadPoolExecutor(_CHECKS_AT_ONCE, thread_name_prefix="host-check")
        self._thread = threading.Thread(target=self._run, name="host-keeper", daemon=True)

    def start(self) -> "Keeper":
        self._thread.start()
        return self

    def stop(self, timeout: float = 5) -> None:
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        self._checks.shutdown(wait=False, cancel_futures=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def keep(self) -> None:
        """One pass: every served host checked, followed if it answers, left if not."""
        close_old_connections()
        hosts = served()
        self._consume(hosts)
        answered = dict(zip(hosts, self._checks.map(check, hosts), strict=True))
        up: set[int | None] = {host.pk for host, answers in answered.items() if answers}
        for host_id in up:
            follow(host_id)
        for gone in following() - up:
            unfollow(gone)

    def _consume(self, hosts: list[DockerHost]) -> None:
        """A host added since the worker started: its queue consumed too (asked through
        Celery's remote control, which the worker's own loop carries out)."""
        if not self.worker or not settings.BOXYARD_HOST_QUEUES:
            return
        for host in hosts:
            if host.queue not in self.consuming:
                current_app.control.add_consumer(host.queue, destination=[self.worker])
                self.consuming.add(host.queue)
                log.info("worker %s now serves Docker host %s", self.worker, host.name)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self.keep()
                except Exception:  # a bug, or the database away: the next pass tries again
                    log.exception("keeping the Docker hosts failed")
                self._stopping.wait(CHECK_SECONDS)
        finally:
            connection.close()


_keeper: Keeper | None = None
_lock = threading.Lock()


def start_keeping(worker: str | None = None) -> Keeper:
    """This process's keeper, started unless it runs already (`worker`: the Celery worker's
    name, when the process is one that consumes host queues)."""
    global _keeper
    with _lock:
        if _keeper is None or not _keeper.alive:
            _keeper = Keeper(worker).start()
        return _keeper


def stop_keeping() -> None:
    """Stop checking and following hosts (the worker is shutting down)."""
    global _keeper
    with _lock:
        keeper, _keeper = _keeper, None
    if keeper is not None:
        keeper.stop()
    from sandboxes.services.watching import stop_following

    stop_following()
