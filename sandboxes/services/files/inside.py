"""A file operation runs inside the sandbox as the sandbox user (a short POSIX script of
`sandboxes.scripts`, or the agent's own listing), never through the engine's archive API nor
on the host; its exit code is its verdict, which `verdict` turns into the error it stands
for."""

from collections.abc import Iterable

from boxyard.actors import Actor
from boxyard.errors import (
    Conflict,
    ContainerGone,
    InvalidInput,
    NotFound,
    RuntimeFailure,
    WorkspaceFull,
)
from sandboxes import scripts
from sandboxes.models import Sandbox
from sandboxes.runtime import ExecResult, get_runtime
from sandboxes.services import containers

_FILE_OP_DEADLINE = 300


def run_inside(
    sandbox: Sandbox,
    argv: list[str],
    actor: Actor,
    *,
    stdin: Iterable[bytes] | None = None,
    output_limit: int = 64 * 1024,
    deadline_seconds: float = _FILE_OP_DEADLINE,
) -> ExecResult:
    try:
        return get_runtime().exec(
            sandbox.container_id,
            argv,
            stdin=stdin,
            output_limit=output_limit,
            deadline_seconds=deadline_seconds,
        )
    except ContainerGone as error:
        raise containers.gone(sandbox, error, actor) from error


def reader(sandbox: Sandbox) -> Actor:
    """Who reads files (reads are no one's change; a vanished container found on a read is
    recorded as the system's finding)."""
    return Actor("system", f"reader:{sandbox.pk}")


def verdict(result: ExecResult, path: str, *, listing: bool = False) -> None:
    """Turn a file script's exit code into the error it stands for."""
    not_a_directory = path if listing else f"a parent of {path}"
    code = result.exit_code
    if code == 0:
        return
    detail = result.stderr.decode(errors="replace").strip()
    if code == scripts.NOT_FOUND:
        raise NotFound(f"{path} does not exist", field="path")
    if code == scripts.OUTSIDE:
        raise InvalidInput("path", f"{path} resolves outside /workspace (through a symlink)")
    if code == scripts.NOT_REGULAR:
        raise InvalidInput("path", f"{path} is not a regular file")
    if code == scripts.EXISTS:
        raise Conflict(f"{path} exists and overwrite is false", code_detail="exists")
    if code == scripts.IS_DIRECTORY:
        raise InvalidInput("path", f"{path} is a directory")
    if code == scripts.NOT_DIRECTORY:
        raise InvalidInput("path", f"{not_a_directory} is not a directory")
    if code == scripts.NOT_EMPTY:
        raise InvalidInput("recursive", f"{path} is a directory that is not empty; pass recursive")
    if "No space left" in detail or "Disk quota" in detail:
        raise WorkspaceFull(f"no space left writing {path}")
    if "Read-only file system" in detail:
        raise InvalidInput("path", f"{path} is on a read-only mount (a skill?)")
    if "Permission denied" in detail:
        raise InvalidInput("path", f"permission denied on {path}")
    raise RuntimeFailure(f"file operation on {path} failed ({code}): {detail[:500]}")
