"""Docker hosts: the engines sandboxes run on. The embedded install has one, `local` (this
machine's engine, as BOXYARD_DOCKER_HOST or DOCKER_HOST say); an operator adds more, reached
over TLS or SSH, and Boxyard places new sandboxes across them (`sandboxes.services.placing`).

A host's `state` is the admin's choice (active, or draining: no new sandbox goes there); whether
it answers is the health check's (`down_since`), and `condition` tells both as one word."""

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

DEFAULT_NAME = "local"
SCHEMES = ("unix", "tcp", "ssh", "http", "https")


class HostState(models.TextChoices):
    ACTIVE = "active", _("active")
    DRAINING = "draining", _("draining")


class Condition(models.TextChoices):
    """What the dashboard shows of a host: the admin's state, unless it does not answer."""

    ACTIVE = "active", _("active")
    DRAINING = "draining", _("draining")
    DOWN = "down", _("down")


class DockerHost(models.Model):
    name = models.SlugField(unique=True, max_length=50)
    url = models.CharField(
        max_length=300,
        blank=True,
        help_text="unix:///run/docker.sock, tcp://10.0.0.5:2376 (with TLS below) or "
        "ssh://user@host. Empty: this machine's engine (BOXYARD_DOCKER_HOST or DOCKER_HOST).",
    )
    tls_ca = models.TextField(blank=True, help_text="PEM: the CA that signed the engine's cert.")
    tls_cert = models.TextField(blank=True, help_text="PEM: Boxyard's client certificate.")
    tls_key = models.TextField(blank=True, help_text="PEM: Boxyard's client key.")
    labels = models.JSONField(
        default=dict, blank=True, help_text='What pipelines may require, e.g. {"zone": "eu"}.'
    )
    cpus = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.01)],
        help_text="CPUs sandboxes may reserve here (their pipelines' cpus); empty: no limit.",
    )
    memory_mb = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(16)],
        help_text="Memory (MiB) sandboxes may reserve here; empty: no limit.",
    )
    max_sandboxes = models.PositiveIntegerField(
        default=500, validators=[MinValueValidator(1)], help_text="Live sandboxes at most."
    )
    state = models.CharField(max_length=16, choices=HostState.choices, default=HostState.ACTIVE)
    is_default = models.BooleanField(
        default=False, editable=False, help_text="Where sandboxes made before hosts existed are."
    )

    # What the health check last saw.
    down_since = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    engine_version = models.CharField(max_length=50, blank=True)
    engine_cpus = models.PositiveIntegerField(null=True, blank=True)
    engine_memory_mb = models.PositiveIntegerField(null=True, blank=True)
    images = models.JSONField(default=list, blank=True, help_text="Image tags it holds.")
    # Which engine it is (`docker info`'s ID and data root): one engine is one host's.
    engine_id = models.CharField(max_length=200, blank=True, editable=False)
    engine_root = models.CharField(max_length=500, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True), name="one_default_host"
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def condition(self) -> str:
        if self.down_since is not None:
            return Condition.DOWN
        return Condition(self.state)

    @property
    def queue(self) -> str:
        """The Celery queue of this host's engine work."""
        return queue_named(self.name)

    def get_condition_display(self) -> str:
        return str(Condition(self.condition).label)

    def clean(self) -> None:
        errors: dict[str, Any] = {}
        if self.url:
            scheme = self.url.split("://", 1)[0] if "://" in self.url else ""
            if scheme not in SCHEMES:
                errors["url"] = _("must start with one of %(schemes)s") % {
                    "schemes": ", ".join(f"{s}://" for s in SCHEMES)
                }
        tls = [bool(self.tls_ca), bool(self.tls_cert), bool(self.tls_key)]
        if any(tls) and not all(tls):
            errors["tls_ca"] = _("TLS needs all three: the CA, the certificate and the key")
        if any(tls) and not self.url.startswith(("tcp://", "https://")):
            errors["url"] = _("TLS is for an engine reached over tcp://")
        if not isinstance(self.labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            errors["labels"] = _("must be an object of text values")
        if errors:
            raise ValidationError(errors)


def queue_named(host: str) -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.host.{host}"


def queue_of(host_id: int) -> str:
    """The Celery queue of host `host_id`'s engine work."""
    return queue_named(DockerHost.objects.values_list("name", flat=True).get(pk=host_id))


def default_host_pk() -> int:
    """The default host's id: where a sandbox goes that names none. Only reads: the row is
    made by the migrations, and again at start-up (`hosts.services.ensure_default_host`).
    Reads the id alone, as the migration that gives existing sandboxes their host must,
    whatever columns the table has then. Raises DockerHost.DoesNotExist without it."""
    found = DockerHost.objects.filter(is_default=True).values_list("pk", flat=True).first()
    if found is None:
        raise DockerHost.DoesNotExist(
            f"no default Docker host: `manage.py migrate` makes {DEFAULT_NAME!r}"
        )
    return int(found)
