"""A sandbox's container on the engine: made for the row's current generation and started,
removed, or found gone. The state each outcome leads to is the lifecycle's
(`sandboxes.lifecycle`); this module does the engine work and says which transition it
earned."""

from typing import Any

from boxyard import chaos
from boxyard.actors import SYSTEM, Actor
from boxyard.errors import (
    N_,
    BoxyardError,
    ImageMissing,
    ImageNotAllowed,
    InvalidState,
    RuntimeFailure,
    RuntimeUnavailable,
)
from hosts.engines import get_runtime, runtime_of
from sandboxes import lifecycle
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.runtime import LABEL_AGENT, Runtime
from sandboxes.runtime.agent import agent_volume, forget
from sandboxes.services import specs


def provision(sandbox: Sandbox, actor: Actor = SYSTEM) -> Sandbox:
    """Make the sandbox's container of its current generation exist and run.

    Idempotent and safe to call from many openers at once: the volume and the container are
    created under deterministic names, and only one of them moves the row to running. Engine
    trouble (RuntimeUnavailable) leaves the row in `creating` for a retry; anything else puts
    it in `error` with the reason.
    """
    runtime = runtime_of(sandbox)
    try:
        specs.check_image(sandbox.image)
        image_labels = _image_labels(runtime, sandbox.image)
        workspace = runtime.ensure_workspace(
            sandbox.volume_name, specs.workspace_labels(sandbox), sandbox.pipeline.workspace_mb
        )
        spec = specs.build_spec(
            sandbox,
            image_labels,
            agent_volume(sandbox.image, runtime),
            disk=workspace.limit_bytes is not None,
        )
        chaos.point("create:volume")
        info = runtime.ensure_container(spec)
    except RuntimeUnavailable:
        raise  # the engine may be back in a moment: the row stays creating for a retry
    except (RuntimeFailure, ImageNotAllowed) as error:
        if lifecycle.move(sandbox, lifecycle.FAIL, actor, reason=error.message):
            try:  # half-made, it must not outlive the error
                runtime.remove_container(sandbox.container_name)
            except BoxyardError:
                pass  # the container of an errored row: the reconciler removes it
        raise
    chaos.point("create:started")
    lifecycle.move(
        sandbox,
        lifecycle.START,
        actor,
        fields={
            "container_id": info.id,
            "container_name": info.name,
            "agent": info.labels.get(LABEL_AGENT, ""),
            "workspace_limit_bytes": workspace.limit_bytes,
        },
        detail={"generation": sandbox.generation, "container": info.name},
    )
    return sandbox


def _image_labels(runtime: Runtime, image: str) -> dict[str, str]:
    labels = runtime.image_labels(image)
    if labels is not None:
        return labels
    try:
        runtime.pull(image)
    except RuntimeFailure as error:
        raise ImageMissing(
            N_(
                "image %(image)s is not on the engine and could not be pulled: %(error)s",
                image=image,
                error=error,
            )
        ) from error
    return runtime.image_labels(image) or {}


def remove(sandbox: Sandbox, *, delete_workspace: bool) -> None:
    """Remove the container of the current generation (and the workspace if asked)."""
    runtime = runtime_of(sandbox)
    if sandbox.container_id:
        forget(sandbox.container_id)
    # By id when it was recorded as running; else by its name, which a create that never got
    # as far as recording it used.
    runtime.remove_container(sandbox.container_id or sandbox.container_name)
    chaos.point("stop:container-removed")
    if delete_workspace:
        runtime.remove_workspace(sandbox.volume_name)


def remove_replaced(container: str, host: int | None) -> None:
    """Remove the container of a generation a restart just replaced (on Docker host `host`);
    if the engine refuses now, it is a stale generation the reconciler removes."""
    if not container:
        return
    forget(container)
    try:
        get_runtime(host).remove_container(container)
    except BoxyardError:
        pass


def gone(sandbox: Sandbox, error: BaseException, actor: Actor) -> InvalidState:
    """The container vanished under a running sandbox (the next open recreates it): recorded,
    and the error to give the caller."""
    lifecycle.move(sandbox, lifecycle.LOSE_CONTAINER, actor, reason=str(error))
    return InvalidState(
        N_(
            "the sandbox's container is gone; open the sandbox again to recreate it "
            "(the workspace is kept)"
        ),
        state=State.UNKNOWN,
    )


def mark_lost(
    sandbox: Sandbox, actor: Actor = SYSTEM, *, container_id: str | None = None, **detail: Any
) -> bool:
    """Its container is gone or dead: stopped, reason lost, workspace kept, lease released;
    the next open starts it again. True when this call made the change.

    With `container_id`, only while that is still the row's container. `detail` goes into the
    event (what the engine said).
    """
    if container_id or sandbox.container_id:
        forget(container_id or sandbox.container_id)
    return lifecycle.move(
        sandbox,
        lifecycle.LOSE,
        actor,
        reason=StopReason.LOST,
        container_id=container_id,
        detail=detail,
    )
