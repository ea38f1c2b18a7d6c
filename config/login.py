"""Log-in throttling (django-axes, configured in settings): whose address a log-in comes from,
and the page a locked-out admin sees."""

from typing import Any

from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


def client_address(request: HttpRequest) -> str | None:
    """The address a log-in comes from.

    Behind a reverse proxy (BOXYARD_BEHIND_PROXY) every request comes from the proxy, so it
    is the last address of X-Forwarded-For: the one the proxy itself added. Earlier ones are
    whatever the client sent, and a client choosing its own address would escape the lockout.
    """
    if settings.BOXYARD_BEHIND_PROXY:
        last: str = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[-1].strip()
        if last:
            return last
    return request.META.get("REMOTE_ADDR")


def locked_out(request: HttpRequest, *_: Any) -> HttpResponse:
    """429 and the log-in page's look, saying who is locked out and for how long.

    (Axes passes the view's own response and the credentials too, in an order that depends
    on the handler; neither is needed here.)
    """
    cool_off = get_cool_off(request)
    now = timezone.now()
    context = {
        "username": get_client_username(request) or "",
        # Every refused attempt starts the cool-off again (axes' default), so it ends then.
        "now": now,
        "until": now + cool_off if cool_off else None,
    }
    return render(request, "registration/locked_out.html", context, status=429)
