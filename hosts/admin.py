"""The Django admin's page for Docker hosts. Adding, editing, draining, undraining and removing
go through the hosts' services, as the dashboard's and the command line's do, and are recorded
as the admin's.

Stored TLS material is never shown back: its boxes start empty, an empty box keeps what is
stored, and a box to tick removes it."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from boxyard.actors import Actor
from boxyard.errors import BoxyardError, InvalidInput
from hosts import services
from hosts.forms import TLS
from hosts.models import DockerHost


def _actor(request: HttpRequest) -> Actor:
    return Actor.admin(request.user)


def _pem(label: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
    )


class HostAdminForm(forms.ModelForm[DockerHost]):
    """The model's fields but the TLS material, which is typed into boxes of its own (written
    to the row only when something is typed, or cleared when asked), and a refusal of an
    engine that is already another host's."""

    tls_ca = _pem("TLS: the CA's certificate (PEM)")
    tls_cert = _pem("TLS: Boxyard's client certificate (PEM)")
    tls_key = _pem("TLS: Boxyard's client key (PEM)")
    clear_tls = forms.BooleanField(required=False, label="Remove the stored TLS material")

    class Meta:
        model = DockerHost
        # Excluded, not listed: the admin builds its form from `fields` it finds, and only an
        # exclusion keeps the empty boxes from being written over the stored material.
        exclude = list(TLS)  # noqa: DJ006

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stored = self.instance.pk is not None and any(getattr(self.instance, n) for n in TLS)
        for name in TLS:
            self.fields[name].initial = ""  # never the stored material
            if stored:
                self.fields[name].help_text = "Stored; leave empty to keep it."

    def tls_values(self) -> dict[str, str]:
        """The TLS fields to change: those typed, or all three emptied when asked."""
        data = self.cleaned_data
        typed = {name: data[name].strip() + "\n" for name in TLS if data.get(name, "").strip()}
        if data.get("clear_tls"):
            return {**dict.fromkeys(TLS, ""), **typed}
        return typed

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name, value in self.tls_values().items():  # so the model's rules see them
            setattr(self.instance, name, value)
        return data

    def _post_clean(self) -> None:  # Django's: after the model's rules
        super()._post_clean()  # type: ignore[misc]
        if self.errors:
            return
        adding = self.instance.pk is None
        changed = set(self.changed_data) & {"url", *TLS, "clear_tls"}
        if adding or changed:
            try:
                services.refuse_taken_engine(self.instance)
            except InvalidInput as error:
                self.add_error(error.field if error.field in self.fields else None, str(error))


@admin.register(DockerHost)
class DockerHostAdmin(admin.ModelAdmin[DockerHost]):
    form = HostAdminForm
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
        "engine_id",
        "engine_root",
        "images",
    ]
    actions = ["drain", "undrain"]

    def get_readonly_fields(self, request: HttpRequest, obj: DockerHost | None = None) -> Any:
        # A host's name is how everything else knows it (its queue, its TLS files).
        fields = list(super().get_readonly_fields(request, obj))
        return ["name", *fields] if obj is not None else fields

    def get_fields(self, request: HttpRequest, obj: DockerHost | None = None) -> Any:
        stored = obj is not None and any(getattr(obj, name) for name in TLS)
        return [name for name in super().get_fields(request, obj) if name != "clear_tls" or stored]

    def save_model(
        self, request: HttpRequest, obj: DockerHost, form: ModelForm[Any], change: bool
    ) -> None:
        assert isinstance(form, HostAdminForm)
        values = {name: form.cleaned_data[name] for name in form.changed_data}
        values = {name: value for name, value in values.items() if name in services.EDITABLE}
        values = {**{k: v for k, v in values.items() if k not in TLS}, **form.tls_values()}
        if change:  # `obj` has the form's values already: the row as it was is compared
            services.edit_host(DockerHost.objects.get(pk=obj.pk), _actor(request), **values)
        else:
            created = services.add_host(_actor(request), obj.name, **values)
            obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The default host never; another once it holds no sandbox (the service says so).
        return super().has_delete_permission(request, obj) and not (obj and obj.is_default)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """What removing says it removes: the host alone (its destroyed sandboxes' rows are
        kept), or why it cannot be removed, as the service says it."""
        hosts = list(objs)
        refused = [services.removal_refused(host) for host in hosts]
        return (
            [str(host) for host in hosts],
            {str(DockerHost._meta.verbose_name_plural): len(hosts)},
            set(),
            [str(error) for error in refused if error is not None],
        )

    def delete_model(self, request: HttpRequest, obj: DockerHost) -> None:
        try:
            services.remove_host(obj, _actor(request))
        except BoxyardError as error:
            messages.error(request, str(error))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[DockerHost]) -> None:
        for host in queryset:
            self.delete_model(request, host)

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # one host at a time, from its page
        return actions

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
