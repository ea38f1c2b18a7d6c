"""The ASGI application under `/e2b/sandbox`: what runs inside an E2B sandbox (envd), served
for every Boxyard sandbox at one URL, the sandbox named by the request's headers.

Each request names its sandbox (`E2b-Sandbox-Id`, its Boxyard id) and carries the sandbox's
access token (`X-Access-Token`, `envd_token`): a token that is not that sandbox's is refused
(401) before the database is asked anything, an unknown sandbox is 404. The request is the
pipeline's call: the gate (`config.gate`, with this application as a `Door`) names the
sandbox's pipeline as its caller from the same headers, so it counts against the pipeline's
rate limit and runs in the pipeline's turn, as a call with its token would; a token that does
not match costs the gate no lookup, and the caller stays anonymous. The request is then handed
to the method the path names: Connect calls of `process.Process` and `filesystem.Filesystem`,
and the plain HTTP routes `/files` and `/health`. Port 49999 (`E2b-Sandbox-Port`) is the
code interpreter's (`interpreter`); it also takes the sandbox's traffic token
(`E2B-Traffic-Access-Token`), which the SDK sends on its context calls where it sends no
access token.
"""

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping

from boxyard.errors import BoxyardError, problem
from boxyard.threads import in_pool
from sandboxes.e2b.common import envd_token_matches, traffic_token_matches
from sandboxes.e2b.envd import files, filesystem, interpreter, process
from sandboxes.e2b.envd.calls import Call, Handler, actor_for
from sandboxes.e2b.envd.connect import (
    STATUSES,
    ConnectError,
    Receive,
    Scope,
    Send,
    from_boxyard,
    send_error,
    send_unary,
    streaming,
)
from sandboxes.models import Sandbox, State

PREFIX = "/e2b/sandbox"
SANDBOX_HEADER = b"e2b-sandbox-id"
TOKEN_HEADER = b"x-access-token"
TRAFFIC_HEADER = b"e2b-traffic-access-token"
PORT_HEADER = b"e2b-sandbox-port"
# The port envd listens on in an E2B sandbox; the SDKs name it on every call.
ENVD_PORT = "49983"
# Sandboxes whose pipeline the gate remembers (a sandbox never changes pipeline).
_KEPT_PIPELINES = 4096


def serves(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _sandbox(sandbox_id: uuid.UUID) -> Sandbox | None:
    return (
        Sandbox.objects.select_related("pipeline")
        .exclude(state=State.DESTROYED)
        .filter(pk=sandbox_id)
        .first()
    )


def _headers(scope: Scope) -> tuple[str, str]:
    """(the sandbox named, the access token given), either empty when missing."""
    headers: Mapping[bytes, bytes] = dict(scope.get("headers", ()))
    named = headers.get(SANDBOX_HEADER, b"").decode("latin-1").strip()
    return named, headers.get(TOKEN_HEADER, b"").decode("latin-1").strip()


def _port(scope: Scope) -> str:
    headers: Mapping[bytes, bytes] = dict(scope.get("headers", ()))
    return headers.get(PORT_HEADER, ENVD_PORT.encode()).decode("latin-1").strip()


def _opens(scope: Scope, named: str, token: str) -> bool:
    """Whether the request's tokens open the sandbox's port it names: envd's by the access
    token alone; the code interpreter's by it or by the traffic token, the only one the SDK
    sends with its context calls."""
    if envd_token_matches(named, token):
        return True
    if _port(scope) != interpreter.PORT:
        return False
    headers: Mapping[bytes, bytes] = dict(scope.get("headers", ()))
    traffic = headers.get(TRAFFIC_HEADER, b"").decode("latin-1").strip()
    return traffic_token_matches(named, traffic)


def _shape(scope: Scope) -> tuple[bool, bool]:
    """(a Connect call, its answer enveloped) of the request's path and content type."""
    path = scope["path"][len(PREFIX) :]
    rpc = "." in path.partition("/")[2].partition("/")[0]
    return rpc, rpc and streaming(scope)


class EnvdApplication:
    """`/e2b/sandbox/...`: the sandbox named and its token checked, then the route's handler.
    It is the gate's `Door` for these paths too: who calls, and refusals in envd's shape."""

    def __init__(self) -> None:
        self._pipelines: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): files.health,
            ("GET", "/files"): files.download,
            ("POST", "/files"): files.upload,
            **{("POST", f"/process.Process/{name}"): h for name, h in process.METHODS.items()},
            **{
                ("POST", f"/filesystem.Filesystem/{name}"): h
                for name, h in filesystem.METHODS.items()
            },
        }

    # --- the gate's Door ---------------------------------------------------------------------

    def serves(self, path: str) -> bool:
        return serves(path)

    def credential(self, scope: Scope) -> str | None:
        """The sandbox whose access token the request carries (no lookup), or None."""
        named, token = _headers(scope)
        return named if named and _opens(scope, named, token) else None

    def known(self, credential: str) -> int | None:
        with self._lock:
            return self._pipelines.get(credential)

    def pipeline_of(self, credential: str) -> int | None:
        try:
            sandbox_id = uuid.UUID(credential)
        except ValueError:
            return None
        pipeline = (
            Sandbox.objects.filter(pk=sandbox_id).values_list("pipeline_id", flat=True).first()
        )
        if pipeline is not None:
            with self._lock:
                self._pipelines[credential] = pipeline
                while len(self._pipelines) > _KEPT_PIPELINES:
                    self._pipelines.popitem(last=False)
        return pipeline

    async def refuse(self, scope: Scope, send: Send, error: BoxyardError) -> None:
        rpc, enveloped = _shape(scope)
        await _refuse(send, from_boxyard(error), rpc=rpc, enveloped=enveloped, said=error)

    # --- a call -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"][len(PREFIX) :]
        rpc, enveloped = _shape(scope)
        handler = self.routes.get((scope.get("method", ""), path))
        port = _port(scope)
        if port == interpreter.PORT:
            await self._interpreter(scope, receive, send, path)
            return
        if port != ENVD_PORT:
            # Another port of the sandbox (a server of its own): none is reachable this way,
            # said in the words by which the SDK tells a port that is not open.
            said = f"the sandbox's port is not open: {port[:10]}"
            await send_unary(send, {"code": 502, "message": said}, 502)
            return
        try:
            sandbox = await self._authenticate(scope)
            if handler is None:
                raise ConnectError("unimplemented", f"no method {scope.get('method')} {path}")
            await handler(Call(sandbox, actor_for(sandbox), scope, receive, send))
        except BoxyardError as error:
            await _refuse(send, from_boxyard(error), rpc=rpc, enveloped=enveloped, said=error)
        except ConnectError as error:
            if path == "/health" and error.code == "not_found":
                # The SDK's `is_running` reads a sandbox that "was not found" as not running.
                error = ConnectError("unavailable", f"{error.message}: it was not found")
                await send_unary(send, {"code": 502, "message": error.message}, 502)
                return
            await _refuse(send, error, rpc=rpc, enveloped=enveloped)

    async def _interpreter(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """Port 49999: the code interpreter (`interpreter`), its refusals as plain text."""
        try:
            sandbox = await self._authenticate(scope)
        except ConnectError as error:
            await interpreter.send_text(send, STATUSES.get(error.code, 400), error.message)
            return
        await interpreter.serve(Call(sandbox, actor_for(sandbox), scope, receive, send), path)

    async def _authenticate(self, scope: Scope) -> Sandbox:
        named, token = _headers(scope)
        if not named:
            raise ConnectError("not_found", "name the sandbox (E2b-Sandbox-Id)")
        if not _opens(scope, named, token):
            raise ConnectError(
                "unauthenticated",
                "X-Access-Token (or, on port 49999, E2B-Traffic-Access-Token) is missing or "
                "is not this sandbox's",
            )
        try:
            sandbox_id = uuid.UUID(named)
        except ValueError:
            raise ConnectError("not_found", f"no sandbox {named}") from None
        sandbox = await in_pool(_sandbox, sandbox_id)
        if sandbox is None:
            raise ConnectError("not_found", f"sandbox {named} not found")
        return sandbox


async def _refuse(
    send: Send,
    error: ConnectError,
    *,
    rpc: bool,
    enveloped: bool,
    said: BoxyardError | None = None,
) -> None:
    """An error as the caller reads them: Connect's for a call, E2B's envd API's (the status
    as `code`) for `/files` and `/health`; a 429 or 503 says when to try again (`Retry-After`)."""
    answer = problem(said) if said is not None else None
    wait = answer.headers.get("Retry-After") if answer is not None else None
    headers = [(b"retry-after", wait.encode())] if wait else []
    if rpc:
        await send_error(send, error, enveloped=enveloped, headers=headers)
        return
    status = STATUSES.get(error.code, 400)
    await send_unary(send, {"code": status, "message": error.message}, status, headers)
