"""The blocking client."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Self, TypeVar

import httpx

from boxyard_client._base import ClientBase
from boxyard_client._calls import Call, Sending, ndjson_item
from boxyard_client._transfers import PIECE, Received, expected_size
from boxyard_client.errors import error_from_response

T = TypeVar("T")


class BoxyardClient(ClientBase[httpx.Client], Sending):
    """The bot API over `httpx.Client`: `BoxyardClient("https://boxyard.example", token)`.

    Every call returns a frozen dataclass or raises a `BoxyardAPIError` subclass. `timeout` is
    in seconds; calls that wait (exec, exec_wait, run with `timeout_seconds`) get that much
    more. `transport` replaces httpx's (tests pass `httpx.MockTransport`).
    """

    _http_class = httpx.Client

    def _send(self, call: Call[T]) -> T:
        content = call.upload.chunks() if call.upload else None
        request = self._request(call, content)
        if call.download is None:
            return call.result(self._http.send(request))
        response = self._http.send(request, stream=True)
        try:
            if response.status_code >= 400:
                response.read()
                raise error_from_response(response)
            size = call.download.write(response.iter_bytes(PIECE), expected_size(response))
            return call.parse(Received(response, size))
        finally:
            response.close()

    def _stream(self, call: Call[T]) -> Iterator[T]:
        response = self._http.send(self._request(call), stream=True)
        try:
            if response.status_code >= 400:
                response.read()
                raise error_from_response(response)
            for line in response.iter_lines():
                if (item := ndjson_item(line)) is not None:
                    yield call.parse(item)
        finally:
            response.close()

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
