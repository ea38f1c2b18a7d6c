"""A command in a new engine exec ("one-shot"): how sandboxes without the agent run every
command (in the `default` session's place, with no background execs), and how an agent older
than fresh commands runs those. The exec wrapper script gives the command its own session so
that its timeout kills the whole process tree."""

from boxyard.actors import Actor
from boxyard.errors import N_, ContainerGone, ExecDeadlineExceeded, InvalidInput, RuntimeFailure
from sandboxes.models import Exec, ExecState, Sandbox
from sandboxes.runtime import runtime_of
from sandboxes.scripts import BAD_CWD, EXEC, WORKSPACE, sh
from sandboxes.services import containers
from sandboxes.services.execs.ending import fail, finish
from sandboxes.services.execs.requests import ExecRequest

# How long past its own timeout we wait for a command to be reported ended before giving up
# on it (the watchdog in the sandbox has killed it by then).
DEADLINE_GRACE_SECONDS = 15
_SIGKILL_EXIT = 137


def run_one_shot(sandbox: Sandbox, record: Exec, request: ExecRequest, actor: Actor) -> Exec:
    timeout = request.timeout_seconds or sandbox.pipeline.exec_timeout_seconds
    cwd = request.cwd or WORKSPACE
    mode, command = (
        ("shell", [request.shell]) if request.shell is not None else ("argv", request.argv)
    )
    argv = sh(EXEC, "boxyard-exec", str(timeout), cwd, mode, *(command or []))
    try:
        result = runtime_of(sandbox).exec(
            sandbox.container_id,
            argv,
            env={**request.pipeline_env, **request.env},
            output_limit=sandbox.pipeline.output_limit_bytes,
            deadline_seconds=timeout + DEADLINE_GRACE_SECONDS,
        )
    except ContainerGone as error:
        fail(record, ExecState.FAILED, str(error))
        raise containers.gone(sandbox, error, actor) from error
    except ExecDeadlineExceeded as error:
        fail(record, ExecState.LOST, str(error))
        raise
    except RuntimeFailure as error:
        fail(record, ExecState.FAILED, str(error))
        raise

    if (
        result.exit_code == BAD_CWD
        and result.stderr.startswith(b"boxyard: cwd")
        and not result.stdout
    ):
        fail(record, ExecState.FAILED, f"cwd {cwd} is not a directory")
        raise InvalidInput("cwd", N_("%(cwd)s is not a directory in the sandbox", cwd=cwd))

    timed_out = result.exit_code == _SIGKILL_EXIT and result.duration_ms >= timeout * 1000
    record.state = ExecState.TIMED_OUT if timed_out else ExecState.COMPLETED
    record.exit_code = result.exit_code
    record.stdout = result.stdout.decode("utf-8", errors="replace")
    record.stderr = result.stderr.decode("utf-8", errors="replace")
    record.stdout_bytes = result.stdout_bytes
    record.stderr_bytes = result.stderr_bytes
    record.stdout_truncated = result.stdout_truncated
    record.stderr_truncated = result.stderr_truncated
    record.duration_ms = result.duration_ms
    if timed_out:
        record.error = f"timed out after {timeout} s; its processes were killed"
    finish(record)
    return record
