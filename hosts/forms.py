"""The Docker host form of the dashboard: what an admin types, turned into the fields the
hosts' services take (they hold the rules: a URL's scheme, TLS whole or not at all, the
capacity's bounds). Stored TLS material is never shown back: its boxes start empty, and an
empty box keeps what is stored."""

from typing import Any

from django import forms
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from hosts.models import DockerHost

TLS = ("tls_ca", "tls_cert", "tls_key")
# What each field of a host is called on the dashboard (also in its history of changes).
LABELS = {
    "name": _("Name"),
    "url": _("Engine URL"),
    "tls_ca": _("TLS: the CA's certificate (PEM)"),
    "tls_cert": _("TLS: Boxyard's client certificate (PEM)"),
    "tls_key": _("TLS: Boxyard's client key (PEM)"),
    "labels": _("Labels"),
    "cpus": _("CPUs for sandboxes"),
    "memory_mb": _("Memory for sandboxes (MiB)"),
    "max_sandboxes": _("Live sandboxes at most"),
}


def _help(text: str, **examples: str) -> str:
    """A help text with its examples as code, which no language translates."""
    codes = {
        name: format_html('<code translate="no">{}</code>', value)
        for name, value in examples.items()
    }
    return mark_safe(conditional_escape(text) % codes)  # every part escaped above


def _pem() -> forms.CharField:
    return forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
    )


class HostForm(forms.Form):
    name = forms.SlugField(
        max_length=50,
        help_text=_("Letters, digits, hyphens and underscores; it cannot be changed later."),
    )
    url = forms.CharField(required=False, max_length=300)
    tls_ca = _pem()
    tls_cert = _pem()
    tls_key = _pem()
    clear_tls = forms.BooleanField(required=False, label=_("Remove the stored TLS material"))
    labels = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"})
    )
    cpus = forms.FloatField(
        required=False,
        help_text=_("What its sandboxes may reserve, by their pipelines' CPUs. Empty: no limit."),
    )
    memory_mb = forms.IntegerField(
        required=False,
        help_text=_("What its sandboxes may reserve, by their pipelines' memory. Empty: no limit."),
    )
    max_sandboxes = forms.IntegerField(initial=500)

    def __init__(self, data: Any = None, *, host: DockerHost | None = None) -> None:
        super().__init__(data)
        self.host = host
        # Help in the admin's language, its examples as they are typed in any.
        self.fields["url"].help_text = _help(
            gettext("%(unix)s, %(tcp)s (with TLS below) or %(ssh)s. Empty: this machine's engine."),
            unix="unix:///run/docker.sock",
            tcp="tcp://10.0.0.5:2376",
            ssh="ssh://user@host",
        )
        self.fields["labels"].help_text = _help(
            gettext("One a line, as %(form)s: what pipelines may require (%(example)s)."),
            form="key=value",
            example="zone=eu",
        )
        for name, field in self.fields.items():
            if name in LABELS:
                field.label = LABELS[name]
        if host is None:
            del self.fields["clear_tls"]
            return
        del self.fields["name"]  # a host's name is how everything else knows it
        self.initial = {
            "url": host.url,
            "labels": "\n".join(f"{key}={value}" for key, value in sorted(host.labels.items())),
            "cpus": host.cpus,
            "memory_mb": host.memory_mb,
            "max_sandboxes": host.max_sandboxes,
        }
        if any(getattr(host, name) for name in TLS):
            for name in TLS:
                self.fields[name].help_text = _("Stored; leave empty to keep it.")
        else:
            del self.fields["clear_tls"]

    def clean_labels(self) -> dict[str, str]:
        labels: dict[str, str] = {}
        for line in self.cleaned_data.get("labels", "").splitlines():
            if not line.strip():
                continue
            key, equals, value = line.partition("=")
            if not equals or not key.strip():
                raise forms.ValidationError(
                    _("Write one label a line, as key=value: “%(line)s” is not."),
                    params={"line": line.strip()},
                )
            labels[key.strip()] = value.strip()
        return labels

    def values(self) -> dict[str, Any]:
        """The fields for `add_host` (every one), or for `edit_host` (those that change)."""
        data = self.cleaned_data
        values = {
            name: data[name] for name in ("url", "labels", "cpus", "memory_mb", "max_sandboxes")
        }
        typed = {name: data[name].strip() + "\n" for name in TLS if data[name].strip()}
        if self.host is None:
            return {**values, **typed}
        changed = {
            name: value for name, value in values.items() if getattr(self.host, name) != value
        }
        if data.get("clear_tls"):
            changed.update(dict.fromkeys(TLS, ""))
        return {**changed, **typed}
