"""The engine's container events, as a stream that outlives the connections under it."""

import functools
from typing import TYPE_CHECKING, Any

import docker

from boxyard.errors import N_, RuntimeFailure
from sandboxes.runtime.docker.common import translate
from sandboxes.runtime.event_stream import ResumingEvents, parse_clock, parse_event, stamp


class EventsMixin:
    """The events half of `DockerRuntime` (it gives `api`)."""

    if TYPE_CHECKING:

        @property
        def api(self) -> docker.APIClient: ...

    def events(self, labels: dict[str, str], since: float | None = None) -> ResumingEvents:
        """A `ResumingEvents` (an `EventStream`) over windows of the engine's event stream."""
        # docker-py reads an event stream without a timeout (the client's 120 s is for
        # requests), so a quiet engine never looks dead here; each window of the stream asks
        # the engine's clock first, and that is the test of a live engine. "From now" is read
        # now, so that what happens before the first window opens is not missed.
        return ResumingEvents(
            self._engine_now_ns,
            functools.partial(self._event_window, labels),
            since_ns=self._engine_now_ns() if since is None else int(since * 1_000_000_000),
        )

    @translate
    def _engine_now_ns(self) -> int:
        text = str(self.api.info().get("SystemTime") or "")
        try:
            return parse_clock(text)
        except ValueError:
            raise RuntimeFailure(
                N_("the Docker Engine gave a clock reading of %(text)r", text=text)
            ) from None

    @translate
    def _event_window(self, labels: dict[str, str], since_ns: int, until_ns: int) -> Any:
        """The engine's container events from since_ns to until_ns (it closes the stream then),
        as an `event_stream.Window`."""
        # docker-py passes `since` and `until` on as they are; the engine takes them as text, to
        # the nanosecond, where types-docker allows only a datetime or whole seconds.
        stream = self.api.events(  # type: ignore[call-overload]  # since and until as text
            since=stamp(since_ns),
            until=stamp(until_ns),
            decode=True,
            filters={
                "type": ["container"],
                "event": ["start", "die", "oom", "destroy"],
                "label": [f"{key}={value}" for key, value in labels.items()],
            },
        )
        return (parse_event(raw) for raw in stream), stream.close
