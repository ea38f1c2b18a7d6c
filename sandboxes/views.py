"""The dashboard's sandbox pages (fleet, one sandbox, sessions) and the Prometheus metrics.

Function views: a full page, or for an htmx request the partial it swaps in. Every change
calls one service with the admin as its actor; what changed reaches every open dashboard
through the consumers, never through the view's own answer alone.
"""

import posixpath
import secrets
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import (
    require_GET,
    require_http_methods,
    require_POST,
    require_safe,
)

from boxyard.errors import BoxyardError, NotFound, problem
from boxyard.web import admin_actor, parse_int, sent_from, staff_required
from config.bodies import content_length, pieces
from hosts.dashboard import host_names
from pipelines.models import Pipeline
from sandboxes import dashboard, metrics, selectors, services
from sandboxes import fleet as fleet_view
from sandboxes.charts import fleet_charts
from sandboxes.downloads import archive_response, file_response
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.schemas.files import written_out
from sandboxes.services import pruning


@staff_required
@require_GET
def fleet(request: HttpRequest) -> HttpResponse:
    chosen = fleet_view.FleetFilter.from_query(request.GET)
    counts = fleet_view.state_counts()
    context = {
        "nav": "fleet",
        "filter": chosen,
        "page": fleet_view.fleet_page(_admin(request), chosen),
        "counts": counts,
        "cards": fleet_view.fleet_cards(counts),
        "totals": metrics.snapshot()["overall"],
        "stored": pruning.stored(),
        "charts": fleet_charts(chosen.pipeline),
        "pipelines": Pipeline.objects.order_by("slug").values_list("slug", flat=True),
        "hosts": host_names(),
        "states": [state for state in State if state != State.DESTROYED],
    }
    return render(request, "sandboxes/fleet.html", context)


@staff_required
@require_POST
def destroy_many(request: HttpRequest) -> HttpResponse:
    """Bulk destroy: each sandbox is destroyed by a worker, as this admin; the rows change as
    they go."""
    chosen = [pk for pk in map(_uuid, request.POST.getlist("sandbox")) if pk is not None]
    if not chosen:
        messages.info(request, _("No sandbox was selected: nothing was destroyed."))
        return redirect(_back_to_fleet(request))
    count = services.close_later(
        chosen, admin_actor(request), delete_workspace=True, reason=StopReason.ADMIN
    )
    messages.info(request, _("%(count)d sandboxes are being destroyed.") % {"count": count})
    return redirect(_back_to_fleet(request))


@staff_required
@require_GET
def sandbox_detail(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    sandbox = _sandbox(request, sandbox_id)
    context = {"nav": "fleet", **dashboard.sandbox_page(sandbox, request.user.get_username())}
    return render(request, "sandboxes/sandbox.html", context)


_ACTIONS = ("takeover", "release", "renew", "restart", "reset", "move", "destroy", "stop")


@staff_required
@require_POST
def sandbox_action(request: HttpRequest, sandbox_id: UUID, action: str) -> HttpResponse:
    """Take over, release, renew, restart, reset, move, stop or destroy, as this admin."""
    if action not in _ACTIONS:
        raise Http404(f"no action {action}")
    sandbox = _sandbox(request, sandbox_id)
    actor = admin_actor(request)
    key = sandbox.scope_key
    try:
        if action == "takeover":
            services.takeover_lease(sandbox, actor, reason=request.POST.get("reason", "")[:200])
            done = _(
                "You hold the lease of %(key)s: the bot's changes are refused until you release it."
            ) % {"key": key}
        elif action == "release":
            services.release_lease(sandbox, actor, force=True)
            done = _("The lease of %(key)s is free: the next caller takes it.") % {"key": key}
        elif action == "renew":
            services.renew_lease(sandbox, actor, holder=str(actor))
            done = _("Your lease of %(key)s is renewed.") % {"key": key}
        elif action == "restart":
            services.restart_sandbox(sandbox, actor)
            done = _("%(key)s started again; its workspace is as it was.") % {"key": key}
        elif action == "move":
            target = services.move_later(sandbox, request.POST.get("to") or None, actor)
            done = (
                _("%(key)s is moving to %(host)s; the page follows it.")
                % {"key": key, "host": target}
                if target
                else _("%(key)s is moving to the host with most room; the page follows it.")
                % {"key": key}
            )
        elif action == "reset":
            reset = services.reset_sandbox(
                sandbox, actor, reason=request.POST.get("reason", "")[:200], force=True
            )
            done = _("Reset: %(count)s processes ended.") % {"count": reset.killed}
        else:
            services.close_sandbox(
                sandbox,
                actor,
                delete_workspace=action == "destroy",
                reason=StopReason.ADMIN,
                force=True,
            )
            done = (
                _("%(key)s is destroyed, with its workspace.")
                if action == "destroy"
                else _("%(key)s is stopped; its workspace is kept.")
            ) % {"key": key}
        messages.success(request, done)
    except BoxyardError as error:
        messages.error(request, error.localized())
    return redirect("sandbox", sandbox_id=sandbox.pk)


@staff_required
@require_GET
def sessions(request: HttpRequest) -> HttpResponse:
    text = (request.GET.get("q") or "").strip()[:200]
    found = list(dashboard.find_sessions(_admin(request), text)[:100])
    return render(
        request, "sandboxes/sessions.html", {"nav": "sessions", "q": text, "found": found}
    )


def _back_to_fleet(request: HttpRequest) -> str:
    """The fleet view the form was sent from (`next`), if it is a page of this site."""
    return sent_from(request, reverse("fleet"))


def _sandbox(request: HttpRequest, sandbox_id: object) -> Sandbox:
    """The sandbox, through the one permission-checked fetch (an admin sees every one)."""
    try:
        return selectors.sandbox_for(_admin(request), sandbox_id)
    except NotFound:
        raise Http404("no such sandbox") from None


def _admin(request: HttpRequest) -> selectors.Principal:
    who = selectors.principal_for_user(request.user)
    assert who is not None  # staff_required let only an admin in
    return who


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


# --- Prometheus ----------------------------------------------------------------------------------


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Every metric in Prometheus's text format, for a scraper holding `BOXYARD_METRICS_TOKEN`
    (`Authorization: Bearer ...`) or a logged-in admin; nobody else."""
    if not _may_scrape(request):
        response = HttpResponse(
            "a metrics token or an admin session is required\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(
        metrics.flush_and_prometheus_text(), content_type="text/plain; version=0.0.4; charset=utf-8"
    )


def _may_scrape(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    expected = settings.BOXYARD_METRICS_TOKEN
    scheme, _space, given = request.headers.get("Authorization", "").partition(" ")
    return (
        bool(expected)
        and scheme.lower() == "bearer"
        and secrets.compare_digest(given.strip().encode(), expected.encode())
    )


# --- files --------------------------------------------------------------------------------------


@staff_required
@require_GET
def files(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    """A directory of the workspace (the partial the file browser swaps in), or a text file."""
    sandbox = _sandbox(request, sandbox_id)
    path = request.GET.get("path") or "/workspace"
    context: dict[str, Any] = {
        "sandbox": sandbox,
        "path": path,
        "parent": "/workspace",
        "url": request.get_full_path(),  # what the browser fetches again when files change
    }
    try:
        path = context["path"] = services.workspace_path(path)
        context["parent"] = posixpath.dirname(path)
        if request.GET.get("view"):
            content = services.read_file(sandbox, path, 256 * 1024)
            context["text"] = content.data.decode("utf-8", errors="replace")
            context["truncated"] = content.truncated
            context["parent"] = posixpath.dirname(path)
        else:
            entries, truncated = services.list_files(sandbox, path)
            context["entries"] = entries
            context["truncated"] = truncated
    except BoxyardError as error:
        context["error"] = error.localized()
    return render(request, "sandboxes/_files.html", context)


@staff_required
@require_safe
def download(request: HttpRequest, sandbox_id: UUID) -> HttpResponseBase:
    sandbox = _sandbox(request, sandbox_id)
    try:
        return file_response(request, sandbox, request.GET.get("path") or "")
    except BoxyardError as error:
        context = {"nav": "fleet", "sandbox": sandbox, "error": error.localized()}
        return render(request, "sandboxes/file_error.html", context, status=problem(error).status)


@staff_required
@require_GET
def archive(request: HttpRequest, sandbox_id: UUID) -> HttpResponseBase:
    """A directory of the sandbox as a zip, made as it is sent."""
    sandbox = _sandbox(request, sandbox_id)
    try:
        path = request.GET.get("path") or "/workspace"
        return archive_response(services.open_archive(sandbox, path, "zip"))
    except BoxyardError as error:
        context = {"nav": "fleet", "sandbox": sandbox, "error": error.localized()}
        return render(request, "sandboxes/file_error.html", context, status=problem(error).status)


@staff_required
@require_http_methods(["PUT"])
def upload(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    """Write the request's body to `path` as it arrives (the page's script sends the file
    itself, so a file of any size the workspace holds goes through a few MiB of memory), as
    the admin, who must hold the lease: the bot's lease refuses it, as it refuses any other
    writer. The script shows the JSON answer: 201 with what was written, or the error's
    status and message."""
    sandbox = _sandbox(request, sandbox_id)
    actor = admin_actor(request)
    try:
        written = services.write_file(
            sandbox,
            request.GET.get("path") or "",
            pieces(request),
            actor,
            size=content_length(request),
            overwrite=True,
            holder=str(actor),
        )
    except BoxyardError as error:
        answer = problem(error)
        # The page's script shows the message to the admin: in the admin's language.
        body = {"error": {**answer.body["error"], "message": error.localized()}}
        return JsonResponse(body, status=answer.status, headers=answer.headers)
    message = _("%(path)s uploaded (%(size)s).") % {
        "path": written.path,
        "size": filesizeformat(written.size_bytes),
    }
    # What the API answers for a write, and the words the page shows the admin.
    return JsonResponse({**written_out(written), "message": message}, status=201)


@staff_required
@require_POST
def delete(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    sandbox = _sandbox(request, sandbox_id)
    actor = admin_actor(request)
    try:
        services.delete_file(
            sandbox, request.POST.get("path") or "", actor, recursive=True, holder=str(actor)
        )
    except BoxyardError as error:
        messages.error(request, error.localized())
    return redirect("sandbox", sandbox_id=sandbox.pk)


# --- processes, logs and the admin's own commands -----------------------------------------------


@staff_required
@require_GET
def log(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    """New output of a managed process (`process`) or a background command (`exec`) after
    `since`, appended to the log on the page; the poller comes back with the next position."""
    sandbox = _sandbox(request, sandbox_id)
    since = max(0, parse_int(request.GET.get("since")) or 0)
    process, exec_id = request.GET.get("process", ""), request.GET.get("exec", "")
    running = False
    try:
        if process:
            output = services.read_output(sandbox, process, since_seq=since)
            chunks, running = output["chunks"], output["running"]
        else:
            record = selectors.exec_for(_admin(request), sandbox, exec_id)
            chunks, record, _ = services.exec_output_recording_end(record, since)
            running = record.state == "running"
    except BoxyardError as error:
        chunks = [{"seq": since, "stream": "stderr", "text": f"[{error.localized()}]\n"}]
    last = max([since, *(int(chunk["seq"]) for chunk in chunks)])
    context = {
        "sandbox": sandbox,
        "chunks": chunks,
        "since": last,
        "running": running,
        "process": process,
        "exec_id": exec_id,
        "first": request.GET.get("first") == "1",
    }
    return render(request, "sandboxes/_log.html", context)


@staff_required
@require_POST
def run_command(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    """A command run by the admin, who must hold the lease; it joins the history as theirs.
    From the page's script the answer is its outcome alone, shown under the form (the page
    stays as it is: an open terminal too); without it, the page again with the exit code."""
    sandbox = _sandbox(request, sandbox_id)
    actor = admin_actor(request)
    context: dict[str, Any] = {}
    try:
        exec_request = services.clean_request(sandbox, cmd=request.POST.get("cmd", ""))
        context["record"] = services.run_exec(sandbox, exec_request, actor, holder=str(actor))
    except BoxyardError as error:
        context["error"] = error.localized()
    if request.htmx:  # type: ignore[attr-defined]  # set by django-htmx's middleware
        return render(request, "sandboxes/_run_result.html", context)
    if "record" in context:
        messages.info(request, _("Exit code %(code)s.") % {"code": context["record"].exit_code})
    else:
        messages.error(request, context["error"])
    return redirect("sandbox", sandbox_id=sandbox.pk)


@staff_required
@require_POST
def run_code(request: HttpRequest, sandbox_id: UUID) -> HttpResponse:
    """Code run by the admin in the sandbox's default context of its language (the bot's
    kernel: its state is theirs), with the lease; it joins the history as theirs. From the
    page's script the answer is its results alone, shown under the form."""
    sandbox = _sandbox(request, sandbox_id)
    actor = admin_actor(request)
    context: dict[str, Any] = {}
    try:
        code_request = services.clean_code_request(
            sandbox, code=request.POST.get("code", ""), language=request.POST.get("language")
        )
        context["run"] = services.execute_code(sandbox, code_request, actor, holder=str(actor))
    except BoxyardError as error:
        context["error"] = error.localized()
    if request.htmx:  # type: ignore[attr-defined]  # set by django-htmx's middleware
        return render(request, "sandboxes/_code_run_result.html", context)
    if "error" in context:
        messages.error(request, context["error"])
    else:
        messages.info(
            request, _("The code ran: %(status)s.") % {"status": context["run"].record.state}
        )
    return redirect("sandbox", sandbox_id=sandbox.pk)
