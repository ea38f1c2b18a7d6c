"""The CPU and memory of the sandboxes whose pages are open in this process: one reading a
second per container from the engine's own stream, in a thread of the reading's own, shared by
every page of the sandbox. A one-shot reading waits about a second for the engine's next one:
the pages would otherwise hold a thread (the database's, shared by the whole server) that long
every time they look."""

import threading
from typing import Any

from hosts.engines import get_runtime
from sandboxes.runtime import Usage
from sandboxes.runtime.agent import At

_followers: dict[str, "Follower"] = {}
_lock = threading.Lock()


class Follower:
    """The latest reading of one container, for as long as a page looks (`watchers`)."""

    def __init__(self, at: At) -> None:
        self.at = at
        self.container = at.container_id
        self.latest: Usage | None = None
        self.watchers = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=self.follow, name=f"usage-{self.container[:12]}", daemon=True
        )

    def follow(self) -> None:
        try:
            for reading in get_runtime(self.at.host_id).follow_usage(self.container):
                self.latest = reading
                if self.stopped.is_set():
                    return
        except Exception:
            pass
        finally:
            self.stopped.set()
            with _lock:
                if _followers.get(self.container) is self:
                    del _followers[self.container]


def watch(at: At) -> Follower:
    """Follow a container for one more page (a follower that ended is started again)."""
    with _lock:
        follower = _followers.get(at.container_id)
        if follower is None or follower.stopped.is_set():
            follower = _followers[at.container_id] = Follower(at)
            follower.thread.start()
        follower.watchers += 1
        return follower


def unwatch(follower: Any) -> None:
    """One page less; the last one stops the reading (at the engine's next reading)."""
    with _lock:
        follower.watchers -= 1
        if follower.watchers <= 0:
            follower.stopped.set()
            if _followers.get(follower.container) is follower:
                del _followers[follower.container]
