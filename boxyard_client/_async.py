"""The asyncio client: the same methods as `BoxyardClient`, each to be awaited."""

from __future__ import annotations

from types import TracebackType
from typing import Self, TypeVar

import httpx

from boxyard_client._base import ClientBase
from boxyard_client._calls import AsyncSending, Call

T = TypeVar("T")


class AsyncBoxyardClient(ClientBase[httpx.AsyncClient], AsyncSending):
    """The bot API over `httpx.AsyncClient`: `await client.open("support", variables)`."""

    _http_class = httpx.AsyncClient

    async def _send(self, call: Call[T]) -> T:
        return call.result(await self._http.send(self._request(call)))

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
