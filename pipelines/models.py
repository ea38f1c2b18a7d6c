import hashlib
import re
import secrets
from fnmatch import fnmatchcase
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from boxyard.errors import N_, Message
from pipelines import scope

DEFAULT_SCOPE = "{launcher_type}_{launcher_id}"

DEFAULT_SYSTEM_PROMPT = """\
You have a persistent Linux sandbox for running code. Its working directory is /workspace.
Files you write under /workspace stay there between your tool calls and between messages of
this conversation; anything outside /workspace (and /tmp) is read-only or temporary.
Skills provided by this bot are under /workspace/.skills/<name>/ - read their README files
before using them. The sandbox has no network access unless stated otherwise. Commands run
as a non-root user; each call has a time limit, and long output is truncated."""


def image_allowed(image: str) -> bool:
    return any(fnmatchcase(image, pattern) for pattern in settings.BOXYARD_IMAGE_ALLOWLIST)


class SessionTemplate(models.Model):
    """A scope preset admins pick from, with its label and description in eight languages."""

    slug = models.SlugField(unique=True)
    template = models.CharField(max_length=scope.MAX_TEMPLATE_LENGTH, validators=[scope.validate])
    labels = models.JSONField(default=dict, help_text="language code → label")
    descriptions = models.JSONField(default=dict, help_text="language code → description")
    is_default = models.BooleanField(default=False)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["position", "slug"]

    def __str__(self) -> str:
        return f"{self.label()} ({self.template})"

    def _translated(self, texts: dict[str, str], language: str | None) -> str:
        language = (language or "en").lower()
        return texts.get(language) or texts.get(language.split("-")[0]) or texts.get("en", "")

    def label(self, language: str | None = None) -> str:
        return self._translated(self.labels, language)

    def description(self, language: str | None = None) -> str:
        return self._translated(self.descriptions, language)

    def clean(self) -> None:
        try:
            scope.validate(self.template)
        except scope.TemplateError as error:
            raise ValidationError({"template": error.message.lazy()}) from None


class Retention(models.TextChoices):
    TEMPORARY = "temporary", _("Temporary: destroyed when reaped")
    PERSISTENT = "persistent", _("Persistent: stopped when reaped, workspace kept")


class PoolPolicy(models.TextChoices):
    """What an open does when the warm pool has no ready sandbox for a new scope key."""

    COLD = "cold", _("Create one cold")
    WAIT = "wait", _("Wait for the pool to refill")
    FAIL = "fail", _("Fail at once")


def _validate_template(value: str) -> None:
    try:
        scope.validate(value)
    except scope.TemplateError as error:
        raise ValidationError(error.message.lazy()) from None


class Pipeline(models.Model):
    """A bot or agent workflow: its sandbox scope, sandbox profile, skills and tokens."""

    slug = models.SlugField(unique=True, max_length=50)
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    scope_template = models.CharField(
        max_length=scope.MAX_TEMPLATE_LENGTH,
        default=DEFAULT_SCOPE,
        validators=[_validate_template],
        help_text="Which chat variables decide who shares a sandbox.",
    )

    # The sandbox profile. Defaults are the hardened ones; an operator maximum caps each.
    image = models.CharField(max_length=300, blank=True, help_text="Empty: the default image.")
    cpus = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)])
    memory_mb = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(16)])
    pids_limit = models.PositiveIntegerField(default=256, validators=[MinValueValidator(8)])
    workspace_mb = models.PositiveIntegerField(
        default=2048,
        validators=[MinValueValidator(16)],
        help_text="The size of each sandbox's workspace disk (the file system's own metadata counts).",
    )
    tmp_mb = models.PositiveIntegerField(default=256, validators=[MinValueValidator(1)])
    network_enabled = models.BooleanField(default=False)
    host_labels = models.JSONField(
        default=dict,
        blank=True,
        help_text='Labels a Docker host must have to take its sandboxes, e.g. {"gpu": "1"}.',
    )
    idle_timeout_seconds = models.PositiveIntegerField(default=1800)
    ttl_seconds = models.PositiveIntegerField(default=24 * 3600)
    lease_timeout_seconds = models.PositiveIntegerField(
        default=600, validators=[MinValueValidator(5)]
    )
    retention = models.CharField(
        max_length=20, choices=Retention.choices, default=Retention.TEMPORARY
    )
    max_live_sandboxes = models.PositiveIntegerField(default=50, validators=[MinValueValidator(1)])
    pool_size = models.PositiveIntegerField(
        default=0, help_text="Sandboxes kept started and ready for new scope keys (0: none)."
    )
    pool_exhausted = models.CharField(
        max_length=8,
        choices=PoolPolicy.choices,
        default=PoolPolicy.COLD,
        help_text="What an open does when the pool has no ready sandbox.",
    )
    pool_wait_seconds = models.PositiveIntegerField(
        default=10,
        validators=[MinValueValidator(1)],
        help_text="With the wait policy: how long an open waits for the pool before failing.",
    )
    exec_timeout_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)], help_text="Default per exec."
    )
    output_limit_bytes = models.PositiveIntegerField(
        default=256 * 1024,
        validators=[MinValueValidator(1024)],
        help_text="What one exec returns per stream; more is cut and flagged truncated.",
    )
    env = models.JSONField(default=dict, blank=True, help_text="Environment for every exec.")
    processes = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "Long-running processes every sandbox of this pipeline starts with and keeps "
            "alive (an MCP stdio server, say): a list of {name, cmd, cwd?, env?, restart?}, "
            "cmd an argv list or a shell string, restart (default true) with backoff."
        ),
    )
    system_prompt = models.TextField(default=DEFAULT_SYSTEM_PROMPT, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def effective_image(self) -> str:
        return self.image or settings.BOXYARD_DEFAULT_IMAGE

    def clean(self) -> None:
        # Said in the active language (the form shows them); pipelines.services keeps the English.
        errors: dict[str, ValidationError] = {}
        if not isinstance(self.host_labels, dict) or not all(
            isinstance(key, str) and isinstance(value, str)
            for key, value in self.host_labels.items()
        ):
            errors["host_labels"] = ValidationError(
                _('must be an object of text values, such as {"zone": "eu"}')
            )
        if not image_allowed(self.effective_image):
            errors["image"] = ValidationError(
                _("%(image)r is not on the operator's image allowlist (%(allowed)s)"),
                params={
                    "image": self.effective_image,
                    "allowed": ", ".join(settings.BOXYARD_IMAGE_ALLOWLIST),
                },
            )
        limits = [
            ("cpus", self.cpus, settings.BOXYARD_MAX_CPUS, "BOXYARD_MAX_CPUS"),
            ("memory_mb", self.memory_mb, settings.BOXYARD_MAX_MEMORY_MB, "BOXYARD_MAX_MEMORY_MB"),
            ("pids_limit", self.pids_limit, settings.BOXYARD_MAX_PIDS, "BOXYARD_MAX_PIDS"),
            (
                "workspace_mb",
                self.workspace_mb,
                settings.BOXYARD_MAX_WORKSPACE_MB,
                "BOXYARD_MAX_WORKSPACE_MB",
            ),
            ("tmp_mb", self.tmp_mb, settings.BOXYARD_MAX_TMP_MB, "BOXYARD_MAX_TMP_MB"),
            (
                "exec_timeout_seconds",
                self.exec_timeout_seconds,
                settings.BOXYARD_MAX_EXEC_TIMEOUT,
                "BOXYARD_MAX_EXEC_TIMEOUT",
            ),
            (
                "output_limit_bytes",
                self.output_limit_bytes,
                settings.BOXYARD_MAX_OUTPUT_BYTES,
                "BOXYARD_MAX_OUTPUT_BYTES",
            ),
            (
                "max_live_sandboxes",
                self.max_live_sandboxes,
                settings.BOXYARD_MAX_LIVE_SANDBOXES,
                "BOXYARD_MAX_LIVE_SANDBOXES",
            ),
            (
                "ttl_seconds",
                self.ttl_seconds,
                settings.BOXYARD_MAX_TTL_SECONDS,
                "BOXYARD_MAX_TTL_SECONDS",
            ),
        ]
        for field, value, maximum, setting in limits:
            if value is not None and value > maximum:
                errors[field] = ValidationError(
                    _("%(value)s is above the operator maximum %(maximum)s (%(setting)s)"),
                    params={"value": value, "maximum": maximum, "setting": setting},
                )
        if self.pool_size > self.max_live_sandboxes:
            errors["pool_size"] = ValidationError(
                _(
                    "%(size)s is more than the pipeline's max_live_sandboxes (%(most)s): pooled "
                    "sandboxes count as live"
                ),
                params={"size": self.pool_size, "most": self.max_live_sandboxes},
            )
        if self.network_enabled and not settings.BOXYARD_ALLOW_NETWORK:
            errors["network_enabled"] = ValidationError(
                _("the operator does not allow sandbox networking (BOXYARD_ALLOW_NETWORK)")
            )
        if not isinstance(self.env, dict) or not all(
            isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str)
            for k, v in (self.env or {}).items()
        ):
            errors["env"] = ValidationError(
                _("must map variable names (letters, digits, _) to string values")
            )
        if problem := process_problem(self.processes):
            errors["processes"] = ValidationError(problem.lazy())
        if errors:
            raise ValidationError(errors)


MAX_PROCESSES = 8
_PROCESS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PROCESS_KEYS = {"name", "cmd", "cwd", "env", "restart"}


def process_problem(processes: object) -> Message | None:
    """What is wrong with a pipeline's managed processes, in words (None when nothing)."""
    if not isinstance(processes, list):
        return N_("must be a list of processes")
    if len(processes) > MAX_PROCESSES:
        return N_("at most %(count)s processes", count=MAX_PROCESSES)
    names = set()
    for index, process in enumerate(processes):
        where = index + 1
        if not isinstance(process, dict):
            return N_("process %(index)s must be an object with name and cmd", index=where)
        if unknown := set(process) - _PROCESS_KEYS:
            return N_(
                "process %(index)s has unknown keys: %(keys)s",
                index=where,
                keys=", ".join(sorted(map(str, unknown))),
            )
        name = process.get("name")
        if not isinstance(name, str) or not _PROCESS_NAME.fullmatch(name):
            return N_(
                "process %(index)s: name must be 1-64 letters, digits, '.', '_' or '-'",
                index=where,
            )
        if name in names:
            return N_("process %(index)s: the name %(name)r is used twice", index=where, name=name)
        names.add(name)
        cmd = process.get("cmd")
        valid_cmd = (isinstance(cmd, str) and cmd.strip()) or (
            isinstance(cmd, list) and cmd and all(isinstance(arg, str) for arg in cmd) and cmd[0]
        )
        if not valid_cmd or "\x00" in str(cmd):
            return N_("%(name)s: cmd must be a shell string or a non-empty argv list", name=name)
        cwd = process.get("cwd", "/workspace")
        if not isinstance(cwd, str) or not cwd.startswith("/") or "\x00" in cwd:
            return N_("%(name)s: cwd must be an absolute path", name=name)
        env = process.get("env", {})
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str) and "\x00" not in v
            for k, v in env.items()
        ):
            return N_("%(name)s: env must map variable names to string values", name=name)
        if not isinstance(process.get("restart", True), bool):
            return N_("%(name)s: restart must be true or false", name=name)
    return None


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SkillMode(models.TextChoices):
    READ_ONLY = "ro", _("Read-only")
    READ_WRITE = "rw", _("Read-write")


class Skill(models.Model):
    """A host directory mounted into every sandbox of a pipeline at /workspace/.skills/{name}/."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="skills")
    name = models.CharField(
        max_length=64,
        validators=[
            RegexValidator(
                r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                _("letters, digits, '_', '.', '-', starting with a letter or digit"),
            )
        ],
    )
    host_path = models.CharField(max_length=500)
    mode = models.CharField(max_length=2, choices=SkillMode.choices, default=SkillMode.READ_ONLY)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["pipeline", "name"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "name"], name="unique_skill_per_pipeline")
        ]

    def __str__(self) -> str:
        return f"{self.pipeline}/{self.name}"

    @property
    def mount_path(self) -> str:
        return f"/workspace/.skills/{self.name}"

    def clean(self) -> None:
        path = Path(self.host_path)
        if not path.is_absolute():
            raise ValidationError({"host_path": _("must be an absolute path")})
        resolved = path.resolve()
        roots = [Path(root).resolve() for root in settings.BOXYARD_SKILL_ROOTS]
        if not any(resolved == root or root in resolved.parents for root in roots):
            raise ValidationError(
                {
                    "host_path": ValidationError(
                        _(
                            "%(path)s is outside the skill roots the operator allows (%(roots)s; "
                            "BOXYARD_SKILL_ROOTS)"
                        ),
                        params={"path": resolved, "roots": ", ".join(map(str, roots))},
                    )
                }
            )
        if not resolved.is_dir():
            raise ValidationError(
                {
                    "host_path": ValidationError(
                        _("%(path)s is not a directory"), params={"path": resolved}
                    )
                }
            )
        if _holds_docker_socket(resolved):
            raise ValidationError(
                {
                    "host_path": ValidationError(
                        _("%(path)s holds a Docker socket; it may never enter a sandbox"),
                        params={"path": resolved},
                    )
                }
            )


def _holds_docker_socket(directory: Path) -> bool:
    """A container runtime socket anywhere below a skill would give its sandbox the host."""
    for name in ("docker.sock", "containerd.sock", "podman.sock"):
        for found in directory.rglob(name):
            if found.is_socket():
                return True
    return False


TOKEN_PREFIX = "byd_"
# The shape E2B's SDKs expect of an API key: `e2b_` and 40 hex digits.
E2B_TOKEN_PREFIX = "e2b_"
TOKEN_SHAPES = ("boxyard", "e2b")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class PipelineTokenQuerySet(models.QuerySet["PipelineToken"]):
    def active(self) -> "PipelineTokenQuerySet":
        return self.filter(revoked_at__isnull=True)


class PipelineToken(models.Model):
    """An API token for one pipeline. Only its SHA-256 is stored; the token is shown once."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = PipelineTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.pipeline} {self.prefix}… ({self.name or 'token'})"

    @classmethod
    def issue(
        cls, pipeline: Pipeline, name: str = "", *, shape: str = "boxyard"
    ) -> tuple["PipelineToken", str]:
        """Create a token; returns the row and the plaintext, which is never stored.

        `shape` is how it is spelled, not what it may do: `boxyard` (`byd_…`), or `e2b`
        (`e2b_` and 40 hex digits, the API key E2B's SDKs take); both act for the pipeline
        alike, by any door."""
        if shape == "e2b":
            plaintext = E2B_TOKEN_PREFIX + secrets.token_hex(20)
        else:
            plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = cls.objects.create(
            pipeline=pipeline,
            name=name,
            prefix=plaintext[:10],
            digest=hash_token(plaintext),
        )
        return row, plaintext

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
