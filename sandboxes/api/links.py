"""Signed links (`services/files/links.py`): the bot API's call that makes one, and the route
that serves one to whoever holds it, with no token: `GET`/`HEAD` download the file (ranges
and all, as `files/raw` does), `PUT` uploads it (streamed as it arrives); any other method is
405 with the link's methods in `Allow`."""

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import Router
from ninja.responses import Status

from boxyard.errors import BoxyardError, problem
from config.bodies import content_length, pieces
from sandboxes import selectors, services
from sandboxes.api.common import CHANGES, principal, responds
from sandboxes.downloads import file_response
from sandboxes.schemas.files import LinkIn, LinkOut

router = Router(tags=["sandboxes"])


@router.post(
    "/sandboxes/{sandbox_id}/files/links",
    response=responds(LinkOut, CHANGES, status=201),
    summary="Make a link that downloads or uploads one file without the token",
)
def create_link(request: HttpRequest, sandbox_id: str, body: LinkIn) -> Status[dict[str, Any]]:
    who = principal(request)
    sandbox = selectors.sandbox_for(who, sandbox_id)
    link = services.create_link(
        sandbox,
        body.path,
        who.actor,
        method=body.method,
        expires_in_seconds=body.expires_in_seconds,
        holder=body.holder,
        epoch=body.epoch,
    )
    return Status(
        201,
        {
            "url": request.build_absolute_uri(f"/links/{link.token}"),
            "path": link.path,
            "method": link.method,
            "expires_at": link.expires_at,
        },
    )


@csrf_exempt  # the link is the credential; no cookie is read
def serve_link(request: HttpRequest, token: str) -> HttpResponseBase:
    if request.method not in ("GET", "HEAD", "PUT"):
        return method_not_allowed(request, services.link_methods(token))
    try:
        used = services.use_link(token, request.method)
        if used.method == "GET":
            return file_response(request, used.sandbox, used.path, activity=False)
        written = services.write_file(
            used.sandbox,
            used.path,
            pieces(request),
            used.actor,
            size=content_length(request),
            holder=used.holder,
            epoch=used.epoch,
        )
        return JsonResponse(
            {"ok": True, "path": written.path, "size_bytes": written.size_bytes,
             "sha256": written.sha256},
            status=201,
        )  # fmt: skip
    except BoxyardError as error:
        answer = problem(error)
        response: HttpResponse = JsonResponse(answer.body, status=answer.status)
        for name, value in answer.headers.items():
            response[name] = value
        return response


def method_not_allowed(request: HttpRequest, allowed: tuple[str, ...]) -> HttpResponse:
    """405 with `Allow`: the methods this link takes (RFC 9110 15.5.6)."""
    methods = ", ".join(allowed)
    response = JsonResponse(
        {
            "error": {
                "code": "method_not_allowed",
                "message": f"this link takes {methods}, not {request.method}",
            }
        },
        status=405,
    )
    response["Allow"] = methods
    return response
