"""The bot API's byte streams of files: an upload of any size (the body goes to the sandbox as
it arrives: config.bodies), a download with ranges (sandboxes.downloads), and directories as
archives both ways."""

from typing import Any

from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from ninja import Query, Router
from ninja.responses import Status

from config.bodies import content_length, pieces
from sandboxes import selectors, services
from sandboxes.api.common import DOWNLOADS, READS, UPLOADS, principal, responds
from sandboxes.downloads import archive_response, file_response
from sandboxes.schemas.files import (
    ArchiveQuery,
    ExtractOut,
    ExtractQuery,
    RawReadQuery,
    RawWriteQuery,
    WriteOut,
    written_out,
)
from sandboxes.services.files import FORMATS

router = Router(tags=["sandboxes"])


@router.put(
    "/sandboxes/{sandbox_id}/files/raw",
    response=responds(WriteOut, UPLOADS, status=201),
    summary="Upload a file as a byte stream",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
)
def put_raw(
    request: HttpRequest, sandbox_id: str, query: Query[RawWriteQuery]
) -> Status[dict[str, Any]]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    written = services.write_file(
        sandbox,
        query.path,
        pieces(request),
        who.actor,
        size=content_length(request),
        mode=query.mode,
        overwrite=query.overwrite,
        holder=query.holder,
        epoch=query.epoch,
    )
    return Status(201, written_out(written))


@router.api_operation(
    ["GET", "HEAD"],
    "/sandboxes/{sandbox_id}/files/raw",
    response={**responds(None, DOWNLOADS), 206: None, 304: None},
    summary="Download a file as a byte stream (Range, If-None-Match and HEAD understood)",
    openapi_extra={
        "responses": {
            200: {
                "description": "The file's bytes, with Content-Length, ETag and Last-Modified; "
                "the type is guessed from the file's name.",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            },
            206: {
                "description": "The one range asked for, with Content-Range (a range that "
                "ends before it starts is ignored: 200 with the whole file).",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            },
            304: {"description": "Not modified (If-None-Match, If-Modified-Since)."},
        }
    },
)
def get_raw(request: HttpRequest, sandbox_id: str, query: Query[RawReadQuery]) -> HttpResponseBase:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return file_response(request, sandbox, query.path)


@router.get(
    "/sandboxes/{sandbox_id}/files/archive",
    response=responds(None, READS),
    summary="Download a directory as tar, tar.gz or zip",
    openapi_extra={
        "responses": {
            200: {
                "description": "The archive, made as it is sent, of the format asked for.",
                "content": {
                    content_type: {"schema": {"type": "string", "format": "binary"}}
                    for content_type, _ in FORMATS.values()
                },
            }
        }
    },
)
def get_archive(
    request: HttpRequest, sandbox_id: str, query: Query[ArchiveQuery]
) -> StreamingHttpResponse:
    sandbox = selectors.sandbox_for(principal(request), sandbox_id)
    return archive_response(services.open_archive(sandbox, query.path, query.format))


@router.put(
    "/sandboxes/{sandbox_id}/files/archive",
    response=responds(ExtractOut, UPLOADS, status=201),
    summary="Extract an uploaded archive into a directory",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
)
def put_archive(
    request: HttpRequest, sandbox_id: str, query: Query[ExtractQuery]
) -> Status[dict[str, Any]]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    extracted = services.extract_archive(
        sandbox,
        query.path,
        pieces(request),
        who.actor,
        size=content_length(request),
        format=query.format,
        holder=query.holder,
        epoch=query.epoch,
    )
    return Status(
        201,
        {
            "ok": True,
            "path": extracted.path,
            "entries": extracted.entries,
            "size_bytes": extracted.size_bytes,
        },
    )
