"""The blocking client."""

from __future__ import annotations

from types import TracebackType
from typing import Self, TypeVar

import httpx

from boxyard_client._base import ClientBase
from boxyard_client._calls import Call, Sending

T = TypeVar("T")


class BoxyardClient(ClientBase[httpx.Client], Sending):
    """The bot API over `httpx.Client`: `BoxyardClient("https://boxyard.example", token)`.

    Every call returns a frozen dataclass or raises a `BoxyardAPIError` subclass. `timeout` is
    in seconds; calls that wait (exec, exec_wait, run with `timeout_seconds`) get that much
    more. `transport` replaces httpx's (tests pass `httpx.MockTransport`).
    """

    _http_class = httpx.Client

    def _send(self, call: Call[T]) -> T:
        return call.result(self._http.send(self._request(call)))

    def shutdown(self) -> None:
        """Close the HTTP connections (`close` closes a sandbox)."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.shutdown()
