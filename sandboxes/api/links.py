"""Signed links (`services/files/links.py`): the bot API's call that makes one, and the route
that serves one to whoever holds it, with no token: `GET`/`HEAD` download the file (ranges
and all, as `files/raw` does), `PUT` uploads it (streamed as it arrives); any other method is
405 with the link's methods in `Allow`."""

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import Router

from boxyard.errors import BoxyardError, problem
from config.bodies import content_length, pieces
from sandboxes import services
from sandboxes.api.common import CHANGES, Answered, answer, route
from sandboxes.downloads import file_response
from sandboxes.operations import Call, files
from sandboxes.schemas.files import LinkIn, written_out

router = Router(tags=["sandboxes"])


@route(router, files.LINK, CHANGES)
def create_link(request: HttpRequest, sandbox_id: str, body: LinkIn) -> Answered:
    return answer(request, files.LINK, Call(body, sandbox_id))


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
        return JsonResponse(written_out(written), status=201)
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
