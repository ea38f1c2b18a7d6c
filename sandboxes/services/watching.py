"""Following the engine: a sandbox whose container dies or is removed outside Boxyard (a
`docker kill`, a `docker rm -f`, the out-of-memory killer ending the container's own process)
is marked lost within a moment, not at the reconciler's next pass.

Every process that does engine work (each Celery worker, the embedded worker) runs one
`Follower`: a daemon thread reading the engine's container events for this deployment. An
event is only a hint. The row must still be running (or unknown) in the container's
generation with that very container recorded on it, and the engine must say the container no
longer runs; then `containers.mark_lost`, the reconciler's own transition, marks it, and the
dead container is removed as the reconciler would. So Boxyard's own work is never taken for a
loss: a stop moves the row to `stopping` before its container goes, a restart or a failed
health check moves it to a new generation and clears the container first. An event seen
twice, or by several followers at once, changes the row once (a conditional update).

The reconciler stays the safety net: what happened while no follower listened (a process
restart, an engine restart, more events than the engine keeps) is its to find.
"""

import logging
import threading
import time
from uuid import UUID

from django.db import close_old_connections, connection

from boxyard.actors import SYSTEM
from boxyard.errors import BoxyardError
from hosts.engines import get_runtime, runtime_of
from sandboxes.models import Sandbox, State
from sandboxes.runtime import (
    LABEL_DEPLOYMENT,
    LABEL_GENERATION,
    LABEL_ROLE,
    LABEL_SANDBOX,
    ContainerEvent,
    EventStream,
    labels_for,
)
from sandboxes.services import containers

log = logging.getLogger(__name__)

# The container stopped, or is removed; "oom" alone is not an end: the out-of-memory killer
# may have ended one command and left the container running (a "die" follows if not).
GONE = frozenset({"die", "destroy"})
_FIRST_RETRY_SECONDS = 0.5
_LAST_RETRY_SECONDS = 30.0


def handle(event: ContainerEvent) -> bool:
    """Mark lost the sandbox whose container this event says has ended, if it still counts
    on that container; True when this call made the change."""
    if event.action not in GONE or LABEL_ROLE in event.labels:
        return False
    sandbox_id = _uuid(event.labels.get(LABEL_SANDBOX, ""))
    generation = event.labels.get(LABEL_GENERATION, "")
    if sandbox_id is None or not generation.isdigit():
        return False
    sandbox = (
        Sandbox.objects.select_related("pipeline")
        .filter(
            pk=sandbox_id,
            generation=int(generation),
            container_id=event.container_id,
            state__in=[State.RUNNING, State.UNKNOWN],
        )
        .first()
    )
    if sandbox is None:
        return False  # Boxyard stopped or replaced it, or another follower was first
    runtime = runtime_of(sandbox)
    info = runtime.inspect_container(event.container_id)
    if info is not None and info.running:
        return False  # started again since the event (an engine restart policy, say)
    detail: dict[str, object] = {"container": event.name, "seen": "engine_event"}
    exit_code = info.exit_code if info is not None else event.exit_code
    if exit_code is not None:
        detail["exit_code"] = exit_code
    if info is not None and info.oom_killed:
        detail["oom_killed"] = True
    lost = containers.mark_lost(sandbox, SYSTEM, container_id=event.container_id, **detail)
    if lost and info is not None:
        try:
            runtime.remove_container(event.container_id)
        except BoxyardError as error:  # the reconciler removes it on its next pass
            log.warning("removing the dead container %s failed: %s", event.name, error)
    return lost


class Follower:
    """One daemon thread following this deployment's sandbox containers on one Docker host
    (None: this machine's engine) until `stop()`.

    It reconnects after an engine outage (backing off from 0.5 s to 30 s), resuming at the
    last event it saw, and never lets an error out of its thread.
    """

    def __init__(self, since: float | None = None, host: int | None = None) -> None:
        self.host = host
        self._since = since
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None
        # Set while the follower reads the engine's stream (events from then on are seen).
        self.following = threading.Event()

    def start(self) -> "Follower":
        self._thread = threading.Thread(
            target=self._run, name=f"engine-events-{self.host or 'machine'}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5) -> None:
        self._stopping.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        since = self._since
        delay = _FIRST_RETRY_SECONDS
        try:
            while not self._stopping.is_set():
                opened_at = time.time()
                try:
                    stream = get_runtime(self.host).events(labels_for(), since=since)
                    with self._lock:
                        self._stream = stream
                    if self._stopping.is_set():
                        break
                    # Until the first event, a new stream resumes from the moment it opened.
                    since = since if since is not None else opened_at
                    self.following.set()
                    log.info(
                        "following the engine's events of deployment %s",
                        labels_for()[LABEL_DEPLOYMENT],
                    )
                    delay = _FIRST_RETRY_SECONDS
                    for event in stream:
                        since = event.time
                        self._handle(event)
                except BoxyardError as error:
                    log.warning("following the engine's events: %s; again in %.1f s", error, delay)
                except Exception:  # a bug must not end the following, nor the process
                    log.exception("following the engine's events failed; again in %.1f s", delay)
                finally:
                    self.following.clear()
                    with self._lock:
                        opened, self._stream = self._stream, None
                    if opened is not None:
                        opened.close()
                if self._stopping.wait(delay):
                    break
                delay = min(delay * 2, _LAST_RETRY_SECONDS)
        finally:
            connection.close()  # this thread's own database connection

    def _handle(self, event: ContainerEvent) -> None:
        # As around a task: a connection the database dropped, or one past its age, is not
        # used again (with no age allowed, none is kept between events).
        close_old_connections()
        try:
            handle(event)
        except BoxyardError as error:
            log.warning("handling %s of container %s: %s", event.action, event.name, error)
        except Exception:
            log.exception("handling %s of container %s failed", event.action, event.name)
        finally:
            close_old_connections()


_followers: dict[int | None, Follower] = {}
_follower_lock = threading.Lock()


def follow(host: int | None) -> Follower:
    """This process's follower of a Docker host's events, started unless it runs already."""
    with _follower_lock:
        follower = _followers.get(host)
        if follower is None or not follower.alive:
            follower = _followers[host] = Follower(host=host).start()
        return follower


def following() -> set[int | None]:
    """The hosts this process follows."""
    with _follower_lock:
        return {host for host, follower in _followers.items() if follower.alive}


def unfollow(host: int | None) -> None:
    """Stop following a host (it was removed, or this process no longer serves it)."""
    with _follower_lock:
        follower = _followers.pop(host, None)
    if follower is not None:
        follower.stop()


def stop_following() -> None:
    """End every follower of this process (the worker is shutting down)."""
    with _follower_lock:
        followers = list(_followers.values())
        _followers.clear()
    for follower in followers:
        follower.stop()


def _uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None
