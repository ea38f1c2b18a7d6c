"""The dashboard's Docker host pages: the hosts with their capacity and use, one host's page
(its facts, its form, its events), adding one, and draining and undraining.

Every change calls one of `hosts.services` with the admin as its actor; the services record
the event and tell every open Hosts page (`hosts.consumers`)."""

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from boxyard.errors import BoxyardError, InvalidInput, Message, NotFound
from boxyard.web import admin_actor, sent_from, staff_required
from hosts import dashboard, services
from hosts.forms import HostForm
from hosts.models import DockerHost
from sandboxes.services.moving import move_all_later


@staff_required
@require_GET
def host_list(request: HttpRequest) -> HttpResponse:
    return render(request, "hosts/list.html", {"nav": "hosts", "rows": dashboard.host_rows()})


@staff_required
@require_http_methods(["GET", "POST"])
def host_edit(request: HttpRequest, name: str | None = None) -> HttpResponse:
    """A host's page and its form (`name`), or the form that adds one."""
    host = _host(name) if name else None
    form = HostForm(request.POST or None, host=host)
    if request.method == "POST" and form.is_valid():
        values = form.values()
        actor = admin_actor(request)
        try:
            if host is None:
                saved = services.add_host(actor, form.cleaned_data["name"], **values)
                done = _(
                    "Host %(host)s added: new sandboxes may be placed there once a health check "
                    "reaches its engine."
                )
            elif values:
                # A row of its own: a refusal leaves the one this page shows as it is stored.
                saved = services.edit_host(_host(host.name), actor, **values)
                done = _("Host %(host)s saved.")
            else:
                saved, done = host, _("Nothing changed on %(host)s.")
        except InvalidInput as error:
            form.add_error(error.field if error.field in form.fields else None, _said(error))
        except BoxyardError as error:
            form.add_error(None, error.localized())
        else:
            messages.success(request, done % {"host": saved.name})
            return redirect("host", name=saved.name)
    context: dict[str, Any] = {"nav": "hosts", "form": form, "host": host}
    if host is not None:
        context.update(dashboard.host_page(host.name) or {})
    return render(request, "hosts/form.html", context)


_STATES = ("drain", "undrain", "move-all", "remove")


@staff_required
@require_POST
def host_state(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Drain the host (no new sandbox goes there), make it active again, have its sandboxes
    moved elsewhere (a draining host), or remove it (one that holds none), as this admin."""
    if action not in _STATES:
        raise Http404(f"no action {action}")
    host = _host(name)
    try:
        if action == "remove":
            services.remove_host(host, admin_actor(request))
            messages.success(request, _("Host %(host)s removed.") % {"host": host.name})
            return redirect("hosts")
        if action == "drain":
            services.drain(host, admin_actor(request))
            row = dashboard.host_row(host.name)
            count = row.load.sandboxes if row is not None else 0
            done = ngettext(
                "%(host)s is draining: no new sandbox is placed there; the %(count)s sandbox on "
                "it stays until it is closed.",
                "%(host)s is draining: no new sandbox is placed there; the %(count)s sandboxes "
                "on it stay until they are closed.",
                count,
            ) % {"host": host.name, "count": count}
        elif action == "move-all":
            count = move_all_later(host, admin_actor(request))
            done = ngettext(
                "The %(count)s sandbox of %(host)s is moving to other hosts; the fleet shows "
                "where it goes.",
                "The %(count)s sandboxes of %(host)s are moving to other hosts, one at a time; "
                "the fleet shows where each goes.",
                count,
            ) % {"host": host.name, "count": count}
        else:
            services.undrain(host, admin_actor(request))
            done = _("%(host)s is active: new sandboxes may be placed there again.") % {
                "host": host.name
            }
        messages.success(request, done)
    except BoxyardError as error:
        messages.error(request, error.localized())
    return redirect(_back(request))


def _host(name: str) -> DockerHost:
    try:
        return services.find(name)
    except NotFound:
        raise Http404("no such host") from None


def _said(error: InvalidInput) -> str:
    """An invalid input's message without its field's name, for the form to show beside the
    field (in the admin's language)."""
    words = error.words.params.get("message") if isinstance(error.words, Message) else None
    if isinstance(words, Message | BoxyardError):
        return words.localized()
    return str(words) if words else error.localized()


def _back(request: HttpRequest) -> str:
    """The page the form was sent from (`next`), if it is a page of this site."""
    return sent_from(request, reverse("hosts"))
