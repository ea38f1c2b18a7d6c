"""From a sandbox row to a running container, and back.

Container names are deterministic, `<pipeline>-<readable key>-<sandbox id>-g<generation>`,
so that every concurrent opener of a sandbox converges on the same container (the engine
refuses a second container of that name and the loser adopts the winner's), and so that a
container of an older generation is recognisably stale.
"""

import hashlib
import json
import re
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from boxyard import chaos
from boxyard.actors import SYSTEM, Actor
from boxyard.errors import ImageNotAllowed, RuntimeFailure, RuntimeUnavailable
from pipelines.models import Pipeline, Skill, SkillMode, image_allowed
from sandboxes import metrics
from sandboxes.models import Lease, Sandbox, State, StopReason
from sandboxes.runtime import (
    AGENT_MOUNT,
    AGENT_PATH,
    LABEL_AGENT,
    LABEL_GENERATION,
    LABEL_PIPELINE,
    LABEL_SANDBOX,
    LABEL_SCOPE,
    LABEL_WORKSPACE_UID,
    ContainerGone,
    ContainerSpec,
    ImageMissing,
    Mount,
    get_runtime,
    labels_for,
)
from sandboxes.runtime.agent import agent_volume, forget
from sandboxes.scripts import WORKSPACE
from sandboxes.services import events

_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def _readable(text: str, length: int) -> str:
    return _UNSAFE.sub("-", text).strip("-.")[:length].strip("-.") or "x"


def container_name(sandbox: Sandbox) -> str:
    # The readable parts are only for people reading `docker ps`; the sandbox id makes the
    # name unique whatever the key sanitizes to ("a/b" and "a_b" get different sandboxes).
    return "by-{}-{}-{}-g{}".format(
        _readable(sandbox.pipeline.slug, 24),
        _readable(sandbox.scope_key, 32),
        sandbox.id.hex,
        sandbox.generation,
    )


def volume_name(sandbox: Sandbox) -> str:
    return f"by-ws-{sandbox.id.hex}"


def sandbox_labels(sandbox: Sandbox) -> dict[str, str]:
    return labels_for(
        **{
            LABEL_SANDBOX: str(sandbox.id),
            LABEL_PIPELINE: sandbox.pipeline.slug,
            LABEL_GENERATION: str(sandbox.generation),
            LABEL_SCOPE: sandbox.scope_key[:200],
        }
    )


def check_image(image: str) -> None:
    if not image_allowed(image):
        raise ImageNotAllowed(
            "image",
            f"{image!r} is not on the operator's image allowlist (BOXYARD_IMAGE_ALLOWLIST)",
        )


def skill_mounts(pipeline: Pipeline) -> tuple[Mount, ...]:
    mounts = []
    for skill in Skill.objects.filter(pipeline=pipeline).order_by("name"):
        skill.full_clean()  # the host path must still be a directory under a skill root
        mounts.append(
            Mount(
                source=skill.host_path,
                target=skill.mount_path,
                read_only=skill.mode != SkillMode.READ_WRITE,
                kind="bind",
            )
        )
    return tuple(mounts)


def _image_owns_workspace(image_labels: dict[str, str]) -> bool:
    """Whether the image's /workspace belongs to the sandbox user (Boxyard's images)."""
    return image_labels.get(LABEL_WORKSPACE_UID) == settings.BOXYARD_SANDBOX_USER.split(":")[0]


def profile_digest(pipeline: Pipeline) -> str:
    """What a pipeline's containers are made of, as a digest: a pooled sandbox made with
    another profile (the pipeline changed since) is not handed out."""
    skills = list(Skill.objects.filter(pipeline=pipeline).order_by("name").values_list(
        "name", "host_path", "mode"
    ))
    made_of = [
        pipeline.effective_image, pipeline.cpus, pipeline.memory_mb, pipeline.pids_limit,
        pipeline.tmp_mb, pipeline.network_enabled, sorted((pipeline.env or {}).items()),
        pipeline.processes, skills, pipeline.retention, pipeline.workspace_mb,
    ]
    return hashlib.sha256(json.dumps(made_of, default=str).encode()).hexdigest()[:32]


def build_spec(
    sandbox: Sandbox,
    image_labels: dict[str, str],
    agent: tuple[str, str] | None = None,
    *,
    disk: bool = True,
) -> ContainerSpec:
    """The container of a sandbox; `agent` is (volume, digest) of the agent to mount, `disk`
    whether the workspace is a disk of its own (its root is the sandbox user's already)."""
    pipeline = sandbox.pipeline
    workspace = Mount(
        source=sandbox.volume_name,
        target=WORKSPACE,
        no_copy=disk or not _image_owns_workspace(image_labels),
    )
    mounts = (workspace, *skill_mounts(pipeline))
    labels = sandbox_labels(sandbox)
    agent_path = None
    if agent is not None:
        volume, digest = agent
        mounts += (Mount(source=volume, target=AGENT_MOUNT, read_only=True, no_copy=True),)
        labels[LABEL_AGENT] = digest
        agent_path = AGENT_PATH
    return ContainerSpec(
        name=sandbox.container_name or container_name(sandbox),
        image=sandbox.image,
        labels=labels,
        user=settings.BOXYARD_SANDBOX_USER,
        mounts=mounts,
        env={"HOME": WORKSPACE, "LANG": "C.UTF-8", **(pipeline.env or {})},
        workdir=WORKSPACE,
        cpus=pipeline.cpus,
        memory_mb=pipeline.memory_mb,
        pids_limit=pipeline.pids_limit,
        tmp_mb=pipeline.tmp_mb,
        network=pipeline.network_enabled,
        agent=agent_path,
    )


def provision(sandbox: Sandbox, actor: Actor = SYSTEM) -> Sandbox:
    """Make the sandbox's container of its current generation exist and run.

    Idempotent and safe to call from many openers at once: the volume and the container are
    created under deterministic names, and only the transition creating → running of this
    generation is recorded. Engine trouble (RuntimeUnavailable) leaves the row in `creating`
    for a retry; anything else puts it in `error` with the reason.
    """
    runtime = get_runtime()
    name = sandbox.container_name or container_name(sandbox)
    pipeline = sandbox.pipeline
    try:
        check_image(sandbox.image)
        image_labels = runtime.image_labels(sandbox.image)
        if image_labels is None:
            try:
                runtime.pull(sandbox.image)
            except RuntimeFailure as error:
                raise ImageMissing(
                    f"image {sandbox.image} is not on the engine and could not be pulled: "
                    f"{error.message}"
                ) from error
            image_labels = runtime.image_labels(sandbox.image) or {}
        workspace = runtime.ensure_workspace(
            sandbox.volume_name, labels_for(**{LABEL_SANDBOX: str(sandbox.id)}), pipeline.workspace_mb
        )
        spec = build_spec(
            sandbox, image_labels, agent_volume(sandbox.image), disk=workspace.limit_bytes is not None
        )
        chaos.point("create:volume")
        info = runtime.ensure_container(spec)
    except RuntimeUnavailable:
        raise  # the engine may be back in a moment: the row stays creating for a retry
    except (RuntimeFailure, ImageNotAllowed) as error:
        _mark_error(sandbox, name, error.message, actor)
        raise
    chaos.point("create:started")
    with transaction.atomic():
        Sandbox.objects.filter(
            pk=sandbox.pk, generation=sandbox.generation, state__in=[State.CREATING, State.UNKNOWN]
        ).update(
            state=State.RUNNING,
            container_id=info.id,
            container_name=info.name,
            agent=info.labels.get(LABEL_AGENT, ""),
            workspace_limit_bytes=workspace.limit_bytes,
            started_at=Now(),
            last_activity_at=Now(),
            idle_deadline=Now() + timedelta(seconds=pipeline.idle_timeout_seconds),
            # The time to live counts from the start of this run of the sandbox.
            expires_at=Now() + timedelta(seconds=pipeline.ttl_seconds),
            status_detail="",
            stop_reason="",
        )
        sandbox.refresh_from_db()
        if sandbox.container_id == info.id and sandbox.state == State.RUNNING:
            events.record(
                actor, "sandbox.started", sandbox=sandbox, generation=sandbox.generation,
                container=info.name,
            )
    return sandbox


def _mark_error(sandbox: Sandbox, name: str, message: str, actor: Actor) -> None:
    with transaction.atomic():
        updated = Sandbox.objects.filter(
            pk=sandbox.pk, generation=sandbox.generation, state__in=[State.CREATING, State.UNKNOWN]
        ).update(state=State.ERROR, status_detail=message[:2000], stop_reason=StopReason.ERROR)
        if updated:
            events.record(actor, "sandbox.error", sandbox=sandbox, reason=message[:200])
    if updated:
        # A container half-made for this generation must not outlive the error.
        try:
            get_runtime().remove_container(name)
        except RuntimeFailure:
            pass
    sandbox.refresh_from_db()


def remove(sandbox: Sandbox, *, delete_workspace: bool) -> None:
    """Remove the container of the current generation (and the workspace if asked)."""
    runtime = get_runtime()
    if sandbox.container_id:
        forget(sandbox.container_id)
    # By id when it was recorded as running; else by its name, which a create that never got
    # as far as recording it used.
    runtime.remove_container(sandbox.container_id or sandbox.container_name or container_name(sandbox))
    chaos.point("stop:container-removed")
    if delete_workspace:
        runtime.remove_workspace(sandbox.volume_name)


def mark_gone(sandbox: Sandbox, error: ContainerGone, actor: Actor = SYSTEM) -> None:
    """The container vanished under a running sandbox: the next open recreates it."""
    with transaction.atomic():
        updated = Sandbox.objects.filter(pk=sandbox.pk, state=State.RUNNING).update(
            state=State.UNKNOWN, status_detail=str(error)[:2000]
        )
        if updated:
            events.record(actor, "sandbox.container_lost", sandbox=sandbox, reason=str(error)[:200])
    sandbox.refresh_from_db()


def mark_lost(
    sandbox: Sandbox, actor: Actor = SYSTEM, *, container_id: str | None = None, **detail: Any
) -> bool:
    """Its container is gone or dead: stopped, reason lost, workspace kept, lease released;
    the next open starts it again. True when this call made the change.

    Only from running or unknown, in the generation the caller saw, and, with `container_id`,
    while that is still the row's container: a word about an older container says nothing
    about the one that replaced it. `detail` goes into the event (what the engine said).
    """
    if container_id or sandbox.container_id:
        forget(container_id or sandbox.container_id)
    rows = Sandbox.objects.filter(
        pk=sandbox.pk, generation=sandbox.generation, state__in=[State.RUNNING, State.UNKNOWN]
    )
    if container_id is not None:
        rows = rows.filter(container_id=container_id)
    with transaction.atomic():
        updated = rows.update(
            state=State.STOPPED, stop_reason=StopReason.LOST, stopped_at=Now(), container_id="",
            pooled=False,
        )
        if updated:
            Lease.objects.filter(sandbox=sandbox).update(
                holder="", expires_at=None, taken_over_from=""
            )
            events.record(
                actor, "sandbox.stopped", sandbox=sandbox, reason=StopReason.LOST, **detail
            )
    if updated:
        metrics.count("boxyard_sandboxes_cleaned_total", sandbox.pipeline.slug, StopReason.LOST)
    return bool(updated)
