"""The E2B control plane's shapes: what E2B's SDKs send (`NewSandbox`, `ConnectSandbox`,
`TimeoutRequest`, the list's query) and the answers their models parse (`created`, `detail`,
`listed`, `metric`), made from a Boxyard sandbox.

Words translated here, nowhere else: a sandbox that runs (or is on its way) is `running`; one
stopped with its workspace kept (or failed, which an open starts again) is `paused`; a
destroyed one is gone (404). `base` (and the code interpreter's `code-interpreter-v1`) is
the template of the pipeline's own image.
"""

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from ninja import Schema
from pydantic import ConfigDict, Field

from boxyard.errors import N_, InvalidInput
from sandboxes.e2b.common import ENVD_VERSION, envd_token, traffic_token
from sandboxes.models import Sandbox, State
from sandboxes.runtime import Usage

BASE_TEMPLATE = "base"
# The code interpreter SDK's default template: the pipeline's image too, its kernels served on
# port 49999 (`envd.interpreter`).
CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1"
RUNNING, PAUSED = "running", "paused"
_PAUSED_STATES = (State.STOPPED, State.ERROR)
# What the list's `state` filter names, as Boxyard's states.
STATES: dict[str, list[str]] = {
    RUNNING: [s for s in State.values if s not in (*_PAUSED_STATES, State.DESTROYED)],
    PAUSED: list(_PAUSED_STATES),
}


class _In(Schema):
    # The SDKs send more than Boxyard acts on (network rules, workload identity...): what a
    # sandbox here cannot honour is refused by name below; the rest is let through.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class NewSandbox(_In):
    template_id: str = Field(alias="templateID", min_length=1, max_length=300)
    timeout: int | None = Field(None, ge=1)
    metadata: dict[str, str] | None = None
    env_vars: dict[str, str] | None = Field(None, alias="envVars")
    secure: bool | None = None
    allow_internet_access: bool | None = None
    auto_pause: bool | None = Field(None, alias="autoPause")
    mcp: dict[str, Any] | None = None
    volume_mounts: list[Any] | None = Field(None, alias="volumeMounts")


class ConnectSandbox(_In):
    timeout: int | None = Field(None, ge=1)


class TimeoutRequest(_In):
    timeout: int = Field(ge=1)


def is_pipeline_template(template: str, image: str) -> bool:
    """Whether a template names the pipeline's image: `base`, the code interpreter's, or the
    image itself."""
    return template in (BASE_TEMPLATE, CODE_INTERPRETER_TEMPLATE, image)


def check_new(body: NewSandbox, image: str) -> None:
    """What a create asks that no Boxyard sandbox of this pipeline can be: InvalidInput
    naming the field."""
    if not is_pipeline_template(body.template_id, image):
        raise InvalidInput(
            "templateID",
            N_(
                "unknown template %(template)r: this pipeline's sandboxes are made from "
                "%(base)r (its image %(image)s)",
                template=body.template_id,
                base=BASE_TEMPLATE,
                image=image,
            ),
        )
    if body.mcp:
        raise InvalidInput("mcp", N_("MCP servers inside an E2B sandbox are not offered here"))
    if body.volume_mounts:
        raise InvalidInput(
            "volumeMounts", N_("volumes are not offered here: the workspace is the sandbox's")
        )


def state_filter(text: str | None) -> list[str]:
    """Boxyard's states for the list's `state` (`running,paused`; none: both)."""
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    unknown = [name for name in names if name not in STATES]
    if unknown:
        raise InvalidInput(
            "state", N_("must name running or paused, not %(names)s", names=", ".join(unknown))
        )
    return [state for name in (names or list(STATES)) for state in STATES[name]]


def state_of(sandbox: Sandbox) -> str:
    return PAUSED if sandbox.state in _PAUSED_STATES else RUNNING


def _started(sandbox: Sandbox) -> datetime:
    return sandbox.started_at or sandbox.created_at


def _ends(sandbox: Sandbox) -> datetime:
    if sandbox.expires_at is not None:
        return sandbox.expires_at
    return _started(sandbox) + timedelta(seconds=sandbox.pipeline.ttl_seconds)


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def created(sandbox: Sandbox) -> dict[str, Any]:
    """A created or connected sandbox, with the token that opens its sandbox API."""
    return {
        "templateID": BASE_TEMPLATE,
        "sandboxID": str(sandbox.pk),
        "clientID": sandbox.pipeline.slug,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": envd_token(sandbox.pk),
        "trafficAccessToken": traffic_token(sandbox.pk),
        "domain": None,
    }


def listed(sandbox: Sandbox) -> dict[str, Any]:
    pipeline = sandbox.pipeline
    return {
        "templateID": BASE_TEMPLATE,
        "sandboxID": str(sandbox.pk),
        "clientID": pipeline.slug,
        "startedAt": _when(_started(sandbox)),
        "endAt": _when(_ends(sandbox)),
        "cpuCount": max(1, math.ceil(pipeline.cpus)),
        "memoryMB": pipeline.memory_mb,
        "diskSizeMB": pipeline.workspace_mb,
        "state": state_of(sandbox),
        "envdVersion": ENVD_VERSION,
        "metadata": dict(sandbox.metadata or {}),
        "volumeMounts": [],
    }


def detail(sandbox: Sandbox) -> dict[str, Any]:
    return {
        **listed(sandbox),
        "envdAccessToken": envd_token(sandbox.pk),
        "domain": None,
        "allowInternetAccess": sandbox.pipeline.network_enabled,
    }


def metric(sandbox: Sandbox, usage: Usage | None, disk_used: int | None) -> dict[str, Any]:
    """One reading. The CPU share is the container's average since it started (one reading
    of the engine's counters, no wait for a second); a stopped sandbox reads as zero."""
    now = timezone.now()
    pipeline = sandbox.pipeline
    cpus = max(1, math.ceil(pipeline.cpus))
    cpu_pct = 0.0
    memory = memory_total = 0
    if usage is not None:
        memory, memory_total = usage.memory_bytes, usage.memory_limit_bytes
        running_ns = (now - _started(sandbox)).total_seconds() * 1e9
        if running_ns > 0:
            cpu_pct = min(100.0, round(100 * usage.cpu_ns / (running_ns * cpus), 2))
    return {
        "timestamp": _when(now),
        "timestampUnix": int(now.timestamp()),
        "cpuCount": cpus,
        "cpuUsedPct": cpu_pct,
        "memUsed": memory,
        "memTotal": memory_total or pipeline.memory_mb * 1024 * 1024,
        "memCache": 0,
        "diskUsed": disk_used or 0,
        "diskTotal": sandbox.workspace_limit_bytes or pipeline.workspace_mb * 1024 * 1024,
    }
