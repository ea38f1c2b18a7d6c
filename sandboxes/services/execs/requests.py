"""An exec request as the caller sent it, checked against its pipeline before anything runs:
the command (an argv list or a shell string), its cwd, environment, session, timeout and
whether it runs in the background or fresh. Each refusal names the field.

The shapes (a list of strings, a number, a flag) are the entry point's to parse (`ExecIn`);
what is checked here are the rules every caller needs: a command that is not empty and not
past its size, paths and variables the kernel takes, a session's name, the pipeline's
timeout ceiling."""

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django.conf import settings

from boxyard.errors import N_, InvalidInput
from pipelines.models import Pipeline
from sandboxes.models import SESSION_NAME, Sandbox
from sandboxes.scripts import WORKSPACE

MAX_COMMAND_BYTES = 256 * 1024
MAX_ENV_VARS = 200
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SESSION_NAME = re.compile(SESSION_NAME)


@dataclass(frozen=True)
class ExecRequest:
    """A validated exec request."""

    argv: list[str] | None
    shell: str | None
    cwd: str | None  # None: the session's own cwd
    env: dict[str, str]  # for this command only, on top of the session's environment
    session: str
    timeout_seconds: int | None  # None: none (background execs only)
    background: bool = False
    # A new process outside any session ("fresh"): the sandbox's own environment and cwd.
    one_shot: bool = False
    pipeline_env: dict[str, str] = field(default_factory=dict)
    # A background command's stdin stays open for `write_exec_stdin` (else it reads nothing).
    stdin: bool = False

    @property
    def command(self) -> list[str] | str:
        return self.argv if self.argv is not None else self.shell or ""


def clean_request(
    target: Sandbox | Pipeline,
    *,
    cmd: Sequence[str] | str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    session: str | None = None,
    timeout_seconds: int | None = None,
    background: bool = False,
    one_shot: bool = False,
    stdin: bool = False,
) -> ExecRequest:
    """Check an exec request against the pipeline (or the sandbox's pipeline) it is for."""
    pipeline = target.pipeline if isinstance(target, Sandbox) else target
    argv: list[str] | None = None
    shell: str | None = None
    if isinstance(cmd, str):
        if not cmd.strip():
            raise InvalidInput("cmd", N_("must not be empty"))
        shell = cmd
    else:
        if not cmd:
            raise InvalidInput("cmd", N_("must be a non-empty list of strings, or a shell string"))
        if not cmd[0]:
            raise InvalidInput("cmd", N_("the program name (cmd[0]) must not be empty"))
        argv = list(cmd)
    parts = [shell] if shell is not None else argv or []
    if any("\x00" in part for part in parts):
        raise InvalidInput("cmd", N_("must not contain NUL characters"))
    if sum(len(part.encode()) for part in parts) > MAX_COMMAND_BYTES:
        raise InvalidInput("cmd", N_("is longer than %(count)s bytes", count=MAX_COMMAND_BYTES))

    if one_shot and background:
        raise InvalidInput(
            "fresh", N_("a fresh exec runs in the foreground; drop fresh or background")
        )
    if one_shot and session not in (None, "", "default"):
        raise InvalidInput(
            "fresh", N_("a fresh exec runs outside any session; drop fresh or session")
        )
    return ExecRequest(
        argv=argv,
        shell=shell,
        cwd=clean_cwd(cwd),
        env=clean_env(env),
        session=clean_session_name(session),
        timeout_seconds=_clean_timeout(pipeline, timeout_seconds, background),
        background=background,
        one_shot=one_shot,
        pipeline_env=dict(pipeline.env or {}),
        stdin=stdin,
    )


def clean_cwd(cwd: str | None) -> str | None:
    """The absolute directory for `cwd` (None: the session's own)."""
    if cwd is None or cwd == "":
        return None
    if "\x00" not in cwd and len(cwd) <= 4096:
        return posixpath.normpath(posixpath.join(WORKSPACE, cwd))
    raise InvalidInput("cwd", N_("must be a path (absolute, or relative to /workspace)"))


def clean_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Variables a shell can hold: at most MAX_ENV_VARS, each a name and a value without NUL."""
    if env is None:
        return {}
    if len(env) > MAX_ENV_VARS:
        raise InvalidInput(
            "env", N_("must be an object of at most %(count)s variables", count=MAX_ENV_VARS)
        )
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise InvalidInput("env", N_("%(name)r is not a valid variable name", name=name))
        if "\x00" in value:
            raise InvalidInput(f"env.{name}", N_("must be a string without NUL characters"))
    return dict(env)


def clean_session_name(session: str | None) -> str:
    """A session's name ("default" when none is given)."""
    if session is None or session == "":
        return "default"
    if not _SESSION_NAME.fullmatch(session):
        raise InvalidInput(
            "session",
            N_("must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"),
        )
    return session


def _clean_timeout(pipeline: Pipeline, timeout_seconds: int | None, background: bool) -> int | None:
    ceiling = settings.BOXYARD_MAX_EXEC_TIMEOUT
    if timeout_seconds is None:
        # A background command runs until it ends or is killed; a foreground one is bounded.
        return None if background else pipeline.exec_timeout_seconds
    if not 1 <= timeout_seconds <= ceiling:
        raise InvalidInput("timeout_seconds", N_("must be between 1 and %(most)s", most=ceiling))
    return timeout_seconds


MAX_CODE_BYTES = 1024 * 1024
CODE_LANGUAGES = {"python": "python", "javascript": "javascript", "js": "javascript"}


@dataclass(frozen=True)
class CodeRequest:
    """A validated run of code in a context: an exec whose program is the context's
    interpreter (`session` is the context's name)."""

    code: str
    language: str
    session: str  # the context
    env: dict[str, str]  # for this run only
    timeout_seconds: int | None
    cwd: None = None
    background: bool = False
    one_shot: bool = False
    stdin: bool = False
    pipeline_env: dict[str, str] = field(default_factory=dict)

    @property
    def command(self) -> str:
        return self.code


def clean_code_request(
    target: Sandbox | Pipeline,
    *,
    code: str,
    context: str | None = None,
    language: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_seconds: int | None = None,
) -> CodeRequest:
    """Check a run of code against the sandbox's pipeline: code within its size, a context's
    name, a language Boxyard runs, the timeout within the pipeline's ceiling."""
    if "\x00" in code:
        raise InvalidInput("code", N_("must not contain NUL characters"))
    if len(code.encode()) > MAX_CODE_BYTES:
        raise InvalidInput("code", N_("is longer than %(count)s bytes", count=MAX_CODE_BYTES))
    named = clean_language(language) if language else ""
    name = clean_context_name(context)
    if not context and named not in ("", "python"):
        name = f"default-{named}"  # each language has a default context of its own
    return CodeRequest(
        code=code,
        language=named,
        session=name,
        env=clean_env(env),
        timeout_seconds=_clean_timeout(
            target.pipeline if isinstance(target, Sandbox) else target, timeout_seconds, False
        ),
    )


def clean_language(language: str) -> str:
    """A language Boxyard has an interpreter for, by its name or alias."""
    named = CODE_LANGUAGES.get(language.strip().lower())
    if named is None:
        raise InvalidInput(
            "language", N_("%(language)r is not one of python, javascript", language=language)
        )
    return named


def clean_context_name(context: str | None) -> str:
    """A code context's name ("default" when none is given)."""
    if context is None or context == "":
        return "default"
    if not _SESSION_NAME.fullmatch(context):
        raise InvalidInput(
            "context_id",
            N_("must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"),
        )
    return context
