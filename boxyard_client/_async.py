"""The asyncio client: the same methods as `BoxyardClient`, each to be awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self, TypeVar

import httpx

from boxyard_client._base import ClientBase
from boxyard_client._calls import AsyncSending, Call, ndjson_item
from boxyard_client._transfers import PIECE, Received, expected_size
from boxyard_client.errors import error_from_response

T = TypeVar("T")


class AsyncBoxyardClient(ClientBase[httpx.AsyncClient], AsyncSending):
    """The bot API over `httpx.AsyncClient`: `await client.open("support", variables)`."""

    _http_class = httpx.AsyncClient

    async def _send(self, call: Call[T]) -> T:
        content = call.upload.achunks() if call.upload else None
        request = self._request(call, content)
        if call.download is None:
            return call.result(await self._http.send(request))
        response = await self._http.send(request, stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                raise error_from_response(response)
            size = await call.download.awrite(response.aiter_bytes(PIECE), expected_size(response))
            return call.parse(Received(response, size))
        finally:
            await response.aclose()

    async def _stream(self, call: Call[T]) -> AsyncIterator[T]:
        response = await self._http.send(self._request(call), stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                raise error_from_response(response)
            async for line in response.aiter_lines():
                if (item := ndjson_item(line)) is not None:
                    yield call.parse(item)
        finally:
            await response.aclose()

    async def shutdown(self) -> None:
        """Close the HTTP connections (`close` closes a sandbox)."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()
