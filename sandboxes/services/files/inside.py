"""A file operation runs inside the sandbox as the sandbox user (a short POSIX script of
`sandboxes.scripts`, or the agent's own programs), never through the engine's archive API nor
on the host; its exit code is its verdict, which `verdict` turns into the error it stands
for. A file's bytes take the agent's own socket where the sandbox's port reaches it (`direct`),
and an engine exec otherwise."""

import hashlib
import socket
from collections.abc import Iterable, Iterator

from boxyard.actors import Actor
from boxyard.errors import (
    N_,
    BoxyardError,
    Conflict,
    ContainerGone,
    InvalidInput,
    NotFound,
    RuntimeFailure,
    WorkspaceFull,
)
from hosts.engines import runtime_of
from sandboxes import scripts
from sandboxes.models import Sandbox
from sandboxes.runtime import ExecResult
from sandboxes.runtime.port import port_of
from sandboxes.services import booting, containers

_FILE_OP_DEADLINE = 300
# An operation fed bytes may take as long as they need at this rate, and five minutes more.
_SLOWEST_BYTES_PER_SECOND = 1024 * 1024


def deadline_for(size: int) -> float:
    return _FILE_OP_DEADLINE + size / _SLOWEST_BYTES_PER_SECOND


class Fed:
    """The bytes fed to an operation (a file, an archive), counted and hashed on their way
    and cut at the size the caller said."""

    def __init__(self, chunks: Iterable[bytes], size: int) -> None:
        self._chunks = chunks
        self._size = size
        self.total = 0
        self.sha256 = hashlib.sha256()
        # The source ran out before the size said (a client that went away), as opposed to
        # an operation that stopped taking them (it failed).
        self.ended_early = False
        # Why the source failed, when it says (a client that stopped sending: 408).
        self.failure: BoxyardError | None = None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._counted()
        except BoxyardError as error:
            self.failure = error
            self.ended_early = True
            raise

    def complete(self) -> None:
        """Raise what cut the source short, if it says (a client that stopped sending)."""
        if self.failure is not None:
            raise self.failure

    def _counted(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            chunk = chunk[: self._size - self.total]  # never more than the size said
            self.total += len(chunk)
            self.sha256.update(chunk)
            yield chunk
            if self.total == self._size:
                return
        self.ended_early = self.total < self._size


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
        return runtime_of(sandbox).exec(
            sandbox.container_id,
            argv,
            stdin=stdin,
            output_limit=output_limit,
            deadline_seconds=deadline_seconds,
        )
    except ContainerGone as error:
        raise containers.gone(sandbox, error, actor) from error


def direct(sandbox: Sandbox, actor: Actor) -> tuple[Sandbox, socket.socket | None]:
    """The sandbox (migrated first if it still runs an older agent: `booting.current`) and a
    connection to its agent's own socket for a file's bytes to take instead of the engine's
    execs, where its port reaches it (`SandboxPort.file_socket`); None when it does not, or
    when the agent does not answer (at the pids limit, say: the engine's exec may still run)."""
    sandbox = booting.current(sandbox, actor)
    try:
        return sandbox, port_of(sandbox).file_socket()
    except BoxyardError:
        return sandbox, None


def reader(sandbox: Sandbox) -> Actor:
    """Who reads files (reads are no one's change; a vanished container found on a read is
    recorded as the system's finding)."""
    return Actor("system", f"reader:{sandbox.pk}")


def verdict(result: ExecResult, path: str, *, listing: bool = False) -> None:
    """Turn a file script's exit code into the error it stands for."""
    not_a_directory = path if listing else N_("a parent of %(path)s", path=path)
    code = result.exit_code
    if code == 0:
        return
    detail = result.stderr.decode(errors="replace").strip()
    if code == scripts.NOT_FOUND:
        raise NotFound(N_("%(path)s does not exist", path=path), field="path")
    if code == scripts.OUTSIDE:
        raise InvalidInput(
            "path", N_("%(path)s resolves outside /workspace (through a symlink)", path=path)
        )
    if code == scripts.NOT_REGULAR:
        raise InvalidInput("path", N_("%(path)s is not a regular file", path=path))
    if code == scripts.EXISTS:
        raise Conflict(
            N_("%(path)s exists and overwrite is false", path=path), code_detail="exists"
        )
    if code == scripts.IS_DIRECTORY:
        raise InvalidInput("path", N_("%(path)s is a directory", path=path))
    if code == scripts.NOT_DIRECTORY:
        raise InvalidInput("path", N_("%(path)s is not a directory", path=not_a_directory))
    if code == scripts.NOT_EMPTY:
        raise InvalidInput(
            "recursive",
            N_("%(path)s is a directory that is not empty; pass recursive", path=path),
        )
    said = detail.lower()  # the shell's tools and the agent (Go) say these in their own case
    if "no space left" in said or "disk quota" in said:
        raise WorkspaceFull(N_("no space left writing %(path)s", path=path))
    if "read-only file system" in said:
        raise InvalidInput("path", N_("%(path)s is on a read-only mount (a skill?)", path=path))
    if "permission denied" in said:
        raise InvalidInput("path", N_("permission denied on %(path)s", path=path))
    raise RuntimeFailure(
        N_(
            "file operation on %(path)s failed (%(code)s): %(detail)s",
            path=path,
            code=code,
            detail=detail[:500],
        )
    )
