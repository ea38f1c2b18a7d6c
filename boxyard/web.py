"""What every dashboard view shares: who may see it, and who the admin is to the services."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _

from boxyard.actors import Actor


def is_admin(user: Any) -> bool:
    return bool(user is not None and user.is_active and user.is_staff)


def staff_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The dashboard is for staff only: others are sent to log in (or refused, if logged in)."""

    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if is_admin(request.user):
            return view(request, *args, **kwargs)
        if request.user.is_authenticated:
            raise PermissionDenied("this dashboard is for staff only")  # the site's 403 page
        return redirect_to_login(request.get_full_path())

    return checked


def parse_int(value: object) -> int | None:
    """An integer a browser sent (a query parameter, a websocket message's field), or None."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # "x", "1.5", Infinity
        return None


def admin_actor(request: HttpRequest) -> Actor:
    return Actor.admin(request.user)


class StaffLoginForm(AuthenticationForm):
    """Only administrators log in to the dashboard."""

    def confirm_login_allowed(self, user: Any) -> None:
        super().confirm_login_allowed(user)
        if not is_admin(user):
            raise forms.ValidationError(
                _("This account is not an administrator's."), code="not_staff"
            )


def sent_from(request: HttpRequest, default: str) -> str:
    """The page a form was sent from (its `next`), if it is a page of this site; else
    `default`."""
    wanted = request.POST.get("next") or ""
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return wanted
    return default
