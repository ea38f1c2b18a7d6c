import uuid
from datetime import timedelta
from typing import Any, cast

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from hosts.models import DockerHost, default_host_pk
from pipelines.models import Pipeline, Retention


class State(models.TextChoices):
    CREATING = "creating", _("Creating")
    RUNNING = "running", _("Running")
    ERROR = "error", _("Error")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    UNKNOWN = "unknown", _("Unknown")
    MOVING = "moving", _("Moving")
    DESTROYED = "destroyed", _("Destroyed")


class StopReason(models.TextChoices):
    IDLE = "idle", _("Idle timeout")
    TTL = "ttl", _("Time to live reached")
    CLOSED = "closed", _("Closed by its holder")
    ADMIN = "admin", _("Stopped by an admin")
    ERROR = "error", _("Error")
    LOST = "lost", _("Container lost")
    QUOTA = "quota", _("Quota")


# A burst of calls on one sandbox stamps its activity about this often, not on every call.
ACTIVITY_GRANULARITY = timedelta(seconds=1)

# States in which the (pipeline, scope key) pair is taken: at most one such row per pair.
# A stopped sandbox keeps its key: the next open starts it again with its workspace.
LIVE_STATES = [s for s in State.values if s != State.DESTROYED]
# States that hold a quota slot and a place on a host: a stopped sandbox keeps its workspace
# but no container.
QUOTA_STATES = [State.CREATING, State.RUNNING, State.STOPPING, State.UNKNOWN]


class SandboxQuerySet(models.QuerySet["Sandbox"]):
    def live(self) -> "SandboxQuerySet":
        return self.exclude(state=State.DESTROYED)

    def for_pipeline(self, pipeline: Pipeline) -> "SandboxQuerySet":
        return self.filter(pipeline=pipeline)

    def busy(self) -> "SandboxQuerySet":
        """Sandboxes with a command running (foreground or background): active, whatever
        their last activity says, so the reaper leaves them alone."""
        running = Exec.objects.filter(sandbox=models.OuterRef("pk"), state=ExecState.RUNNING)
        return self.filter(models.Exists(running))

    def locked(self) -> "SandboxQuerySet":
        """Rows locked for a state change, with their pipeline (not locked) alongside.

        NO KEY UPDATE, not UPDATE: rows that merely reference the sandbox (execs, events, the
        lease) take KEY SHARE locks on it, and a plain FOR UPDATE would queue against them and
        deadlock concurrent operations on PostgreSQL. `of=self` keeps the joined pipeline
        row unlocked. (SQLite ignores all of this and serializes whole transactions.)
        """
        return self.select_for_update(no_key=True, of=("self",)).select_related("pipeline")


class Sandbox(models.Model):
    """One container plus its workspace, its state, its lease and its history.

    The row is the truth of intent; container labels (sandbox id, generation) are the truth
    of what runs. `generation` grows every time a new container is made for the sandbox, so a
    container of an older generation is recognisably stale.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    pipeline = models.ForeignKey(Pipeline, on_delete=models.PROTECT, related_name="sandboxes")
    host = models.ForeignKey(
        DockerHost,
        on_delete=models.PROTECT,
        related_name="sandboxes",
        default=default_host_pk,
        help_text="The Docker host its container and workspace are on.",
    )
    scope_key = models.CharField(max_length=512)
    variables = models.JSONField(default=dict, help_text="The variables of the opening request.")
    metadata = models.JSONField(
        default=dict,
        blank=True,
        help_text="Labels its caller gave it (text to text), to find it again by: an E2B "
        "sandbox's metadata.",
    )
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="Environment its caller gave it, on top of the pipeline's, for the "
        "containers made for it from now on.",
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.CREATING)
    stop_reason = models.CharField(max_length=16, choices=StopReason.choices, blank=True)
    status_detail = models.TextField(blank=True, help_text="Why it is in error, in words.")
    retention = models.CharField(max_length=20, choices=Retention.choices)
    image = models.CharField(max_length=300)
    generation = models.PositiveIntegerField(default=1)
    container_id = models.CharField(max_length=80, blank=True)
    container_name = models.CharField(max_length=200, blank=True)
    volume_name = models.CharField(max_length=200)
    agent = models.CharField(
        max_length=64, blank=True, help_text="Digest of the agent in its container; empty: none."
    )
    workspace_limit_bytes = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="The size of the workspace's disk; empty: a workspace made before workspaces "
        "had disks, on which no limit is enforced.",
    )

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    idle_deadline = models.DateTimeField(
        null=True, blank=True, help_text="Reaped for idleness after this (activity moves it)."
    )
    stopped_at = models.DateTimeField(null=True, blank=True)
    destroyed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Absolute end of this run (TTL), from its start."
    )
    destroy_requested = models.BooleanField(
        default=False, help_text="The stop in progress also deletes the workspace."
    )
    pooled = models.BooleanField(
        default=False, help_text="Started ahead in the warm pool, not yet claimed by a scope key."
    )
    profile = models.CharField(
        max_length=64, blank=True, help_text="Digest of the pipeline profile it was made with."
    )
    health_failures = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = SandboxQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["pipeline", "scope_key"],
                condition=~Q(state="destroyed"),
                name="one_live_sandbox_per_scope_key",
            )
        ]
        indexes = [
            models.Index(fields=["state"]),
            models.Index(fields=["pipeline", "state"]),
            # What the reaper scans: running sandboxes by deadline.
            models.Index(fields=["state", "idle_deadline"]),
            models.Index(fields=["state", "expires_at"]),
            models.Index(fields=["pipeline", "pooled", "state"]),
            # The fleet page in its default order: newest first.
            models.Index(fields=["created_at", "id"]),
            # Placement: what each host holds.
            models.Index(fields=["host", "state"]),
        ]

    def __str__(self) -> str:
        return f"{self.pipeline.slug}:{self.scope_key} ({self.state})"

    @property
    def workdir(self) -> str:
        return "/workspace"

    def record_activity(self, *, force: bool = False) -> None:
        """Stamp `last_activity_at` and move `idle_deadline` (what idle reaping reads);
        skipped when this copy of the row says it was stamped less than
        `ACTIVITY_GRANULARITY` ago, unless `force`."""
        now = timezone.now()
        recent = (
            self.last_activity_at is not None and now - self.last_activity_at < ACTIVITY_GRANULARITY
        )
        if recent and not force:
            return
        idle = timedelta(seconds=self.pipeline.idle_timeout_seconds)
        Sandbox.objects.filter(pk=self.pk).update(
            last_activity_at=Now(), idle_deadline=Now() + idle
        )
        self.last_activity_at = now
        self.idle_deadline = now + idle


class Lease(models.Model):
    """Who controls a sandbox now, until when, and the fencing epoch.

    The epoch grows at every acquire and takeover; a mutating call that presents an older
    epoch is refused. Expiry is compared with the database's clock, never a worker's. A
    takeover's lease does not lapse with the pipeline's lease timeout: it holds until released,
    or until the operator's ceiling (BOXYARD_TAKEOVER_MAX_SECONDS).
    """

    sandbox = models.OneToOneField(
        Sandbox, on_delete=models.CASCADE, primary_key=True, related_name="lease"
    )
    holder = models.CharField(max_length=200, blank=True, help_text="Empty when free.")
    epoch = models.PositiveBigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    acquired_by = models.CharField(
        max_length=200,
        blank=True,
        help_text="Who took the lease for its holder: a bot's token, an admin, Boxyard.",
    )
    taken_over_from = models.CharField(
        max_length=200, blank=True, help_text="The holder that lost the lease to a takeover."
    )
    taken_over = models.BooleanField(
        default=False,
        help_text=(
            "Held by a takeover: it lasts until released, or until expires_at when the "
            "operator set a ceiling (none: no expiry); calls do not renew it."
        ),
    )

    def __str__(self) -> str:
        return f"{self.holder or 'free'} (epoch {self.epoch})"


SESSION_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


class ShellSession(models.Model):
    """A named shell session of a sandbox, as it was created.

    Its live state (cwd, exported variables, functions) is kept by the agent in the sandbox,
    which outlives any Boxyard process; this row restores the session if the container
    itself is recreated. The `default` session needs no row.
    """

    id = models.BigAutoField(primary_key=True)
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="sessions")
    name = models.CharField(max_length=64)
    cwd = models.CharField(max_length=1024, default="/workspace")
    env = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["sandbox", "name"], name="one_session_per_name")
        ]

    def __str__(self) -> str:
        return self.name


class CodeLanguage(models.TextChoices):
    PYTHON = "python", "Python"
    JAVASCRIPT = "javascript", "JavaScript"


class CodeContext(models.Model):
    """A code context of a sandbox (a stateful interpreter), as it was created.

    Its state (variables, imports) lives in the interpreter the agent runs in the sandbox;
    this row brings the context back, without that state, if the container or the agent is
    new. The `default` context (Python in the sandbox's workdir) needs no row.
    """

    id = models.BigAutoField(primary_key=True)
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="code_contexts")
    name = models.CharField(max_length=64)
    language = models.CharField(
        max_length=16, choices=CodeLanguage.choices, default=CodeLanguage.PYTHON
    )
    cwd = models.CharField(max_length=1024, default="/workspace")
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["sandbox", "name"], name="one_code_context_per_name")
        ]

    def __str__(self) -> str:
        return self.name


class ExecState(models.TextChoices):
    RUNNING = "running", _("Running")
    COMPLETED = "completed", _("Completed")
    TIMED_OUT = "timed_out", _("Timed out")
    FAILED = "failed", _("Failed to run")
    KILLED = "killed", _("Killed")
    LOST = "lost", _("Lost")


class Exec(models.Model):
    """One command run in a sandbox, recorded before it starts and completed after."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="execs")
    session = models.CharField(max_length=64, default="default")
    # A run of code: its context's language (`session` is then the context's name); empty
    # for a command.
    language = models.CharField(max_length=16, blank=True, default="")
    command: Any = models.JSONField(help_text="argv list, or a shell string")
    cwd = models.CharField(max_length=1024)
    env = models.JSONField(default=dict, blank=True)
    background = models.BooleanField(default=False)
    actor = models.CharField(max_length=200, help_text="Who asked: bot holder or admin.")
    holder = models.CharField(max_length=200, blank=True)
    epoch = models.PositiveBigIntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=ExecState.choices, default=ExecState.RUNNING)
    timeout_seconds = models.PositiveIntegerField()
    exit_code = models.IntegerField(null=True, blank=True)
    stdout = models.TextField(blank=True)
    stderr = models.TextField(blank=True)
    stdout_bytes = models.PositiveBigIntegerField(default=0)
    stderr_bytes = models.PositiveBigIntegerField(default=0)
    stdout_truncated = models.BooleanField(default=False)
    stderr_truncated = models.BooleanField(default=False)
    output_size = models.PositiveBigIntegerField(
        default=0,
        help_text="Bytes of output stored with it (stdout and stderr), which retention counts; "
        "0 once pruned.",
    )
    session_restarted = models.BooleanField(
        default=False, help_text="The command ended its shell; the session was started again."
    )
    oom_killed = models.BooleanField(
        default=False, help_text="The kernel killed it for want of memory (the sandbox's limit)."
    )
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["sandbox", "-started_at"]),
            # The fleet's commands a minute; retention's oldest output first and its total,
            # read from the index alone (the row's output_size lies past its output).
            models.Index(fields=["started_at", "output_size"]),
        ]

    def __str__(self) -> str:
        return f"{self.command!r} → {self.exit_code}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.output_size = stored_size(self.stdout, self.stderr)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and {"stdout", "stderr"} & set(update_fields):
            kwargs["update_fields"] = {*update_fields, "output_size"}
        super().save(*args, **kwargs)

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated


def stored_size(stdout: str, stderr: str) -> int:
    """Bytes that an exec's stored output takes (what `Exec.output_size` holds)."""
    return sum(len(text.encode("utf-8", errors="surrogatepass")) for text in (stdout, stderr))


class EventQuerySet(models.QuerySet["Event"]):
    def update(self, **kwargs: Any) -> int:
        raise TypeError("events are append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("events are append-only")


class Event(models.Model):
    """An append-only record of a lifecycle change: who, what, when, why. Only retention
    deletes events, past BOXYARD_HISTORY_RETENTION_DAYS (`services/pruning.py`)."""

    pipeline = models.ForeignKey(
        Pipeline, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    sandbox = models.ForeignKey(
        Sandbox, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    host = models.ForeignKey(
        DockerHost, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=64)
    reason = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # django-stubs types an AutoField's pk as int: it is None until the row is saved.
        if cast("int | None", self.pk) is not None:
            raise TypeError("events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("events are append-only")


class PeriodicJob(models.Model):
    """A periodic job (reaping, reconciliation, pool refills): the lock that lets one run at
    a time across every worker and scheduler, and how its last run went."""

    name = models.CharField(primary_key=True, max_length=64)
    holder = models.CharField(max_length=64, blank=True, help_text="The run holding the lock.")
    running_until = models.DateTimeField(
        null=True, blank=True, help_text="The lock lapses then, should its run die holding it."
    )
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_result = models.JSONField(default=dict, blank=True)
    last_error = models.TextField(blank=True)

    def __str__(self) -> str:
        return self.name


class MetricTotal(models.Model):
    """A running total of a counter metric, per pipeline and label (a reason, a state, a
    histogram bucket). Each process adds up its counts in memory and adds them here every
    few seconds, so the totals are the whole installation's, across processes and restarts."""

    name = models.CharField(max_length=64)
    pipeline = models.CharField(max_length=50, blank=True, help_text="The pipeline's slug.")
    label = models.CharField(max_length=64, blank=True)
    value = models.FloatField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name", "pipeline", "label"], name="one_total_per_series"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.pipeline},{self.label}}} = {self.value}"


class FleetSample(models.Model):
    """The fleet at one moment, taken every minute for the dashboard's charts: live sandboxes
    by state, and the running totals of creates, reuses and stops by reason (the charts show
    what changed between samples). `pipeline` empty: all pipelines together."""

    at = models.DateTimeField(db_index=True)
    pipeline = models.CharField(max_length=50, blank=True)
    live = models.JSONField(default=dict, help_text="state → sandboxes")
    created = models.PositiveBigIntegerField(default=0)
    reused = models.PositiveBigIntegerField(default=0)
    cleaned = models.JSONField(default=dict, help_text="stop reason → running total")

    class Meta:
        ordering = ["at"]
        indexes = [models.Index(fields=["pipeline", "at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.pipeline or 'all'}"


class SessionSandbox(models.Model):
    """The sandbox a protocol's session opened (an MCP session whose pipeline's scope gives
    every open a sandbox of its own), so that any web process, also after a restart, finds it
    again for the session's next call. A pipeline keeps at most as many as it may have
    sessions open; a row goes when its session ends, or once unused for a session's idle time.
    """

    session = models.CharField(
        primary_key=True, max_length=200, help_text="The protocol and its session's id."
    )
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="+")
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="+")
    used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["pipeline", "used_at"])]

    def __str__(self) -> str:
        return f"{self.session} → {self.sandbox_id}"
