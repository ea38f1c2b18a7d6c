from typing import Any

from django.contrib import admin

from sandboxes.models import Event, Exec, Lease, Sandbox, ShellSession


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """Rows that only services may change: the admin shows them."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Sandbox)
class SandboxAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "pipeline",
        "scope_key",
        "state",
        "stop_reason",
        "generation",
        "created_at",
    ]
    list_filter = ["state", "pipeline"]
    search_fields = ["scope_key", "container_name", "id"]


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ["sandbox", "holder", "epoch", "expires_at", "taken_over_from"]


@admin.register(Exec)
class ExecAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "sandbox",
        "actor",
        "command",
        "state",
        "exit_code",
        "duration_ms",
    ]
    list_filter = ["state"]


@admin.register(ShellSession)
class ShellSessionAdmin(ReadOnlyAdmin):
    list_display = ["sandbox", "name", "cwd", "actor", "created_at"]
    search_fields = ["name"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "actor", "action", "reason", "sandbox", "pipeline"]
    list_filter = ["action"]
