"""The ASGI application under `/e2b/sandbox`: what runs inside an E2B sandbox (envd), served
for every Boxyard sandbox at one URL, the sandbox named by the request's headers.

Each request names its sandbox (`E2b-Sandbox-Id`, its Boxyard id) and carries the sandbox's
access token (`X-Access-Token`, `envd_token`): a token that is not that sandbox's is refused
(401) before the database is asked anything, an unknown sandbox is 404. The request then runs
in the turn of the sandbox's pipeline, as a call with its token would, and is handed to the
method the path names: Connect calls of `process.Process` and `filesystem.Filesystem`, and the
plain HTTP routes `/files` and `/health`.
"""

import uuid
from collections.abc import Mapping

from boxyard.errors import BoxyardError
from boxyard.slots import CALLER
from boxyard.threads import in_pool
from sandboxes.e2b.common import envd_token_matches
from sandboxes.e2b.envd import files, filesystem, process
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
PORT_HEADER = b"e2b-sandbox-port"
# The port envd listens on in an E2B sandbox; the SDKs name it on every call.
ENVD_PORT = "49983"


def serves(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _sandbox(sandbox_id: uuid.UUID) -> Sandbox | None:
    return (
        Sandbox.objects.select_related("pipeline")
        .exclude(state=State.DESTROYED)
        .filter(pk=sandbox_id)
        .first()
    )


class EnvdApplication:
    """`/e2b/sandbox/...`: the sandbox named and its token checked, then the route's handler."""

    def __init__(self) -> None:
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"][len(PREFIX) :]
        rpc = "." in path.partition("/")[2].partition("/")[0]
        enveloped = rpc and streaming(scope)
        handler = self.routes.get((scope.get("method", ""), path))
        port = dict(scope.get("headers", ())).get(PORT_HEADER, ENVD_PORT.encode())
        if port.decode("latin-1").strip() != ENVD_PORT:
            # Another port of the sandbox (a server of its own): none is reachable this way,
            # said in the words by which the SDK tells a port that is not open.
            said = f"the sandbox's port is not open: {port.decode('latin-1')[:10]}"
            await send_unary(send, {"code": 502, "message": said}, 502)
            return
        try:
            sandbox = await self._authenticate(scope)
            if handler is None:
                raise ConnectError("unimplemented", f"no method {scope.get('method')} {path}")
            token = CALLER.set(f"pipeline:{sandbox.pipeline_id}")
            try:
                await handler(Call(sandbox, actor_for(sandbox), scope, receive, send))
            finally:
                CALLER.reset(token)
        except BoxyardError as error:
            await _refuse(send, from_boxyard(error), rpc=rpc, enveloped=enveloped)
        except ConnectError as error:
            if path == "/health" and error.code == "not_found":
                # The SDK's `is_running` reads a sandbox that "was not found" as not running.
                error = ConnectError("unavailable", f"{error.message}: it was not found")
                await send_unary(send, {"code": 502, "message": error.message}, 502)
                return
            await _refuse(send, error, rpc=rpc, enveloped=enveloped)

    async def _authenticate(self, scope: Scope) -> Sandbox:
        headers: Mapping[bytes, bytes] = dict(scope.get("headers", ()))
        named = headers.get(SANDBOX_HEADER, b"").decode("latin-1").strip()
        token = headers.get(TOKEN_HEADER, b"").decode("latin-1").strip()
        if not named:
            raise ConnectError("not_found", "name the sandbox (E2b-Sandbox-Id)")
        if not envd_token_matches(named, token):
            raise ConnectError(
                "unauthenticated",
                "X-Access-Token is missing or is not this sandbox's access token",
            )
        try:
            sandbox_id = uuid.UUID(named)
        except ValueError:
            raise ConnectError("not_found", f"no sandbox {named}") from None
        sandbox = await in_pool(_sandbox, sandbox_id)
        if sandbox is None:
            raise ConnectError("not_found", f"sandbox {named} not found")
        return sandbox


async def _refuse(send: Send, error: ConnectError, *, rpc: bool, enveloped: bool) -> None:
    """An error as the caller reads them: Connect's for a call, E2B's envd API's (the status
    as `code`) for `/files` and `/health`."""
    if rpc:
        await send_error(send, error, enveloped=enveloped)
        return
    status = STATUSES.get(error.code, 400)
    await send_unary(send, {"code": status, "message": error.message}, status)
