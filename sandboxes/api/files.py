"""The bot API's routes for files under /workspace: write, read, list, delete; each runs its
operation's record (`sandboxes.operations.files`)."""

from django.http import HttpRequest
from ninja import Query, Router

from sandboxes.api.common import LEASED, READS, WRITES, Answered, answer, route
from sandboxes.operations import Call, files
from sandboxes.schemas.files import DeleteQuery, ListQuery, ReadQuery, WriteIn

router = Router(tags=["sandboxes"])


@route(router, files.WRITE, WRITES)
def write_file(request: HttpRequest, sandbox_id: str, body: WriteIn) -> Answered:
    request.__dict__.pop("_body", None)  # parsed: the raw body need not wait for the write
    return answer(request, files.WRITE, Call(body, sandbox_id))


@route(router, files.READ, READS)
def read_file(request: HttpRequest, sandbox_id: str, query: Query[ReadQuery]) -> Answered:
    return answer(request, files.READ, Call(query, sandbox_id))


@route(router, files.LIST, READS)
def list_files(request: HttpRequest, sandbox_id: str, query: Query[ListQuery]) -> Answered:
    return answer(request, files.LIST, Call(query, sandbox_id))


@route(router, files.DELETE, LEASED)
def delete_file(request: HttpRequest, sandbox_id: str, query: Query[DeleteQuery]) -> Answered:
    return answer(request, files.DELETE, Call(query, sandbox_id))
