"""Sandbox operations: one function per operation, called by every entry point.

The API views, the dashboard views, the websocket consumers, the Celery tasks and the
management commands all call these; none of them writes a business rule of its own. A change
goes through the guard (`sandboxes.guard`) and a change of state through the lifecycle
(`sandboxes.lifecycle`).
"""

from boxyard.actors import SYSTEM, Actor
from sandboxes.services.chats import (
    chat_or_own_sandbox,
    chat_sandbox,
    forget_session,
    remember_session_sandbox,
)
from sandboxes.services.closing import close_later, close_sandbox
from sandboxes.services.compute import RunResult, run_code
from sandboxes.services.execs import (
    ExecRequest,
    ExecWatch,
    await_exec,
    clean_request,
    exec_chunks,
    exec_events,
    exec_output_bytes,
    exec_output_recording_end,
    kill_exec,
    run_exec,
    start_exec,
    start_exec_events,
    subscribe,
    wait_exec,
    write_exec_stdin,
)
from sandboxes.services.files import (
    clean_link,
    clean_mode,
    create_link,
    decoded_contents,
    delete_file,
    extract_archive,
    link_methods,
    list_files,
    make_dir,
    move_file,
    open_archive,
    open_file_stream,
    read_file,
    stat_file,
    use_link,
    workspace_path,
    write_file,
)
from sandboxes.services.labels import label_sandbox
from sandboxes.services.leases import keep_alive, release_lease, renew_lease, takeover_lease
from sandboxes.services.lifetimes import check_lifetime, lifetime_ceiling, set_lifetime
from sandboxes.services.moving import Moved, move_all, move_all_later, move_later, move_sandbox
from sandboxes.services.opening import (
    Opened,
    boot,
    open_own_sandbox,
    open_sandbox,
    open_scope,
    restart_sandbox,
    resume_sandbox,
)
from sandboxes.services.processes import (
    follow_output,
    read_output,
    read_processes,
    restart_process,
    start_and_list_processes,
    stdin_bytes,
    write_stdin,
)
from sandboxes.services.resetting import ResetResult, reset_sandbox
from sandboxes.services.sessions import create_session, delete_session, list_sessions
from sandboxes.services.workspaces import WorkspaceUsage, container_usage, workspace_usage

__all__ = [
    "SYSTEM",
    "Actor",
    "ExecRequest",
    "ExecWatch",
    "Moved",
    "Opened",
    "ResetResult",
    "RunResult",
    "WorkspaceUsage",
    "await_exec",
    "boot",
    "chat_or_own_sandbox",
    "chat_sandbox",
    "check_lifetime",
    "clean_link",
    "clean_mode",
    "clean_request",
    "close_later",
    "close_sandbox",
    "container_usage",
    "create_link",
    "create_session",
    "decoded_contents",
    "delete_file",
    "delete_session",
    "exec_chunks",
    "exec_events",
    "exec_output_bytes",
    "exec_output_recording_end",
    "extract_archive",
    "follow_output",
    "forget_session",
    "keep_alive",
    "kill_exec",
    "label_sandbox",
    "lifetime_ceiling",
    "link_methods",
    "list_files",
    "list_sessions",
    "make_dir",
    "move_all",
    "move_all_later",
    "move_file",
    "move_later",
    "move_sandbox",
    "open_archive",
    "open_file_stream",
    "open_own_sandbox",
    "open_sandbox",
    "open_scope",
    "read_file",
    "read_output",
    "read_processes",
    "release_lease",
    "remember_session_sandbox",
    "renew_lease",
    "reset_sandbox",
    "restart_process",
    "restart_sandbox",
    "resume_sandbox",
    "run_code",
    "run_exec",
    "set_lifetime",
    "start_and_list_processes",
    "start_exec",
    "start_exec_events",
    "stat_file",
    "stdin_bytes",
    "subscribe",
    "takeover_lease",
    "use_link",
    "wait_exec",
    "workspace_path",
    "workspace_usage",
    "write_exec_stdin",
    "write_file",
    "write_stdin",
]
