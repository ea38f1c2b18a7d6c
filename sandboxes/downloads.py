"""A file of a sandbox as an HTTP response, for every route that serves one (the bot API, the
dashboard), and a directory's archive: streamed, with its length, type, ETag and Last-Modified, conditional requests
(304, 412), one byte range (206, 416) so that an interrupted download resumes, and HEAD.

A sandbox's file is whatever its code wrote, so it is served as a download that can never
act as a page of Boxyard's: `attachment`, no type sniffing, and a policy that sandboxes it
into an origin of its own even if a browser is led to show it.
"""

import re

from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.utils.cache import get_conditional_response
from django.utils.http import content_disposition_header, http_date

from boxyard.errors import N_, RangeNotSatisfiable
from boxyard.threads import pulled
from sandboxes import services
from sandboxes.models import Sandbox
from sandboxes.services.files import Archive, FileInfo

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
# A file's pieces are taken from the sandbox this many at a time (about 1 MiB) per hop
# between the request threads and the event loop.
PIECES_PER_HOP = 16
_POLICY = "sandbox; default-src 'none'"


def file_response(
    request: HttpRequest, sandbox: Sandbox, path: str, *, activity: bool = True
) -> HttpResponseBase:
    """GET or HEAD of the file at `path`; `activity`: the read is the sandbox's activity (a
    signed link's is not)."""
    wants_range = "Range" in request.headers
    if request.method == "HEAD" or wants_range:
        info = services.stat_file(sandbox, path, activity=activity)
        unchanged = get_conditional_response(request, etag=info.etag, last_modified=info.modified)
        if unchanged is not None:
            return _described(unchanged, info)
        if request.method == "HEAD":
            response = _described(HttpResponse(), info)
            response["Content-Length"] = str(info.size_bytes)
            return response
        wanted = _range(request, info)
        if wanted is not None:
            start, length = wanted
            _, stream = services.open_file_stream(
                sandbox, path, start=start, length=length, expect=info, activity=activity
            )
            response = StreamingHttpResponse(
                pulled(stream, stream.close, batch=PIECES_PER_HOP), status=206
            )
            response["Content-Range"] = f"bytes {start}-{start + length - 1}/{info.size_bytes}"
            response["Content-Length"] = str(length)
            return _described(response, info)
        info, stream = services.open_file_stream(sandbox, path, expect=info, activity=activity)
    else:
        info, stream = services.open_file_stream(sandbox, path, activity=activity)
        unchanged = get_conditional_response(request, etag=info.etag, last_modified=info.modified)
        if unchanged is not None:
            stream.close()
            return _described(unchanged, info)
    response = StreamingHttpResponse(pulled(stream, stream.close, batch=PIECES_PER_HOP))
    response["Content-Length"] = str(info.size_bytes)
    return _described(response, info)


def archive_response(archive: Archive) -> StreamingHttpResponse:
    """A directory's archive, sent as it is made (its length is not known before its end)."""
    stream = archive.stream
    response = StreamingHttpResponse(
        pulled(stream, stream.close, batch=PIECES_PER_HOP), content_type=archive.content_type
    )
    _attachment(response, archive.filename)
    return response


def _range(request: HttpRequest, info: FileInfo) -> tuple[int, int] | None:
    """(start, length) of the one range asked for; None for the whole file (no range, a form
    this server does not serve, several ranges, an invalid range such as `bytes=5-3`, which
    RFC 9110 says to ignore, or an If-Range that no longer holds)."""
    if_range = request.headers.get("If-Range")
    if if_range is not None and if_range != info.etag:
        return None
    match = _RANGE.fullmatch(request.headers.get("Range", "").replace(" ", ""))
    if match is None or match.group(1) == match.group(2) == "":
        return None
    size = info.size_bytes
    first, last = match.group(1), match.group(2)
    if first == "":  # the last N bytes
        length = min(int(last), size)
        if length == 0:
            raise RangeNotSatisfiable(
                N_("%(path)s has %(size)s bytes", path=info.path, size=size), size=size
            )
        return size - length, length
    start = int(first)
    if last and int(last) < start:  # invalid, not unsatisfiable: ignored (RFC 9110 14.2)
        return None
    end = min(int(last), size - 1) if last else size - 1
    if start >= size or end < start:
        raise RangeNotSatisfiable(
            N_(
                "the range starts at %(start)s but %(path)s has %(size)s bytes",
                start=start,
                path=info.path,
                size=size,
            ),
            size=size,
        )
    return start, end - start + 1


def _described(response: HttpResponseBase, info: FileInfo) -> HttpResponseBase:
    response["Content-Type"] = info.content_type
    response["ETag"] = info.etag
    response["Last-Modified"] = http_date(info.modified)
    response["Accept-Ranges"] = "bytes"
    response["Cache-Control"] = "private, no-cache"
    _attachment(response, info.path.rsplit("/", 1)[-1] or "download")
    return response


def _attachment(response: HttpResponseBase, filename: str) -> None:
    disposition = content_disposition_header(True, filename)
    if disposition:
        response["Content-Disposition"] = disposition
    response["Content-Security-Policy"] = _POLICY
    response["X-Content-Type-Options"] = "nosniff"
