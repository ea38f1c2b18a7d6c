"""The bot API's routes for what runs in a sandbox besides its execs: shell sessions and the
pipeline's managed processes. Each runs its operation's record (`sandboxes.operations.shells`).
"""

from django.http import HttpRequest
from ninja import Query, Router

from sandboxes.api.common import CHANGES, LEASED, READS, Answered, answer, route
from sandboxes.operations import Call, shells
from sandboxes.schemas import Fencing, FencingQuery
from sandboxes.schemas.shells import ProcessOutputQuery, SessionIn, SessionToEnd, StdinIn

router = Router(tags=["sandboxes"])


@route(router, shells.LIST_SESSIONS, READS)
def list_sessions(request: HttpRequest, sandbox_id: str) -> Answered:
    return answer(request, shells.LIST_SESSIONS, Call(None, sandbox_id))


@route(router, shells.CREATE_SESSION, CHANGES)
def create_session(request: HttpRequest, sandbox_id: str, body: SessionIn) -> Answered:
    return answer(request, shells.CREATE_SESSION, Call(body, sandbox_id))


@route(router, shells.DELETE_SESSION, LEASED)
def delete_session(
    request: HttpRequest, sandbox_id: str, query: Query[FencingQuery], name: SessionToEnd
) -> Answered:
    return answer(request, shells.DELETE_SESSION, Call(query, sandbox_id, name=name))


@route(router, shells.LIST_PROCESSES, READS)
def list_processes(request: HttpRequest, sandbox_id: str) -> Answered:
    return answer(request, shells.LIST_PROCESSES, Call(None, sandbox_id))


@route(router, shells.PROCESS_STDIN, CHANGES)
def process_stdin(request: HttpRequest, sandbox_id: str, name: str, body: StdinIn) -> Answered:
    return answer(request, shells.PROCESS_STDIN, Call(body, sandbox_id, name=name))


@route(router, shells.PROCESS_OUTPUT, READS)
def process_output(
    request: HttpRequest, sandbox_id: str, name: str, query: Query[ProcessOutputQuery]
) -> Answered:
    return answer(request, shells.PROCESS_OUTPUT, Call(query, sandbox_id, name=name))


@route(router, shells.PROCESS_RESTART, CHANGES)
def process_restart(request: HttpRequest, sandbox_id: str, name: str, body: Fencing) -> Answered:
    return answer(request, shells.PROCESS_RESTART, Call(body, sandbox_id, name=name))
