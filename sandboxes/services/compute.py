"""Compute mode: one run in a fresh sandbox that is destroyed afterwards, whatever happens."""

import posixpath
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput
from pipelines.models import Pipeline, Retention
from sandboxes.models import Exec, StopReason
from sandboxes.services import containers, files
from sandboxes.services.closing import close_sandbox
from sandboxes.services.creating import create_row
from sandboxes.services.execs import clean_request, run_exec

LANGUAGES = {
    "python": ("main.py", ["python3", "main.py"]),
    "javascript": ("main.js", ["node", "main.js"]),
    "bash": ("main.sh", ["bash", "main.sh"]),
    "sh": ("main.sh", ["sh", "main.sh"]),
}
ENTRIES = frozenset(entry for entry, _ in LANGUAGES.values())
MAX_FILES = 100
MAX_ARGS = 100
MAX_ARGS_BYTES = 64 * 1024


@dataclass(frozen=True)
class RunResult:
    exec: Exec
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.exec.exit_code == 0 and self.exec.state == "completed"


def run_code(
    pipeline: Pipeline,
    actor: Actor,
    *,
    language: str,
    code: str,
    files_in: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout_seconds: int | None = None,
    args: Sequence[str] | None = None,
) -> RunResult:
    """Run `code` once in a new temporary sandbox of the pipeline's profile, then destroy it.

    The sandbox and its workspace are removed even when the run fails or times out. The
    shapes are the entry point's to check (`RunIn`); the rules every caller needs are checked
    here, before anything is made: a known language, files inside the workspace and not
    replacing the code, the program's arguments (`args`, after the program file), the
    pipeline's limits (InvalidInput naming the field).
    """
    if language not in LANGUAGES:
        raise InvalidInput(
            "language", N_("must be one of %(choices)s", choices=", ".join(LANGUAGES))
        )
    extra = _clean_files(files_in)
    entry, argv = LANGUAGES[language]
    argv = [*argv, *_clean_args(args)]
    # A fresh command: the agent (the container's main process) runs it outside any
    # session, so its processes end with its timeout and an out-of-memory kill is told.
    request = clean_request(
        pipeline, cmd=argv, env=env, timeout_seconds=timeout_seconds, one_shot=True
    )
    started = time.monotonic()
    with transaction.atomic():
        sandbox = create_row(
            pipeline,
            f"run:{uuid.uuid4().hex}",
            {},
            actor,
            retention=Retention.TEMPORARY,
            mode="compute",
        )
    try:
        sandbox = containers.provision(sandbox, actor)
        for path, contents in extra.items():
            files.write_file(sandbox, path, contents.encode(), actor)
        files.write_file(sandbox, entry, code.encode(), actor)
        record = run_exec(sandbox, request, actor)
    finally:
        close_sandbox(sandbox, actor, delete_workspace=True, reason=StopReason.CLOSED, force=True)
    return RunResult(exec=record, duration_ms=int((time.monotonic() - started) * 1000))


def _clean_files(files_in: Mapping[str, str] | None) -> dict[str, str]:
    if files_in is None:
        return {}
    if len(files_in) > MAX_FILES:
        raise InvalidInput(
            "files", N_("must be an object of at most %(count)s path → text", count=MAX_FILES)
        )
    cleaned = {}
    for path, contents in files_in.items():
        target = files.workspace_path(path, field="files")
        if posixpath.basename(target) in ENTRIES and posixpath.dirname(target) == "/workspace":
            raise InvalidInput(
                "files", N_("%(path)s would be replaced by the code to run", path=path)
            )
        cleaned[target] = contents
    return cleaned


def _clean_args(args: Sequence[str] | None) -> list[str]:
    """The program's arguments: at most MAX_ARGS strings, without NUL, MAX_ARGS_BYTES in all."""
    if args is None:
        return []
    if isinstance(args, str) or len(args) > MAX_ARGS:
        raise InvalidInput(
            "args", N_("must be a list of at most %(count)s strings", count=MAX_ARGS)
        )
    for arg in args:
        if not isinstance(arg, str):
            raise InvalidInput("args", N_("must be a list of strings"))
        if "\x00" in arg:
            raise InvalidInput("args", N_("must not contain NUL characters"))
    if sum(len(arg.encode()) for arg in args) > MAX_ARGS_BYTES:
        raise InvalidInput(
            "args", N_("are longer than %(count)s bytes in all", count=MAX_ARGS_BYTES)
        )
    return list(args)
