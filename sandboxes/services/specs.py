"""What a sandbox's container is made of: its image (on the operator's allowlist), its
mounts (the workspace, the pipeline's skills, the agent), its environment, its limits and
labels, all from the sandbox's row and its pipeline's profile. The runtime adds only the
hardening every container gets."""

import hashlib
import json

from django.conf import settings

from boxyard.errors import N_, ImageNotAllowed
from pipelines.models import Pipeline, Skill, SkillMode, image_allowed
from sandboxes.models import Sandbox
from sandboxes.runtime import (
    AGENT_MOUNT,
    AGENT_PATH,
    LABEL_AGENT,
    LABEL_GENERATION,
    LABEL_PIPELINE,
    LABEL_SANDBOX,
    LABEL_SCOPE,
    LABEL_WORKSPACE_UID,
    ContainerSpec,
    Mount,
    labels_for,
)
from sandboxes.scripts import WORKSPACE


def check_image(image: str) -> None:
    if not image_allowed(image):
        raise ImageNotAllowed(
            "image",
            N_(
                "%(image)r is not on the operator's image allowlist (BOXYARD_IMAGE_ALLOWLIST)",
                image=image,
            ),
        )


def profile_digest(pipeline: Pipeline) -> str:
    """What a pipeline's containers are made of, as a digest: a pooled sandbox made with
    another profile (the pipeline changed since) is not handed out."""
    skills = list(
        Skill.objects.filter(pipeline=pipeline)
        .order_by("name")
        .values_list("name", "host_path", "mode")
    )
    made_of = [
        pipeline.effective_image, pipeline.cpus, pipeline.memory_mb, pipeline.pids_limit,
        pipeline.tmp_mb, pipeline.network_enabled, sorted((pipeline.env or {}).items()),
        pipeline.processes, skills, pipeline.retention, pipeline.workspace_mb,
        sorted((pipeline.host_labels or {}).items()),
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(made_of, default=str).encode()).hexdigest()[:32]


def workspace_labels(sandbox: Sandbox) -> dict[str, str]:
    return labels_for(**{LABEL_SANDBOX: str(sandbox.id)})


HOME_ALIAS = "/home/user"


def build_spec(
    sandbox: Sandbox,
    image_labels: dict[str, str],
    agent: tuple[str, str] | None = None,
    *,
    disk: bool = True,
) -> ContainerSpec:
    """The container of a sandbox's current generation; `agent` is (volume, digest) of the
    agent to mount, `disk` whether the workspace is a disk of its own (its root is the sandbox
    user's already)."""
    pipeline = sandbox.pipeline
    workspace = Mount(
        source=sandbox.volume_name,
        target=WORKSPACE,
        no_copy=disk or not _image_owns_workspace(image_labels),
    )
    # The same workspace where the E2B SDKs expect their user's home: a file written at
    # /home/user/x is the workspace's x, and a command started there says so (`pwd`).
    home = Mount(source=sandbox.volume_name, target=HOME_ALIAS, no_copy=True)
    mounts = (workspace, home, *_skill_mounts(pipeline))
    labels = labels_for(
        **{
            LABEL_SANDBOX: str(sandbox.id),
            LABEL_PIPELINE: pipeline.slug,
            LABEL_GENERATION: str(sandbox.generation),
            LABEL_SCOPE: sandbox.scope_key[:200],
        }
    )
    agent_path = None
    if agent is not None:
        volume, digest = agent
        mounts += (Mount(source=volume, target=AGENT_MOUNT, read_only=True, no_copy=True),)
        labels[LABEL_AGENT] = digest
        agent_path = AGENT_PATH
    return ContainerSpec(
        name=sandbox.container_name,
        image=sandbox.image,
        labels=labels,
        user=settings.BOXYARD_SANDBOX_USER,
        mounts=mounts,
        env={"HOME": WORKSPACE, "LANG": "C.UTF-8", **(pipeline.env or {}), **(sandbox.env or {})},
        workdir=WORKSPACE,
        cpus=pipeline.cpus,
        memory_mb=pipeline.memory_mb,
        pids_limit=pipeline.pids_limit,
        tmp_mb=pipeline.tmp_mb,
        network=pipeline.network_enabled,
        agent=agent_path,
        agent_output_bytes=agent_output_bytes(pipeline.memory_mb) if agent_path else None,
    )


def agent_output_bytes(memory_mb: int) -> int:
    """What the agent keeps of its commands' output in all: BOXYARD_AGENT_OUTPUT_BYTES, and
    never more than a sixteenth of the sandbox's memory (the agent's memory is the sandbox's)."""
    return min(settings.BOXYARD_AGENT_OUTPUT_BYTES, memory_mb * 1024 * 1024 // 16)


def _skill_mounts(pipeline: Pipeline) -> tuple[Mount, ...]:
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
