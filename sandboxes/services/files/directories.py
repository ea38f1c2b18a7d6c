"""Making a directory and moving a file or a directory in the workspace, inside the sandbox as
the sandbox user. A change needs the lease (the guard), is activity and is an event."""

from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput
from sandboxes import events, scripts
from sandboxes.guard import acting_on
from sandboxes.models import Sandbox
from sandboxes.scripts import WORKSPACE, sh
from sandboxes.services.files.inside import run_inside, verdict
from sandboxes.services.files.paths import workspace_path


def make_dir(
    sandbox: Sandbox,
    path: str,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> bool:
    """Make a directory and its parents; False (and nothing changed) when something is at
    `path` already."""
    target = workspace_path(path)
    with acting_on(
        sandbox, actor, N_("change files"), holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    result = run_inside(sandbox, sh(scripts.MKDIR, "boxyard-mkdir", target), actor)
    if result.exit_code == scripts.EXISTS:
        return False
    verdict(result, target)
    with transaction.atomic():
        events.record(actor, "file.directory_made", sandbox=sandbox, path=target)
    return True


def move_file(
    sandbox: Sandbox,
    source: str,
    destination: str,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
) -> str:
    """Move (rename) a file or a directory, over whatever file is at `destination`; its
    parents are made. Returns the destination's path."""
    origin = workspace_path(source, "source")
    target = workspace_path(destination, "destination")
    for field, named in (("source", origin), ("destination", target)):
        if named == WORKSPACE:
            raise InvalidInput(field, N_("names /workspace itself, not a file in it"))
    with acting_on(
        sandbox, actor, N_("change files"), holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    result = run_inside(sandbox, sh(scripts.MOVE, "boxyard-move", origin, target), actor)
    verdict(result, origin)
    with transaction.atomic():
        events.record(actor, "file.moved", sandbox=sandbox, path=origin, destination=target)
    return target
