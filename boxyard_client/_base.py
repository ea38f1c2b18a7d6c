"""What both clients share: the connection settings, and how a `Call` becomes a request."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import httpx

from boxyard_client._calls import API_ROOT, DEFAULT_TIMEOUT, Call
from boxyard_client._endpoints import Endpoints

Http = TypeVar("Http", httpx.Client, httpx.AsyncClient)


class ClientBase(Endpoints, Generic[Http]):
    """What both clients share: the connection settings, and how a `Call` becomes a request."""

    _http_class: type[Http]
    _http: Http

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`base_url` is the server ("https://boxyard.example") or its API root (".../api/v1")."""
        root = base_url.rstrip("/")
        self.timeout = timeout
        self._http = self._http_class(
            base_url=root if root.endswith(API_ROOT) else root + API_ROOT,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,  # type: ignore[arg-type]  # the caller matches it to the client's kind
        )

    def _request(self, call: Call[Any], content: Any = None) -> httpx.Request:
        """The request of a call; `content` streams its body (an iterator of bytes for the
        blocking client, an async one for asyncio). An upload says its size first, and may
        take as long as writing it at 1 MiB/s more."""
        headers = dict(call.headers or {})
        wait = call.wait_seconds
        if call.upload is not None:
            size = call.upload.size()
            headers.update(
                {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
            )
            wait += size / (1024 * 1024)
        return self._http.build_request(
            call.method,
            call.path,
            params=call.params,
            json=call.json,
            content=content,
            headers=headers,
            timeout=self.timeout + wait,
        )
