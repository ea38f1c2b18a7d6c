"""Boxyard's side of the sandbox agent (the Go program in `agent/`).

Each Boxyard process keeps one channel per sandbox container: a long-lived exec of
`boxyard-agent bridge` carrying one JSON object per line each way. Requests are answered by
id, possibly out of order; subscriptions push chunk and exit events. Everything durable
(sessions, processes, output) lives in the agent inside the sandbox, so a channel may be
dropped and opened again by any process at any time.
"""

import concurrent.futures
import hashlib
import itertools
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from boxyard.errors import (
    N_,
    AgentGone,
    AgentTimeout,
    BoxyardError,
    Conflict,
    InvalidInput,
    Message,
    NotFound,
    QuotaExceeded,
    RuntimeFailure,
)
from boxyard.threads import locked, waiting
from sandboxes.runtime import AGENT_PATH, ROOT, Runtime, engine_at
from sandboxes.runtime.streams import LineBuffer, LineTooLong

log = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024 * 1024
_STDERR_KEPT = 4096
_SLOW_SECONDS = 0.05


def _agent_error(message: dict[str, Any]) -> BoxyardError:
    code = message.get("code", "internal")
    said = message.get("error")  # the agent's own words stay as it says them
    text: str | Message = str(said) if said else N_("the sandbox agent refused the request")
    if code in ("unknown_exec", "unknown_session", "unknown_process", "unknown_context"):
        error: BoxyardError = NotFound(text)
    elif code in ("busy", "context_exists"):
        error = Conflict(text)
    elif code == "too_many":
        error = QuotaExceeded(text)
    elif code in ("bad_request", "unsupported_language"):
        error = InvalidInput("language" if code == "unsupported_language" else "request", text)
    else:
        error = RuntimeFailure(N_("the sandbox agent failed: %(text)s", text=text))
    error.agent_code = code  # type: ignore[attr-defined]  # the agent's own code, for debugging
    return error


@dataclass
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    message: dict[str, Any] | None = None
    error: BaseException | None = None
    # Told the outcome from the reader thread, where a caller does not wait (see `ask`).
    future: "concurrent.futures.Future[dict[str, Any]] | None" = None

    def settle(self) -> None:
        self.event.set()
        if self.future is not None and not self.future.done():
            if self.error is not None:
                self.future.set_exception(self.error)
            else:
                assert self.message is not None
                if self.message.get("ok"):
                    self.future.set_result(self.message)
                else:
                    self.future.set_exception(_agent_error(self.message))


class AgentChannel:
    """One open bridge to the agent of one container."""

    def __init__(self, container: str, runtime: Runtime, user: str | None = None) -> None:
        self.container = container
        self.pid = os.getpid()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._subscribers: dict[int, Callable[[dict[str, Any]], None]] = {}
        self._stderr = bytearray()
        self.closed = False
        self.version = 0  # the protocol version the agent answers to ping (once opened)
        self._duplex = runtime.attach(container, [AGENT_PATH, "bridge"], user=user)
        self._reader = threading.Thread(
            target=self._read, name=f"agent-{container[:12]}", daemon=True
        )
        self._reader.start()

    def call(
        self,
        op: str,
        *,
        deadline: float | None = 30.0,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        on_slow: Callable[[], None] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Send a request and wait up to `deadline` seconds for its answer; `on_event`
        receives its subscription's events (registered before the request leaves, so none
        is missed); `on_slow` runs once if the answer takes longer than a moment (to let go
        of what a long wait should not hold, such as a database connection). Other keyword
        arguments are the request's fields."""
        pending = _Pending()
        request_id = self._send(op, pending, on_event, fields)
        with waiting():
            if on_slow is not None and not pending.event.wait(
                min(_SLOW_SECONDS, deadline or _SLOW_SECONDS)
            ):
                on_slow()
            answered = pending.event.wait(deadline)
        if not answered:
            with self._lock:
                self._pending.pop(request_id, None)
                self._subscribers.pop(request_id, None)
            raise AgentTimeout(
                N_(
                    "the sandbox agent did not answer %(op)r within %(seconds).0f s",
                    op=op,
                    seconds=deadline,
                )
            )
        if pending.error is not None:
            raise pending.error
        assert pending.message is not None
        if not pending.message.get("ok"):
            with self._lock:
                self._subscribers.pop(request_id, None)
            raise _agent_error(pending.message)
        pending.message["_id"] = request_id
        return pending.message

    def ask(
        self,
        op: str,
        *,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        **fields: Any,
    ) -> tuple[int, "concurrent.futures.Future[dict[str, Any]]"]:
        """Send a request without waiting: (its id, for `forget`; the future of its answer,
        settled from the channel's reader thread: the answer, or the error it means)."""
        pending = _Pending(future=concurrent.futures.Future())
        request_id = self._send(op, pending, on_event, fields)
        assert pending.future is not None
        return request_id, pending.future

    def forget(self, request_id: int) -> None:
        """Stop waiting for a request's answer (nobody wants it any more)."""
        with self._lock:
            self._pending.pop(request_id, None)
            self._subscribers.pop(request_id, None)

    def _send(
        self,
        op: str,
        pending: _Pending,
        on_event: Callable[[dict[str, Any]], None] | None,
        fields: dict[str, Any],
    ) -> int:
        request_id = next(self._ids)
        with self._lock:
            if self.closed:
                raise AgentGone(self._why())
            self._pending[request_id] = pending
            if on_event is not None:
                self._subscribers[request_id] = on_event
        line = json.dumps({"id": request_id, "op": op, **fields}, separators=(",", ":"))
        try:
            with waiting():  # the agent may be slow to read (others write to it too)
                self._duplex.send(line.encode() + b"\n")
        except OSError as error:
            self._fail(N_("cannot write to the agent: %(error)s", error=error))
        return request_id

    def unsubscribe(self, subscription: int, exec_id: str) -> None:
        """Stop a subscription (or a run's watch). One whose exit has come is over in the
        agent too (it drops an exec's subscribers as it ends): nothing is asked then."""
        with self._lock:
            live = self._subscribers.pop(subscription, None) is not None
        if live and not self.closed:
            try:
                self.call("unsubscribe", exec=exec_id, sub=subscription, deadline=5)
            except BoxyardError:
                pass

    def close(self) -> None:
        self._fail(N_("the channel was closed"))

    def _why(self) -> Message:
        detail = self._stderr.decode(errors="replace").strip()
        if detail:
            return N_("the sandbox agent is not reachable: %(detail)s", detail=detail)
        return N_("the sandbox agent is not reachable")

    def _read(self) -> None:
        lines = LineBuffer(_MAX_LINE)
        try:
            for stream, data in self._duplex.frames():
                if stream == 2:
                    if len(self._stderr) < _STDERR_KEPT:
                        self._stderr += data[: _STDERR_KEPT - len(self._stderr)]
                    continue
                for line in lines.feed(data):
                    self._dispatch(line)
                    del line  # a long answer is not kept while the channel waits for the next
        except LineTooLong:
            log.warning("the agent of %s sent a line over %d bytes", self.container[:12], _MAX_LINE)
        except Exception:
            log.exception("agent channel to %s failed", self.container[:12])
        finally:
            if lines.buffered and len(self._stderr) < _STDERR_KEPT:
                self._stderr += lines.rest(_STDERR_KEPT - len(self._stderr))
            self._fail(self._why())

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            # Not the agent speaking: the engine's own complaint (the exec could not start),
            # kept to say why the channel failed.
            if len(self._stderr) < _STDERR_KEPT:
                self._stderr += line[: _STDERR_KEPT - len(self._stderr)]
            return
        if "event" in message:
            with self._lock:
                subscriber = self._subscribers.get(message.get("sub", -1))
                if message["event"] == "exit":
                    self._subscribers.pop(message.get("sub", -1), None)
            if subscriber is not None:
                try:
                    subscriber(message)
                except Exception:
                    log.exception("agent subscriber failed")
            return
        with self._lock:
            pending = self._pending.pop(message.get("id", -1), None)
        if pending is not None:
            pending.message = message
            if pending.future is not None and not message.get("ok"):
                with self._lock:
                    self._subscribers.pop(message.get("id", -1), None)
            pending.settle()

    def _fail(self, reason: Message) -> None:
        with self._lock:
            if self.closed and not self._pending and not self._subscribers:
                return
            self.closed = True
            pending, self._pending = self._pending, {}
            subscribers, self._subscribers = self._subscribers, {}
        for asked in pending.values():
            asked.error = AgentGone(reason)
            asked.settle()
        for subscriber in subscribers.values():
            try:
                subscriber({"event": "gone", "reason": str(reason)})
            except Exception:
                log.exception("agent subscriber failed")
        self._duplex.close()


class Placed(Protocol):
    """A container and the Docker host it is on (a sandbox is one: its current container)."""

    @property
    def container_id(self) -> str: ...

    @property
    def host_id(self) -> int | None: ...


@dataclass(frozen=True)
class At:
    """A container named by id on a host (None: this machine's engine)."""

    container_id: str
    host_id: int | None = None


_channels: dict[str, AgentChannel] = {}
_opening: dict[str, threading.Lock] = {}
_registry = threading.Lock()


def channel(placed: Placed) -> AgentChannel:
    """This process's open channel to a container's agent, opened (and checked) if needed,
    through the engine of the container's host."""
    container = placed.container_id
    with _registry:
        current = _channels.get(container)
        if current is not None and not current.closed and current.pid == os.getpid():
            return current
        opening = _opening.setdefault(container, threading.Lock())
    with locked(opening):  # held while the channel opens, through the engine's answers
        with _registry:
            current = _channels.get(container)
            if current is not None and not current.closed and current.pid == os.getpid():
                return current
        fresh = _open(container, engine_at(placed.host_id))
        with _registry:
            _channels[container] = fresh
        return fresh


def _open(container: str, runtime: Runtime) -> AgentChannel:
    # The agent of today is the container's main process, as root, and its bridge runs as
    # root too; an agent of before ran as the sandbox user, started by its first bridge, which
    # must then be the sandbox user's (a bridge of root's would start it as root). A daemon
    # still starting, or a volume written a moment ago, can fail once: one retry covers both.
    info = runtime.inspect_container(container)
    user = ROOT if info is not None and info.user == ROOT else None
    last: BaseException | None = None
    for _ in range(2):
        fresh = AgentChannel(container, runtime, user)
        try:
            answer = fresh.call("ping", deadline=10)
            version = answer.get("version")
            fresh.version = int(version) if isinstance(version, str) and version.isdigit() else 0
            return fresh
        except (AgentGone, AgentTimeout) as error:
            fresh.close()
            last = error
    assert last is not None
    raise last


def is_open(container: str) -> bool:
    """Whether this process has an open channel to the container's agent."""
    with _registry:
        current = _channels.get(container)
    return current is not None and not current.closed and current.pid == os.getpid()


def prepare(placed: Placed) -> None:
    """Open this process's channel to a container's agent in the background, so that the
    sandbox's first command finds it open (opening costs about one engine exec). Best effort:
    if it fails, the first command opens it again and says why."""
    at = At(placed.container_id, placed.host_id)

    def open_quietly() -> None:
        try:
            channel(at)
        except BoxyardError:
            pass
        except Exception:
            log.exception("opening the agent channel to %s failed", at.container_id[:12])

    threading.Thread(
        target=open_quietly, name=f"agent-open-{at.container_id[:12]}", daemon=True
    ).start()


def forget(container: str) -> None:
    """Close this process's channel to a container (it is being removed)."""
    with _registry:
        current = _channels.pop(container, None)
        _opening.pop(container, None)
    if current is not None:
        current.close()


# --- the binary and its volume -------------------------------------------------------------------


@dataclass(frozen=True)
class AgentBuild:
    content: bytes
    digest: str


_build_cache: dict[tuple[str, float], AgentBuild] = {}
# The agent's volume on each engine, by the runtime object and the agent's digest. Kept by the
# object's id with a weak reference to it: a new runtime that gets the id of one dropped (an
# engine whose connection settings changed) does not inherit its volumes.
_volumes: dict[int, tuple["weakref.ref[Runtime]", dict[str, str]]] = {}


def _volumes_of(runtime: Runtime) -> dict[str, str]:
    """The agent volumes known on `runtime`'s engine (call holding _registry)."""
    known = _volumes.get(id(runtime))
    if known is None or known[0]() is not runtime:
        known = _volumes[id(runtime)] = (weakref.ref(runtime), {})
    return known[1]


def agent_build() -> AgentBuild | None:
    """The agent binary this installation ships (built by `bin/setup`), or None if missing."""
    path = Path(settings.BOXYARD_AGENT_BINARY)
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return None
    if key not in _build_cache:
        content = path.read_bytes()
        _build_cache.clear()
        _build_cache[key] = AgentBuild(content, hashlib.sha256(content).hexdigest())
    return _build_cache[key]


def agent_volume(image: str, runtime: Runtime) -> tuple[str, str] | None:
    """(volume name, digest) of the agent for new containers on `runtime`'s engine, or None
    without an agent."""
    build = agent_build()
    if build is None:
        return None
    with _registry:  # per engine: a volume of one is not on another
        name = _volumes_of(runtime).get(build.digest)
    if name is None:
        name = runtime.ensure_agent(image, build.content, build.digest)
        with _registry:
            _volumes_of(runtime)[build.digest] = name
    return name, build.digest
