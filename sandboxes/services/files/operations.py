"""Writing and deleting files under /workspace, inside the sandbox as the sandbox user. A
change needs the lease (the guard); every call is activity; a change is an event."""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput, UploadIncomplete, WorkspaceFull
from sandboxes import events, scripts
from sandboxes.guard import acting_on
from sandboxes.models import Sandbox
from sandboxes.runtime import ExecResult, agentfiles
from sandboxes.scripts import WORKSPACE, sh
from sandboxes.services.files.inside import Fed, deadline_for, direct, run_inside, verdict
from sandboxes.services.files.paths import clean_mode, workspace_path


@dataclass(frozen=True)
class Written:
    path: str
    size_bytes: int
    sha256: str


def write_file(
    sandbox: Sandbox,
    path: str,
    data: bytes | Iterable[bytes],
    actor: Actor,
    *,
    size: int | None = None,
    mode: str | None = None,
    overwrite: bool = True,
    holder: str | None = None,
    epoch: int | None = None,
) -> Written:
    """Write a file of `size` bytes (`data`'s length when it is bytes) from `data`, which may
    be a stream of any length: parents are created, the file is replaced atomically, and
    nothing is left behind when the stream ends early or the workspace fills up."""
    target = workspace_path(path)
    if target == WORKSPACE:
        raise InvalidInput("path", N_("names /workspace itself, not a file in it"))
    permissions = clean_mode(mode)
    if isinstance(data, bytes):
        size = len(data)
    if size is None or size < 0:
        raise InvalidInput("size", N_("a stream's size must be given"))
    with acting_on(
        sandbox, actor, N_("change files"), holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    limit = sandbox.workspace_limit_bytes
    if limit is not None and size > limit:
        raise WorkspaceFull(
            N_("%(size)s bytes do not fit the workspace's %(limit)s bytes", size=size, limit=limit)
        )
    hashed = Fed([data] if isinstance(data, bytes) else data, size)
    result = _write(sandbox, target, permissions, overwrite, hashed, size, actor)
    if result.exit_code == scripts.INCOMPLETE:
        hashed.complete()
        raise UploadIncomplete(
            N_(
                "the body ended after %(count)s of %(size)s bytes",
                count=hashed.total,
                size=size,
            )
        )
    verdict(result, target)
    written = Written(path=target, size_bytes=size, sha256=hashed.sha256.hexdigest())
    with transaction.atomic():
        events.record(
            actor, "file.written", sandbox=sandbox, path=target, size=size, sha256=written.sha256
        )
    return written


def _write(
    sandbox: Sandbox,
    target: str,
    permissions: str,
    overwrite: bool,
    data: Fed,
    size: int,
    actor: Actor,
) -> ExecResult:
    """The write itself: through the agent's socket where there is one, else a script in an
    engine exec. Either answers with the write script's verdict."""
    sandbox, connection = direct(sandbox, actor)
    if connection is not None:
        return agentfiles.put(connection, target, permissions, overwrite, size, data)
    overwrites = "1" if overwrite else "0"
    argv = sh(scripts.WRITE, "boxyard-write", target, permissions, overwrites, str(size))
    return run_inside(sandbox, argv, actor, stdin=data, deadline_seconds=deadline_for(size))


def delete_file(
    sandbox: Sandbox,
    path: str,
    actor: Actor,
    *,
    recursive: bool = False,
    holder: str | None = None,
    epoch: int | None = None,
) -> str:
    target = workspace_path(path)
    if target == WORKSPACE:
        raise InvalidInput("path", N_("cannot delete /workspace itself"))
    with acting_on(
        sandbox, actor, N_("change files"), holder=holder, epoch=epoch, activity=True
    ) as acting:
        sandbox = acting.sandbox
    flag = "1" if recursive else "0"
    result = run_inside(sandbox, sh(scripts.DELETE, "boxyard-delete", target, flag), actor)
    verdict(result, target)
    with transaction.atomic():
        events.record(actor, "file.deleted", sandbox=sandbox, path=target, recursive=recursive)
    return target
