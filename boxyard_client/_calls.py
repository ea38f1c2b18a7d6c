"""How a route of the bot API becomes a method of both clients.

A route only builds a `Call`: the HTTP request to make and how to parse its answer.
`endpoint` makes it a client method that hands the call to the client's `_send`, which performs
it: `BoxyardClient` returns the result, `AsyncBoxyardClient` a coroutine of it. Nothing here
does I/O, so the two clients cannot drift apart.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx

from boxyard_client._models import Lease, from_json
from boxyard_client._transfers import Download, Upload
from boxyard_client.errors import BoxyardAPIError, error_from_response

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_TIMEOUT = 120.0
API_ROOT = "/api/v1"


class Sending:
    """A client whose calls return their results (`BoxyardClient`)."""


class AsyncSending:
    """A client whose calls return coroutines of their results (`AsyncBoxyardClient`)."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the parser of its answer's JSON."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    json: dict[str, Any] | None = None
    wait_seconds: float = 0.0  # how long the server may rightly work before it answers
    text: bool = False  # parse the body's text, not JSON
    headers: dict[str, str] | None = None
    upload: Upload | None = None  # a body streamed from a file, a path or bytes
    download: Download | None = None  # a body streamed into one; parse gets a `Received`
    whole: bool = False  # parse the response itself (its headers), not its body

    def result(self, response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise error_from_response(response)
        if self.whole:
            return self.parse(response)
        if self.text:
            return self.parse(response.text)
        try:
            body = response.json()
        except ValueError:  # not the API answering: a wrong base_url, a proxy page
            raise BoxyardAPIError(
                response.status_code, "invalid_response", f"not JSON: {response.text[:200]!r}"
            ) from None
        return self.parse(body)


class _Built(Generic[P, T]):
    """A method that builds a `Call`, as its callers see it: no `self`, no `Call`."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        signature = inspect.signature(build)
        self.signature = signature.replace(
            parameters=list(signature.parameters.values())[1:],
            return_annotation=inspect.Signature.empty,
        )

    def _bound(self, client: Any, perform: Callable[[Call[T]], Any]) -> Callable[P, Any]:
        build = self.build

        @functools.wraps(build)
        def send(*args: P.args, **kwargs: P.kwargs) -> Any:
            return perform(build(client, *args, **kwargs))

        send.__signature__ = self.signature  # type: ignore[attr-defined]  # what inspect.signature reads
        return send


class endpoint(_Built[P, T]):
    """Makes a method that builds a `Call` into one that sends it with the client's `_send`."""

    @overload
    def __get__(self, client: None, owner: type) -> endpoint[P, T]: ...
    @overload
    def __get__(self, client: AsyncSending, owner: type) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, client: Sending, owner: type) -> Callable[P, T]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        return self if client is None else self._bound(client, client._send)


class streamed(_Built[P, T]):
    """Makes a method that builds a `Call` whose answer is NDJSON into one that follows it
    with the client's `_stream`: each line parsed as it comes (keepalives left out), from an
    iterator (`BoxyardClient`) or an async iterator (`AsyncBoxyardClient`). The request is
    made when the iteration begins, and a refusal raises then."""

    @overload
    def __get__(self, client: None, owner: type) -> streamed[P, T]: ...
    @overload
    def __get__(self, client: AsyncSending, owner: type) -> Callable[P, AsyncIterator[T]]: ...
    @overload
    def __get__(self, client: Sending, owner: type) -> Callable[P, Iterator[T]]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        return self if client is None else self._bound(client, client._stream)


def ndjson_item(line: str) -> dict[str, Any] | None:
    """A line of an NDJSON answer as its object; None for a blank line or a keepalive."""
    if not line.strip():
        return None
    item: dict[str, Any] = json.loads(line)
    return None if item.get("type") == "keepalive" else item


def parser(cls: type[T]) -> Callable[[Any], T]:
    return functools.partial(from_json, cls)


def list_parser(cls: type[T], key: str) -> Callable[[Any], list[T]]:
    return lambda body: [from_json(cls, item) for item in body[key]]


def compact(values: dict[str, Any]) -> dict[str, Any]:
    """Leave out what was not given, so the server applies its defaults."""
    return {key: value for key, value in values.items() if value is not None}


def optional_dict(values: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(values) if values is not None else None


def sandbox_path(sandbox_id: str, *rest: str) -> str:
    return "/".join(["/sandboxes", quote(str(sandbox_id), safe=""), *rest])


def exec_path(sandbox_id: str, exec_id: str, *rest: str) -> str:
    return sandbox_path(sandbox_id, "execs", quote(str(exec_id), safe=""), *rest)


def octal_mode(mode: str | int | None) -> str | None:
    return format(mode, "04o") if isinstance(mode, int) else mode


def lease_call(sandbox_id: str, operation: str, body: dict[str, Any]) -> Call[Lease]:
    return Call(
        "POST", sandbox_path(sandbox_id, "lease", operation), parser(Lease), json=compact(body)
    )
