"""A container event stream that outlives the connections under it.

An engine's event stream is one long HTTP response. It ends for reasons that say nothing
about the engine: a proxy's idle timeout, an engine that closes it at the `until` we asked
for, a dropped connection. So the stream here asks for bounded windows of time, one after the
other, each resuming at the last event seen (the engine replays what it still keeps from
that moment, and the events seen already are skipped), and asks the engine's clock before
each window, which is also the test of whether the engine is there: only that failing (or
windows that all break at once) ends the iteration, with RuntimeUnavailable. A silent window
is not a failure.

Nothing here speaks to an engine: the runtime gives the clock and the windows as callables;
the helpers at the end read the Docker Engine's JSON (its clock and its events).
"""

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from time import monotonic
from typing import Any

from boxyard.errors import N_, RuntimeUnavailable
from sandboxes.runtime import ContainerEvent

log = logging.getLogger(__name__)

# An engine window: its events with their times (ns, the engine's clock), and how to close it.
Window = tuple[Iterator[tuple[int, ContainerEvent]], Callable[[], None]]

WINDOW_SECONDS = 60.0
# Windows that end well before their time, one after the other, mean an engine that answers
# its clock but keeps dropping the stream: wait a little between them, and give up after a few.
_EARLY_ENDS = 6
_EARLY_WAIT_SECONDS = 0.2


class ResumingEvents:
    """An iterable of events over as many engine windows as it takes; `close()` from any
    thread ends it (the window being read is closed, which wakes the reader)."""

    def __init__(
        self,
        engine_now_ns: Callable[[], int],
        open_window: Callable[[int, int], Window],
        since_ns: int | None = None,
        window_seconds: float | None = None,
    ) -> None:
        self._engine_now_ns = engine_now_ns
        self._open_window = open_window
        self._cursor = since_ns
        self._window_seconds = WINDOW_SECONDS if window_seconds is None else window_seconds
        self._window_ns = int(self._window_seconds * 1e9)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._close_window: Callable[[], None] | None = None

    def __iter__(self) -> Iterator[ContainerEvent]:
        # The events at the cursor's very nanosecond that were given already: a window that
        # resumes at the cursor gives them again.
        seen_at_cursor: set[tuple[str, str]] = set()
        early_ends = 0
        while not self._closed.is_set():
            now_ns = self._engine_now_ns()  # RuntimeUnavailable: the engine is gone
            if self._cursor is None:
                self._cursor = now_ns
            until_ns = max(self._cursor, now_ns) + self._window_ns
            events, close = self._open_window(self._cursor, until_ns)
            with self._lock:
                self._close_window = close
            if self._closed.is_set():
                close()
                return
            opened = monotonic()
            try:
                for time_ns, event in events:
                    key = (event.container_id, event.action)
                    at_cursor = time_ns == self._cursor
                    if time_ns < self._cursor or (at_cursor and key in seen_at_cursor):
                        continue
                    if time_ns > self._cursor:
                        self._cursor = time_ns
                        seen_at_cursor.clear()
                    seen_at_cursor.add(key)
                    early_ends = 0
                    yield event
            except Exception as error:
                # clock reading tells whether the engine is still there
                log.debug("an engine event window broke: %s", error)
            finally:
                with self._lock:
                    self._close_window = None
                close()
            if self._closed.is_set():
                return
            if monotonic() - opened < self._window_seconds / 2:
                early_ends += 1
                if early_ends >= _EARLY_ENDS:
                    raise RuntimeUnavailable(N_("the engine keeps dropping its event stream"))
                self._closed.wait(_EARLY_WAIT_SECONDS * 2**early_ends)
            else:
                early_ends = 0

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            close = self._close_window
        if close is not None:
            close()


# --- the Docker Engine's JSON ---------------------------------------------------------------------

_NS = 1_000_000_000
# Attributes the engine adds to a container event's labels.
_ENGINE_ATTRIBUTES = ("name", "image", "exitCode", "signal")


def stamp(time_ns: int) -> str:
    """A time as the engine's `since` and `until` take it, to the nanosecond."""
    return f"{time_ns // _NS}.{time_ns % _NS:09d}"


def parse_clock(text: str) -> int:
    """RFC 3339 with nanoseconds and any offset ("2026-11-22T08:33:54.275340794+01:00") as Unix
    nanoseconds; ValueError if it is not that."""
    head, dot, rest = text.partition(".")
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))] if dot else ""
    offset = (rest[len(digits) :] if dot else head[19:]) or "Z"
    moment = datetime.fromisoformat(head[:19] + ("+00:00" if offset == "Z" else offset))
    return int(moment.timestamp()) * _NS + int((digits + "0" * 9)[:9])


def parse_event(raw: dict[str, Any]) -> tuple[int, ContainerEvent]:
    """One container event of the engine's stream, with its time in nanoseconds."""
    actor = raw.get("Actor") or {}
    attributes = dict(actor.get("Attributes") or {})
    exit_code = str(attributes.get("exitCode") or "")
    time_ns = int(raw.get("timeNano") or int(raw.get("time") or 0) * _NS)
    return time_ns, ContainerEvent(
        container_id=actor.get("ID") or raw.get("id") or "",
        name=attributes.get("name", ""),
        action=raw.get("Action") or raw.get("status") or "",
        labels={k: v for k, v in attributes.items() if k not in _ENGINE_ATTRIBUTES},
        time=time_ns / _NS,
        exit_code=int(exit_code) if exit_code.lstrip("-").isdigit() else None,
    )
