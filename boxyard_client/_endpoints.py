"""Every route of the bot API, written once for both clients.

Each endpoint below only builds a `Call`: the HTTP request to make and how to parse its answer.
`endpoint` makes it a client method that hands the call to the client's `_send`, which performs
it: `BoxyardClient` returns the result, `AsyncBoxyardClient` a coroutine of it. Nothing here
does I/O, so the two clients cannot drift apart.
"""

from __future__ import annotations

import base64
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx

from boxyard_client._models import (
    DeleteResult,
    ExecEvent,
    ExecOutput,
    ExecResult,
    FileContents,
    FileList,
    KeptAlive,
    Lease,
    OpenedSandbox,
    Process,
    ProcessOutput,
    ResetDone,
    RunResult,
    Sandbox,
    Session,
    StatusResult,
    StdinResult,
    Tools,
    WaitResult,
    WriteResult,
    from_json,
    parse_events,
)
from boxyard_client.errors import BoxyardAPIError, error_from_response

if TYPE_CHECKING:
    from boxyard_client._async import AsyncBoxyardClient
    from boxyard_client._sync import BoxyardClient

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_TIMEOUT = 120.0
API_ROOT = "/api/v1"


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

    def result(self, response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise error_from_response(response)
        if self.text:
            return self.parse(response.text)
        try:
            body = response.json()
        except ValueError:  # not the API answering: a wrong base_url, a proxy page
            raise BoxyardAPIError(
                response.status_code, "invalid_response", f"not JSON: {response.text[:200]!r}"
            ) from None
        return self.parse(body)


class endpoint(Generic[P, T]):
    """Makes a method that builds a `Call` into one that sends it with the client's `_send`."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        signature = inspect.signature(build)
        self.signature = signature.replace(  # what callers see: no `self`, no `Call`
            parameters=list(signature.parameters.values())[1:],
            return_annotation=inspect.Signature.empty,
        )

    @overload
    def __get__(self, client: None, owner: type) -> endpoint[P, T]: ...
    @overload
    def __get__(self, client: AsyncBoxyardClient, owner: type) -> Callable[P, Awaitable[T]]: ...
    @overload
    def __get__(self, client: BoxyardClient, owner: type) -> Callable[P, T]: ...

    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self
        build = self.build

        @functools.wraps(build)
        def send(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client._send(build(client, *args, **kwargs))

        send.__signature__ = self.signature  # type: ignore[attr-defined]
        return send


def _parser(cls: type[T]) -> Callable[[Any], T]:
    return functools.partial(from_json, cls)


def _list_parser(cls: type[T], key: str) -> Callable[[Any], list[T]]:
    return lambda body: [from_json(cls, item) for item in body[key]]


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    """Leave out what was not given, so the server applies its defaults."""
    return {key: value for key, value in values.items() if value is not None}


def _optional_dict(values: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(values) if values is not None else None


def _sandbox(sandbox_id: str, *rest: str) -> str:
    return "/".join(["/sandboxes", quote(str(sandbox_id), safe=""), *rest])


def _exec(sandbox_id: str, exec_id: str, *rest: str) -> str:
    return _sandbox(sandbox_id, "execs", quote(str(exec_id), safe=""), *rest)


def _mode(mode: str | int | None) -> str | None:
    return format(mode, "04o") if isinstance(mode, int) else mode


def _lease_call(sandbox_id: str, operation: str, body: dict[str, Any]) -> Call[Lease]:
    return Call(
        "POST", _sandbox(sandbox_id, "lease", operation), _parser(Lease), json=_compact(body)
    )


Variables = Mapping[str, str | int | None]


class Endpoints:
    """The bot API's calls. `holder` and `epoch` fence every call that changes a sandbox: left
    out, the call acts as the pipeline's default holder (the scope key)."""

    # --- sandboxes ------------------------------------------------------------------------
    @endpoint
    def open(
        self,
        pipeline: str,
        variables: Variables | None = None,
        holder: str | None = None,
        *,
        background: bool = False,
    ) -> Call[OpenedSandbox]:
        """Get or create the sandbox of the scope these chat variables make; take the lease.
        With `background`, a sandbox that needs a container comes back `creating` at once."""
        body = _compact(
            {"pipeline": pipeline, "variables": dict(variables or {}), "holder": holder,
             "async": background or None}
        )
        return Call("POST", "/sandboxes/open", _parser(OpenedSandbox), json=body)

    @endpoint
    def list_sandboxes(
        self, status: str | None = None, scope_key: str | None = None
    ) -> Call[list[Sandbox]]:
        """The pipeline's sandboxes, optionally of one status or scope key."""
        params = _compact({"status": status, "scope_key": scope_key})
        return Call("GET", "/sandboxes", _list_parser(Sandbox, "sandboxes"), params=params)

    @endpoint
    def metrics(self) -> Call[dict[str, Any]]:
        """The pipeline's sandbox metrics: counts by state, creates, reuses, reaps by reason,
        health-check failures, pool hits and misses, execs and their durations."""
        return Call("GET", "/metrics", lambda data: data)

    @endpoint
    def get_sandbox(self, sandbox_id: str) -> Call[Sandbox]:
        return Call("GET", _sandbox(sandbox_id), _parser(Sandbox))

    @endpoint
    def close(
        self, sandbox_id: str, delete_workspace: bool = False, *, holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[StatusResult]:
        """Stop the sandbox; with `delete_workspace` its files go too."""
        params = _compact({"delete_workspace": delete_workspace, "holder": holder, "epoch": epoch})
        return Call("DELETE", _sandbox(sandbox_id), _parser(StatusResult), params=params)

    # --- execs ----------------------------------------------------------------------------
    @endpoint
    def exec(
        self, sandbox_id: str, cmd: str | Sequence[str], *, cwd: str | None = None,
        env: Mapping[str, str] | None = None, session: str | None = None,
        timeout_seconds: int | None = None, background: bool = False,
        holder: str | None = None, epoch: int | None = None,
    ) -> Call[ExecResult]:
        """Run `cmd` (a shell string, or an argv list) and wait for it to end; with
        `background`, return at once (read it with exec_output, exec_wait, exec_stream)."""
        body = _compact({
            "cmd": cmd if isinstance(cmd, str) else list(cmd), "cwd": cwd,
            "env": _optional_dict(env), "session": session, "timeout_seconds": timeout_seconds,
            "background": background or None, "holder": holder, "epoch": epoch,
        })
        return Call(
            "POST", _sandbox(sandbox_id, "exec"), _parser(ExecResult), json=body,
            wait_seconds=0 if background else timeout_seconds or 0,
        )

    @endpoint
    def get_exec(self, sandbox_id: str, exec_id: str) -> Call[ExecResult]:
        return Call("GET", _exec(sandbox_id, exec_id), _parser(ExecResult))

    @endpoint
    def exec_output(
        self, sandbox_id: str, exec_id: str, since_seq: int = 0, *, max_bytes: int | None = None
    ) -> Call[ExecOutput]:
        """The exec's output as numbered chunks after `since_seq` (the last one seen)."""
        return Call(
            "GET", _exec(sandbox_id, exec_id, "output"), _parser(ExecOutput),
            params=_compact({"since_seq": since_seq, "max_bytes": max_bytes}),
        )

    @endpoint
    def exec_stream(
        self, sandbox_id: str, exec_id: str, since_seq: int = 0, *, wait_seconds: float = 900
    ) -> Call[list[ExecEvent]]:
        """The exec's chunks after `since_seq` and its exit, once it has ended (the server
        sends them as they come: read the route with an SSE client to follow it live)."""
        return Call(
            "GET", _exec(sandbox_id, exec_id, "stream"), parse_events,
            params={"since_seq": since_seq}, wait_seconds=wait_seconds, text=True,
        )

    @endpoint
    def exec_wait(
        self, sandbox_id: str, exec_id: str, timeout_seconds: float = 30
    ) -> Call[WaitResult]:
        """Wait up to `timeout_seconds` for the exec to end."""
        return Call(
            "POST", _exec(sandbox_id, exec_id, "wait"), _parser(WaitResult),
            json={"timeout_seconds": timeout_seconds}, wait_seconds=timeout_seconds,
        )

    @endpoint
    def exec_kill(
        self, sandbox_id: str, exec_id: str, *, holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[StatusResult]:
        """Kill the exec and its children."""
        return Call(
            "POST", _exec(sandbox_id, exec_id, "kill"), _parser(StatusResult),
            json=_compact({"holder": holder, "epoch": epoch}),
        )

    # --- files (paths are under /workspace; relative ones start there) ---------------------
    @endpoint
    def write_file(
        self, sandbox_id: str, path: str, contents: str | bytes, *,
        mode: str | int | None = None, overwrite: bool = True, holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[WriteResult]:
        """Write text (`str`) or bytes; `mode` is octal, as "0755" or 0o755."""
        data = (
            {"contents_b64": base64.b64encode(contents).decode("ascii")}
            if isinstance(contents, bytes) else {"contents": contents}
        )
        body = _compact({
            "path": path, **data, "mode": _mode(mode), "overwrite": overwrite,
            "holder": holder, "epoch": epoch,
        })
        return Call("PUT", _sandbox(sandbox_id, "files"), _parser(WriteResult), json=body)

    @endpoint
    def read_file(
        self, sandbox_id: str, path: str, *, max_bytes: int | None = None
    ) -> Call[FileContents]:
        """The file's bytes (`.data`) and text (`.text`), at most `max_bytes` of them."""
        params = _compact({"path": path, "max_bytes": max_bytes})
        return Call("GET", _sandbox(sandbox_id, "files"), FileContents.from_json, params=params)

    @endpoint
    def list_files(
        self, sandbox_id: str, path: str | None = None, *, recursive: bool = False
    ) -> Call[FileList]:
        """A directory's entries (default /workspace)."""
        params = _compact({"path": path, "recursive": recursive})
        return Call("GET", _sandbox(sandbox_id, "files", "list"), _parser(FileList), params=params)

    @endpoint
    def delete_file(
        self, sandbox_id: str, path: str, *, recursive: bool = False, holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[DeleteResult]:
        params = _compact({"path": path, "recursive": recursive, "holder": holder, "epoch": epoch})
        return Call("DELETE", _sandbox(sandbox_id, "files"), _parser(DeleteResult), params=params)

    # --- sessions and the lease -----------------------------------------------------------
    @endpoint
    def sessions(self, sandbox_id: str) -> Call[list[Session]]:
        """The sandbox's shell sessions."""
        return Call("GET", _sandbox(sandbox_id, "sessions"), _list_parser(Session, "sessions"))

    @endpoint
    def create_session(
        self, sandbox_id: str, name: str, *, cwd: str | None = None,
        env: Mapping[str, str] | None = None, holder: str | None = None, epoch: int | None = None,
    ) -> Call[Session]:
        """Start a shell session with its own cwd and environment (exec with `session=name`)."""
        body = _compact({
            "name": name, "cwd": cwd, "env": _optional_dict(env), "holder": holder, "epoch": epoch,
        })
        return Call("POST", _sandbox(sandbox_id, "sessions"), _parser(Session), json=body)

    @endpoint
    def delete_session(
        self, sandbox_id: str, name: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[DeleteResult]:
        """End a session's shell and whatever runs in it."""
        return Call(
            "DELETE", _sandbox(sandbox_id, "sessions", quote(name, safe="")),
            _parser(DeleteResult), params=_compact({"holder": holder, "epoch": epoch}),
        )

    # --- managed processes ----------------------------------------------------------------
    @endpoint
    def processes(self, sandbox_id: str) -> Call[list[Process]]:
        """The pipeline's managed processes in this sandbox."""
        return Call(
            "GET", _sandbox(sandbox_id, "processes"), _list_parser(Process, "processes")
        )

    @endpoint
    def process_stdin(
        self, sandbox_id: str, name: str, data: str | bytes = "", *, eof: bool = False,
        holder: str | None = None, epoch: int | None = None,
    ) -> Call[StdinResult]:
        """Write text or bytes to the process's stdin; `eof` closes it afterwards."""
        payload = (
            {"data_b64": base64.b64encode(data).decode("ascii")}
            if isinstance(data, bytes) else {"text": data}
        )
        return Call(
            "POST", _sandbox(sandbox_id, "processes", quote(name, safe=""), "stdin"),
            _parser(StdinResult),
            json=_compact({**payload, "eof": eof or None, "holder": holder, "epoch": epoch}),
        )

    @endpoint
    def process_output(
        self, sandbox_id: str, name: str, since_seq: int = 0, *, generation: int | None = None,
        max_bytes: int | None = None, wait_seconds: float = 0,
    ) -> Call[ProcessOutput]:
        """The process's output after `since_seq`; `wait_seconds` waits for something new."""
        params = _compact({
            "since_seq": since_seq, "generation": generation, "max_bytes": max_bytes,
            "wait_seconds": wait_seconds or None,
        })
        return Call(
            "GET", _sandbox(sandbox_id, "processes", quote(name, safe=""), "output"),
            _parser(ProcessOutput), params=params, wait_seconds=wait_seconds,
        )

    @endpoint
    def restart_process(
        self, sandbox_id: str, name: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[Process]:
        return Call(
            "POST", _sandbox(sandbox_id, "processes", quote(name, safe=""), "restart"),
            _parser(Process), json=_compact({"holder": holder, "epoch": epoch}),
        )

    @endpoint
    def keep_alive(
        self, sandbox_id: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[KeptAlive]:
        """Count as activity now (the idle deadline moves) and renew the lease."""
        body = _compact({"holder": holder, "epoch": epoch})
        return Call("POST", _sandbox(sandbox_id, "keepalive"), _parser(KeptAlive), json=body)

    @endpoint
    def reset(
        self, sandbox_id: str, *, reason: str | None = None, holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[ResetDone]:
        """End every process in the sandbox (it works when the sandbox is jammed); sessions
        and managed processes start again, the workspace stays."""
        body = _compact({"reason": reason, "holder": holder, "epoch": epoch})
        return Call("POST", _sandbox(sandbox_id, "reset"), _parser(ResetDone), json=body)

    @endpoint
    def renew_lease(
        self, sandbox_id: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[Lease]:
        """Keep the lease for another lease timeout."""
        return _lease_call(sandbox_id, "renew", {"holder": holder, "epoch": epoch})

    @endpoint
    def takeover_lease(
        self, sandbox_id: str, *, holder: str | None = None, reason: str = ""
    ) -> Call[Lease]:
        """Take the lease whoever holds it; the previous holder gets `TakenOver` until released."""
        return _lease_call(sandbox_id, "takeover", {"holder": holder, "reason": reason})

    @endpoint
    def release_lease(
        self, sandbox_id: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[Lease]:
        """Free the lease for another holder."""
        return _lease_call(sandbox_id, "release", {"holder": holder, "epoch": epoch})

    # --- pipelines and compute mode ------------------------------------------------------
    @endpoint
    def tools(self, pipeline: str) -> Call[Tools]:
        """The pipeline's tool definitions and system prompt, ready for an LLM."""
        return Call("GET", f"/pipelines/{quote(pipeline, safe='')}/tools", _parser(Tools))

    @endpoint
    def run(
        self, pipeline: str, language: str, code: str, files: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None, timeout_seconds: int | None = None,
    ) -> Call[RunResult]:
        """Run `code` (python, bash or sh) once in a fresh sandbox that is destroyed after."""
        body = _compact({
            "pipeline": pipeline, "language": language, "code": code,
            "files": _optional_dict(files), "env": _optional_dict(env),
            "timeout_seconds": timeout_seconds,
        })
        return Call(
            "POST", "/run", _parser(RunResult), json=body, wait_seconds=timeout_seconds or 0
        )


Http = TypeVar("Http", httpx.Client, httpx.AsyncClient)


class ClientBase(Endpoints, Generic[Http]):
    """What both clients share: the connection settings, and how a `Call` becomes a request."""

    _http_class: type[Http]
    _http: Http

    def __init__(
        self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`base_url` is the server ("https://boxyard.example") or its API root (".../api/v1")."""
        root = base_url.rstrip("/")
        self.timeout = timeout
        self._http = self._http_class(
            base_url=root if root.endswith(API_ROOT) else root + API_ROOT,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,  # type: ignore[arg-type]
        )

    def _request(self, call: Call[Any]) -> httpx.Request:
        return self._http.build_request(
            call.method, call.path, params=call.params, json=call.json,
            timeout=self.timeout + call.wait_seconds,
        )
