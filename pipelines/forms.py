"""The pipeline form of the dashboard: the sandbox scope as a preset or a custom template,
and the whole sandbox profile, validated by the model's own rules (operator maximums, the
image allowlist, managed processes)."""

import json
from typing import Any

from django import forms
from django.utils.translation import get_language
from django.utils.translation import gettext_lazy as _

from pipelines.models import Pipeline, SessionTemplate, Skill

CUSTOM = "custom"


def chosen_scope(preset: str | None, template: str | None) -> str:
    """The one template the scope fields mean: the preset's, or what is typed under "Custom".

    A typed template is never dropped for a preset: one that differs from the preset the select
    shows is refused (the page's script keeps the two together, so only a page without it can
    send both). Raises ValidationError naming what to do."""
    typed = (template or "").strip()
    if not preset or preset == CUSTOM:
        if not typed:
            raise forms.ValidationError(_("Write a template, or choose a preset."))
        return typed
    if typed and typed != preset:
        raise forms.ValidationError(
            _("This template is not the preset chosen: choose “Custom template” to save it.")
        )
    return preset


class JSONText(forms.CharField):
    """A JSON value typed as text (environment variables, managed processes)."""

    def __init__(self, *, empty: Any, **kwargs: Any) -> None:
        self.empty = empty
        super().__init__(
            required=False,
            widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
            **kwargs,
        )

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        return json.dumps(value if value is not None else self.empty, indent=1, ensure_ascii=False)

    def to_python(self, value: Any) -> Any:
        text = (value or "").strip()
        if not text:
            return self.empty
        try:
            return json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(
                _("This is not valid JSON: %(error)s"), params={"error": error}
            ) from None


class PipelineForm(forms.ModelForm[Pipeline]):
    scope_preset = forms.ChoiceField(label=_("Sandbox scope"), required=True)
    env = JSONText(
        empty={},
        label=_("Environment"),
        help_text=_('For every command, e.g. {"LANG": "C.UTF-8"}.'),
    )
    processes = JSONText(
        empty=[],
        label=_("Managed processes"),
        help_text=_('e.g. [{"name": "mcp", "cmd": ["python3", "server.py"]}]'),
    )

    class Meta:
        model = Pipeline
        fields = [
            "slug",
            "name",
            "description",
            "scope_template",
            "image",
            "cpus",
            "memory_mb",
            "pids_limit",
            "workspace_mb",
            "tmp_mb",
            "network_enabled",
            "idle_timeout_seconds",
            "ttl_seconds",
            "lease_timeout_seconds",
            "exec_timeout_seconds",
            "output_limit_bytes",
            "retention",
            "max_live_sandboxes",
            "pool_size",
            "pool_exhausted",
            "pool_wait_seconds",
            "env",
            "processes",
            "system_prompt",
        ]
        labels = {
            "slug": _("Slug"),
            "name": _("Name"),
            "description": _("Description"),
            "scope_template": _("Custom scope template"),
            "image": _("Image"),
            "cpus": _("CPUs"),
            "memory_mb": _("Memory (MiB)"),
            "pids_limit": _("Processes at most"),
            "workspace_mb": _("Workspace (MiB)"),
            "tmp_mb": _("/tmp (MiB)"),
            "network_enabled": _("Network"),
            "idle_timeout_seconds": _("Idle timeout (s)"),
            "ttl_seconds": _("Time to live (s)"),
            "lease_timeout_seconds": _("Lease timeout (s)"),
            "exec_timeout_seconds": _("Command timeout (s)"),
            "output_limit_bytes": _("Output per command (bytes)"),
            "retention": _("Retention"),
            "max_live_sandboxes": _("Live sandboxes at most"),
            "pool_size": _("Warm pool size"),
            "pool_exhausted": _("When the pool is empty"),
            "pool_wait_seconds": _("Wait for the pool (s)"),
            "system_prompt": _("System prompt"),
        }
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "system_prompt": forms.Textarea(attrs={"rows": 8}),
        }
        help_texts = {
            "scope_template": _(
                "Variables in braces; a chain such as {task_id|conversation_id|uuid} takes the first one present."
            ),
            "image": _("Empty: the default image."),
            "workspace_mb": _(
                "The size of each sandbox's workspace disk (the file system's own metadata counts)."
            ),
            "pool_size": _("Sandboxes kept started and ready for new scope keys (0: none)."),
            "pool_exhausted": _("What an open does when the pool has no ready sandbox."),
            "pool_wait_seconds": _(
                "With the wait policy: how long an open waits for the pool before failing."
            ),
            "exec_timeout_seconds": _("Default per exec."),
            "output_limit_bytes": _(
                "What one exec returns per stream; more is cut and flagged truncated."
            ),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        language = get_language()
        presets = list(SessionTemplate.objects.all())
        self.presets = {preset.template: preset for preset in presets}
        scope_preset = self.fields["scope_preset"]
        assert isinstance(scope_preset, forms.ChoiceField)  # declared so above
        scope_preset.choices = [
            (preset.template, f"{preset.label(language)} — {preset.template}") for preset in presets
        ] + [(CUSTOM, _("Custom template"))]
        self.fields["scope_template"].required = False
        default = next((p.template for p in presets if p.is_default), None)
        current = self.instance.scope_template
        if not self.instance.pk and default:
            current = default
        # One choice in two fields: the template that is saved, and its preset if it is one.
        self.initial["scope_template"] = current
        self.fields["scope_preset"].initial = current if current in self.presets else CUSTOM
        if self.instance.pk:
            self.fields["slug"].disabled = True

    def values(self) -> dict[str, Any]:
        """The pipeline's fields as the admin gave them (after `is_valid`), for the services."""
        return {
            name: self.cleaned_data[name]
            for name in self.Meta.fields
            if name != "slug" or not self.instance.pk
        }

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data  # what a model form's `clean` returns
        try:
            template = chosen_scope(data.get("scope_preset"), data.get("scope_template"))
        except forms.ValidationError as error:
            self.add_error("scope_template", error)
        else:
            data["scope_template"] = template
            self.instance.scope_template = template
        return data


class SkillForm(forms.ModelForm[Skill]):
    class Meta:
        model = Skill
        fields = ["name", "host_path", "mode", "description"]
        labels = {
            "name": _("Name"),
            "host_path": _("Host path"),
            "mode": _("Mode"),
            "description": _("Description"),
        }

    def values(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}
