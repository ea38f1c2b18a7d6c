"""The bot API's routes for files under /workspace: write, read, list, delete."""

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from sandboxes import selectors, services
from sandboxes.api.common import LEASED, WRITES, principal, responds
from sandboxes.schemas.files import (
    DeleteOut,
    DeleteQuery,
    ListOut,
    ListQuery,
    ReadOut,
    ReadQuery,
    WriteIn,
    WriteOut,
    list_out,
    read_out,
)

router = Router(tags=["sandboxes"])


@router.put(
    "/sandboxes/{sandbox_id}/files", response=responds(WriteOut, WRITES), summary="Write a file"
)
def write_file(request: HttpRequest, sandbox_id: str, body: WriteIn) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    size, data = services.decoded_contents(body.contents, body.contents_b64)
    request.__dict__.pop("_body", None)  # parsed: the raw body need not wait for the write
    written = services.write_file(
        sandbox,
        body.path,
        data,
        who.actor,
        size=size,
        mode=body.mode,
        overwrite=body.overwrite,
        holder=body.holder,
        epoch=body.epoch,
    )
    return {"ok": True, "path": written.path, "size_bytes": written.size_bytes}


@router.get("/sandboxes/{sandbox_id}/files", response=responds(ReadOut), summary="Read a file")
def read_file(request: HttpRequest, sandbox_id: str, query: Query[ReadQuery]) -> dict[str, Any]:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    content = services.read_file(sandbox, query.path, query.max_bytes)
    return read_out(services.workspace_path(query.path), content)


@router.get(
    "/sandboxes/{sandbox_id}/files/list", response=responds(ListOut), summary="List a directory"
)
def list_files(request: HttpRequest, sandbox_id: str, query: Query[ListQuery]) -> dict[str, Any]:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    entries, truncated = services.list_files(sandbox, query.path, query.recursive)
    return list_out(entries, truncated)


@router.delete(
    "/sandboxes/{sandbox_id}/files", response=responds(DeleteOut, LEASED), summary="Delete a file"
)
def delete_file(request: HttpRequest, sandbox_id: str, query: Query[DeleteQuery]) -> dict[str, Any]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    deleted = services.delete_file(
        sandbox,
        query.path,
        who.actor,
        recursive=query.recursive,
        holder=query.holder,
        epoch=query.epoch,
    )
    return {"ok": True, "deleted": deleted}
