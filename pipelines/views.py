"""The dashboard's pipeline pages: the list, the form with its live scope preview, skills and
API tokens (a new token is shown once)."""

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from boxyard.errors import BoxyardError, InvalidInput
from boxyard.web import admin_actor, staff_required
from pipelines import scope, selectors, services
from pipelines.forms import PipelineForm, SkillForm, chosen_scope
from pipelines.mcp_config import mcp_connection
from pipelines.models import Pipeline, Skill

# What the scope preview resolves the template with: two people in one group chat, and one
# of them in a private chat, each with their own message.
SAMPLE_CHATS = [
    (
        gettext_lazy("Alice in group 42"),
        {
            "launcher_type": "group",
            "launcher_id": "42",
            "sender_id": "alice",
            "conversation_id": "c-1001",
            "query_id": "m-1",
            "user_id": "alice",
        },
    ),
    (
        gettext_lazy("Bob in group 42"),
        {
            "launcher_type": "group",
            "launcher_id": "42",
            "sender_id": "bob",
            "conversation_id": "c-1001",
            "query_id": "m-2",
            "user_id": "bob",
        },
    ),
    (
        gettext_lazy("Alice in private"),
        {
            "launcher_type": "person",
            "launcher_id": "alice",
            "sender_id": "alice",
            "conversation_id": "c-2002",
            "query_id": "m-3",
            "user_id": "alice",
        },
    ),
]


@staff_required
@require_GET
def pipeline_list(request: HttpRequest) -> HttpResponse:
    pipelines = Pipeline.objects.order_by("slug")
    return render(request, "pipelines/list.html", {"nav": "pipelines", "pipelines": pipelines})


@staff_required
@require_http_methods(["GET", "POST"])
def pipeline_edit(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    pipeline = _pipeline(slug) if slug else None
    form = PipelineForm(request.POST or None, instance=pipeline)
    if request.method == "POST" and form.is_valid():
        values = form.values()
        try:
            if pipeline is None:
                saved = services.create_pipeline(Pipeline(**values), admin_actor(request))
            else:
                saved = services.update_pipeline(pipeline, admin_actor(request), values)
        except BoxyardError as error:
            form.add_error(None, error.localized())
        else:
            messages.success(request, _("Pipeline %(slug)s saved.") % {"slug": saved.slug})
            return redirect("pipeline", slug=saved.slug)
    context: dict[str, Any] = {"nav": "pipelines", "form": form, "pipeline": pipeline}
    context.update(_preview(form["scope_preset"].value(), form["scope_template"].value()))
    if pipeline is not None:
        context["tokens"] = pipeline.tokens.order_by("-created_at")
        context["skills"] = pipeline.skills.order_by("name")
        context["skill_form"] = SkillForm(
            auto_id="skill_%s"
        )  # ids of its own, beside the pipeline form's
        context["history"] = selectors.pipeline_history(pipeline)
        context["live_sandboxes"] = selectors.live_sandbox_count(pipeline)
        context["mcp"] = mcp_connection(pipeline, request.build_absolute_uri("/"))
    return render(request, "pipelines/form.html", context)


@staff_required
@require_GET
def scope_preview(request: HttpRequest) -> HttpResponse:
    """The partial under the scope fields: the keys the template gives the sample chats, or
    the template's error, as the admin types."""
    return render(
        request,
        "pipelines/_scope_preview.html",
        _preview(request.GET.get("scope_preset"), request.GET.get("scope_template")),
    )


def _preview(preset: str | None, typed: str | None) -> dict[str, Any]:
    """The keys the template that Save would store gives the sample chats, or why it cannot."""
    try:
        template = chosen_scope(preset, typed)
    except ValidationError as error:
        return {"preview_error": " ".join(error.messages), "preview": []}
    try:
        scope.validate(template)
    except scope.TemplateError as error:
        return {"preview_error": error.message.localized(), "preview": []}
    preview = []
    for label, variables in SAMPLE_CHATS:
        try:
            preview.append((label, scope.resolve(template, variables), ""))
        except InvalidInput as error:
            preview.append((label, "", error.localized()))
    return {"preview_error": "", "preview": preview, "template": template}


@staff_required
@never_cache
@require_POST
def token_create(request: HttpRequest, slug: str) -> HttpResponse:
    pipeline = _pipeline(slug)
    shape = "e2b" if request.POST.get("shape") == "e2b" else "boxyard"
    row, plaintext = services.issue_token(
        pipeline, admin_actor(request), request.POST.get("name", "")[:100], shape=shape
    )
    context = {
        "nav": "pipelines",
        "pipeline": pipeline,
        "token": row,
        "plaintext": plaintext,
        "mcp": mcp_connection(pipeline, request.build_absolute_uri("/"), plaintext),
    }
    return render(request, "pipelines/token_created.html", context)


@staff_required
@require_POST
def token_revoke(request: HttpRequest, slug: str, token_id: int) -> HttpResponse:
    pipeline = _pipeline(slug)
    token = pipeline.tokens.filter(pk=token_id).first()
    if token is None:
        raise Http404("no such token")
    services.revoke_token(token, admin_actor(request))
    messages.success(request, _("Token %(prefix)s… revoked.") % {"prefix": token.prefix})
    return redirect("pipeline", slug=pipeline.slug)


@staff_required
@require_POST
def skill_add(request: HttpRequest, slug: str) -> HttpResponse:
    pipeline = _pipeline(slug)
    form = SkillForm(request.POST, instance=Skill(pipeline=pipeline))
    if form.is_valid():
        try:
            skill = services.add_skill(
                Skill(pipeline=pipeline, **form.values()), admin_actor(request)
            )
            messages.success(request, _("Skill %(name)s added.") % {"name": skill.name})
        except BoxyardError as error:
            messages.error(request, error.localized())
    else:
        for field, errors in form.errors.items():
            messages.error(request, f"{field}: {' '.join(map(str, errors))}")
    return redirect("pipeline", slug=pipeline.slug)


@staff_required
@require_POST
def skill_remove(request: HttpRequest, slug: str, skill_id: int) -> HttpResponse:
    pipeline = _pipeline(slug)
    skill = pipeline.skills.filter(pk=skill_id).first()
    if skill is None:
        raise Http404("no such skill")
    services.remove_skill(skill, admin_actor(request))
    messages.success(request, _("Skill %(name)s removed.") % {"name": skill.name})
    return redirect("pipeline", slug=pipeline.slug)


@staff_required
@require_POST
def pipeline_delete(request: HttpRequest, slug: str) -> HttpResponse:
    """Delete the pipeline; with its live sandboxes only when the admin ticked that."""
    pipeline = _pipeline(slug)
    try:
        closed = services.delete_pipeline(
            pipeline, admin_actor(request), close_sandboxes=request.POST.get("close") == "1"
        )
    except BoxyardError as error:
        messages.error(request, error.localized())
        return redirect("pipeline", slug=pipeline.slug)
    messages.success(
        request,
        _("Pipeline %(slug)s deleted (%(count)d sandboxes closed).")
        % {"slug": slug, "count": closed},
    )
    return redirect("pipelines")


def _pipeline(slug: str) -> Pipeline:
    pipeline = Pipeline.objects.filter(slug=slug).first()
    if pipeline is None:
        raise Http404("no such pipeline")
    return pipeline
