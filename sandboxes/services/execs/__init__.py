"""Exec: commands in a sandbox's shell sessions, in the foreground or the background.

`requests`: checking what the caller asked for; `running`: the exec recorded under the guard
and run through the sandbox's port (its agent); `ending`: an exec's states and its end,
written once, by `ending.end` alone; `reading`: output, waiting, killing; `input`: a background command's stdin; `streaming`: the
output pushed as it comes, to its end.
"""

from sandboxes.services.execs.ending import finish_from_status
from sandboxes.services.execs.input import write_exec_stdin
from sandboxes.services.execs.reading import (
    await_exec,
    exec_chunks,
    exec_output_bytes,
    exec_output_recording_end,
    kill_exec,
    subscribe,
    wait_exec,
)
from sandboxes.services.execs.requests import (
    CodeRequest,
    ExecRequest,
    clean_code_request,
    clean_cwd,
    clean_env,
    clean_request,
    clean_session_name,
)
from sandboxes.services.execs.running import (
    ExecWatch,
    run_exec,
    start_exec,
)
from sandboxes.services.execs.streaming import exec_events, start_exec_events

__all__ = [
    "CodeRequest",
    "ExecRequest",
    "ExecWatch",
    "await_exec",
    "clean_code_request",
    "clean_cwd",
    "clean_env",
    "clean_request",
    "clean_session_name",
    "exec_chunks",
    "exec_events",
    "exec_output_bytes",
    "exec_output_recording_end",
    "finish_from_status",
    "kill_exec",
    "run_exec",
    "start_exec",
    "start_exec_events",
    "subscribe",
    "wait_exec",
    "write_exec_stdin",
]
