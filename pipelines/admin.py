from django.contrib import admin

from pipelines.models import Pipeline, PipelineToken, SessionTemplate, Skill


class SkillInline(admin.TabularInline):
    model = Skill
    extra = 0


class TokenInline(admin.TabularInline):
    model = PipelineToken
    extra = 0
    fields = ["name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    can_delete = False


@admin.register(Pipeline)
class PipelineAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "scope_template", "image", "retention", "network_enabled"]
    search_fields = ["slug", "name"]
    inlines = [SkillInline, TokenInline]


@admin.register(SessionTemplate)
class SessionTemplateAdmin(admin.ModelAdmin):
    list_display = ["slug", "template", "is_default", "position"]


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin):
    list_display = ["pipeline", "name", "host_path", "mode"]
    list_filter = ["pipeline"]


@admin.register(PipelineToken)
class PipelineTokenAdmin(admin.ModelAdmin):
    list_display = ["pipeline", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "digest", "created_at", "last_used_at"]
    list_filter = ["pipeline"]

    def has_add_permission(self, request: object) -> bool:
        return False  # tokens are issued by `create_pipeline --print-token` or the dashboard
