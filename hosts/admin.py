"""The Django admin's page for Docker hosts. Adding, editing, draining and undraining go
through the hosts' services, as the dashboard's and the command line's do, and are recorded
as the admin's."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from hosts import services
from hosts.models import DockerHost


def _actor(request: HttpRequest) -> Actor:
    return Actor("admin", request.user.get_username())


@admin.register(DockerHost)
class DockerHostAdmin(admin.ModelAdmin[DockerHost]):
    list_display = ["name", "url", "state", "down_since", "last_seen_at", "max_sandboxes"]
    readonly_fields = [
        "state",
        "is_default",
        "down_since",
        "last_seen_at",
        "last_error",
        "engine_version",
        "engine_cpus",
        "engine_memory_mb",
        "images",
    ]
    actions = ["drain", "undrain"]

    def save_model(
        self, request: HttpRequest, obj: DockerHost, form: ModelForm[Any], change: bool
    ) -> None:
        values = {name: form.cleaned_data[name] for name in form.changed_data}
        values = {name: value for name, value in values.items() if name in services.EDITABLE}
        if change:  # `obj` has the form's values already: the row as it was is compared
            services.edit_host(DockerHost.objects.get(pk=obj.pk), _actor(request), **values)
        else:
            created = services.add_host(_actor(request), obj.name, **values)
            obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a host's sandboxes keep their history: drain it instead

    @admin.action(description="Drain: place no new sandbox on the selected hosts")
    def drain(self, request: HttpRequest, queryset: QuerySet[DockerHost]) -> None:
        for host in queryset:
            services.drain(host, _actor(request))
        messages.success(request, f"{queryset.count()} hosts draining.")

    @admin.action(description="Undrain: place new sandboxes on the selected hosts again")
    def undrain(self, request: HttpRequest, queryset: QuerySet[DockerHost]) -> None:
        for host in queryset:
            try:
                services.undrain(host, _actor(request))
            except BoxyardError as error:
                messages.error(request, str(error))
        messages.success(request, f"{queryset.count()} hosts active.")
