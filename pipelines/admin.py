"""The Django admin's pages for pipelines, their skills and tokens, and the scope presets.
Every change made here goes through the pipelines' services, as the dashboard's do, and is
recorded as the admin's, via the admin site."""

from typing import Any, cast

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest

from boxyard.actors import Actor
from pipelines import services
from pipelines.models import Pipeline, PipelineToken, SessionTemplate, Skill
from sandboxes.models import Sandbox, State

VIA = "admin site"


def _actor(request: HttpRequest) -> Actor:
    return Actor.admin(request.user)


def _values(form: ModelForm[Any]) -> dict[str, Any]:
    return {
        name: form.cleaned_data[name] for name in form.changed_data if name in form.cleaned_data
    }


class SkillInline(admin.TabularInline[Skill, Pipeline]):
    model = Skill
    extra = 0


class TokenInline(admin.TabularInline[PipelineToken, Pipeline]):
    """Tokens are issued by the dashboard or `create_pipeline --print-token` (shown once) and
    revoked with the token list's action."""

    model = PipelineToken
    extra = 0
    readonly_fields = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    fields = readonly_fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Pipeline)
class PipelineAdmin(admin.ModelAdmin[Pipeline]):
    list_display = ["slug", "name", "scope_template", "image", "retention", "network_enabled"]
    search_fields = ["slug", "name"]
    inlines = [SkillInline, TokenInline]

    def save_model(
        self, request: HttpRequest, obj: Pipeline, form: ModelForm[Pipeline], change: bool
    ) -> None:
        if change:
            services.update_pipeline(obj, _actor(request), _values(form), via=VIA)
        else:
            services.create_pipeline(obj, _actor(request), via=VIA)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """What the confirmation page lists. The service deletes a pipeline with its tokens
        and the rows of its destroyed sandboxes; only a live sandbox stands in the way."""
        deleted, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        live = Sandbox.objects.filter(pipeline__in=objs).exclude(state=State.DESTROYED)
        protected = [f"{sandbox} (close it first)" for sandbox in live]
        for handled in (PipelineToken, Sandbox):  # deleted by the service, not one by one
            perms_needed.discard(str(handled._meta.verbose_name))
        return deleted, model_count, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Pipeline) -> None:
        services.delete_pipeline(obj, _actor(request), via=VIA)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Pipeline]) -> None:
        for pipeline in queryset:
            services.delete_pipeline(pipeline, _actor(request), via=VIA)

    def save_formset(
        self,
        request: HttpRequest,
        form: Any,
        formset: BaseInlineFormSet[Any, Any, Any],
        change: bool,
    ) -> None:
        if formset.model is not Skill:
            super().save_formset(request, form, formset, change)
            return
        # Saved without committing, the formset says what is new, changed and deleted (the
        # admin's change message reads that too); the services make each change.
        actor = _actor(request)
        formset.save(commit=False)
        # Skills, as the formset's model says. (django-stubs declares these lists with the
        # model's type, but mypy leaves that type unsolved in them: `list[_M]`.)
        for skill in cast("list[Skill]", formset.deleted_objects):
            services.remove_skill(skill, actor, via=VIA)
        changed = cast("list[tuple[Skill, list[str]]]", formset.changed_objects)
        for skill, fields in changed:
            services.change_skill(skill, actor, {f: getattr(skill, f) for f in fields}, via=VIA)
        for skill in cast("list[Skill]", formset.new_objects):
            skill.pipeline = form.instance
            services.add_skill(skill, actor, via=VIA)


@admin.register(SessionTemplate)
class SessionTemplateAdmin(admin.ModelAdmin[SessionTemplate]):
    list_display = ["slug", "template", "is_default", "position"]


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin[Skill]):
    list_display = ["pipeline", "name", "host_path", "mode"]
    list_filter = ["pipeline"]

    def save_model(
        self, request: HttpRequest, obj: Skill, form: ModelForm[Skill], change: bool
    ) -> None:
        if change:
            services.change_skill(obj, _actor(request), _values(form), via=VIA)
        else:
            services.add_skill(obj, _actor(request), via=VIA)

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        services.remove_skill(obj, _actor(request), via=VIA)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Skill]) -> None:
        for skill in queryset:
            services.remove_skill(skill, _actor(request), via=VIA)


@admin.register(PipelineToken)
class PipelineTokenAdmin(admin.ModelAdmin[PipelineToken]):
    list_display = ["pipeline", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = [
        "pipeline",
        "name",
        "prefix",
        "digest",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["pipeline"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued by `create_pipeline --print-token` or the dashboard

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked, not deleted: the history keeps which token did what

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[PipelineToken]) -> None:
        for token in queryset.select_related("pipeline"):
            services.revoke_token(token, _actor(request), via=VIA)
        messages.success(request, f"{queryset.count()} tokens revoked.")
