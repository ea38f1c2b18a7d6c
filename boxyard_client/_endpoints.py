"""Every route of the bot API, written once for both clients: each builds a `Call`
(`boxyard_client._calls`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from boxyard_client._calls import (
    Call,
    compact,
    endpoint,
    exec_path,
    lease_call,
    list_parser,
    octal_mode,
    optional_dict,
    parser,
    sandbox_path,
)
from boxyard_client._code import CodeEndpoints
from boxyard_client._files import FileEndpoints
from boxyard_client._models import (
    DeleteResult,
    ExecEvent,
    ExecOutput,
    ExecResult,
    FileContents,
    FileList,
    KeptAlive,
    Lease,
    OpenedSandbox,
    Process,
    ProcessOutput,
    ResetDone,
    RunResult,
    Sandbox,
    Session,
    StatusResult,
    StdinResult,
    Tools,
    WaitResult,
    WriteResult,
    parse_events,
)

Variables = Mapping[str, str | int | None]


class Endpoints(FileEndpoints, CodeEndpoints):
    """The bot API's calls (files of any size and archives: `FileEndpoints`; the code
    interpreter: `CodeEndpoints`). `holder` and `epoch` fence every call that changes a
    sandbox: left out, the call acts as the pipeline's default holder (the scope key)."""

    # --- sandboxes ------------------------------------------------------------------------
    @endpoint
    def open(
        self,
        pipeline: str,
        variables: Variables | None = None,
        holder: str | None = None,
        *,
        background: bool = False,
    ) -> Call[OpenedSandbox]:
        """Get or create the sandbox of the scope these chat variables make; take the lease.
        With `background`, a sandbox that needs a container comes back `creating` at once."""
        body = compact(
            {
                "pipeline": pipeline,
                "variables": dict(variables or {}),
                "holder": holder,
                "async": background or None,
            }
        )
        return Call("POST", "/sandboxes/open", parser(OpenedSandbox), json=body)

    @endpoint
    def list_sandboxes(
        self, status: str | None = None, scope_key: str | None = None
    ) -> Call[list[Sandbox]]:
        """The pipeline's sandboxes, optionally of one status or scope key."""
        params = compact({"status": status, "scope_key": scope_key})
        return Call("GET", "/sandboxes", list_parser(Sandbox, "sandboxes"), params=params)

    @endpoint
    def metrics(self) -> Call[dict[str, Any]]:
        """The pipeline's sandbox metrics: counts by state, creates, reuses, reaps by reason,
        health-check failures, pool hits and misses, execs and their durations."""
        return Call("GET", "/metrics", lambda data: data)

    @endpoint
    def get_sandbox(self, sandbox_id: str) -> Call[Sandbox]:
        return Call("GET", sandbox_path(sandbox_id), parser(Sandbox))

    @endpoint
    def close(
        self,
        sandbox_id: str,
        delete_workspace: bool = False,
        *,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[StatusResult]:
        """Stop the sandbox; with `delete_workspace` its files go too."""
        params = compact({"delete_workspace": delete_workspace, "holder": holder, "epoch": epoch})
        return Call("DELETE", sandbox_path(sandbox_id), parser(StatusResult), params=params)

    # --- execs ----------------------------------------------------------------------------
    @endpoint
    def exec(
        self,
        sandbox_id: str,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        session: str | None = None,
        timeout_seconds: int | None = None,
        background: bool = False,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[ExecResult]:
        """Run `cmd` (a shell string, or an argv list) and wait for it to end; with
        `background`, return at once (read it with exec_output, exec_wait, exec_stream)."""
        body = compact(
            {
                "cmd": cmd if isinstance(cmd, str) else list(cmd),
                "cwd": cwd,
                "env": optional_dict(env),
                "session": session,
                "timeout_seconds": timeout_seconds,
                "background": background or None,
                "holder": holder,
                "epoch": epoch,
            }
        )
        return Call(
            "POST",
            sandbox_path(sandbox_id, "exec"),
            parser(ExecResult),
            json=body,
            wait_seconds=0 if background else timeout_seconds or 0,
        )

    @endpoint
    def get_exec(self, sandbox_id: str, exec_id: str) -> Call[ExecResult]:
        return Call("GET", exec_path(sandbox_id, exec_id), parser(ExecResult))

    @endpoint
    def exec_output(
        self, sandbox_id: str, exec_id: str, since_seq: int = 0, *, max_bytes: int | None = None
    ) -> Call[ExecOutput]:
        """The exec's output as numbered chunks after `since_seq` (the last one seen)."""
        return Call(
            "GET",
            exec_path(sandbox_id, exec_id, "output"),
            parser(ExecOutput),
            params=compact({"since_seq": since_seq, "max_bytes": max_bytes}),
        )

    @endpoint
    def exec_stream(
        self, sandbox_id: str, exec_id: str, since_seq: int = 0, *, wait_seconds: float = 900
    ) -> Call[list[ExecEvent]]:
        """The exec's chunks after `since_seq` and its exit, once it has ended (the server
        sends them as they come: read the route with an SSE client to follow it live)."""
        return Call(
            "GET",
            exec_path(sandbox_id, exec_id, "stream"),
            parse_events,
            params={"since_seq": since_seq},
            wait_seconds=wait_seconds,
            text=True,
        )

    @endpoint
    def exec_wait(
        self, sandbox_id: str, exec_id: str, timeout_seconds: float = 30
    ) -> Call[WaitResult]:
        """Wait up to `timeout_seconds` for the exec to end."""
        return Call(
            "POST",
            exec_path(sandbox_id, exec_id, "wait"),
            parser(WaitResult),
            json={"timeout_seconds": timeout_seconds},
            wait_seconds=timeout_seconds,
        )

    @endpoint
    def exec_kill(
        self,
        sandbox_id: str,
        exec_id: str,
        *,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[StatusResult]:
        """Kill the exec and its children."""
        return Call(
            "POST",
            exec_path(sandbox_id, exec_id, "kill"),
            parser(StatusResult),
            json=compact({"holder": holder, "epoch": epoch}),
        )

    # --- files (paths are under /workspace; relative ones start there) ---------------------
    @endpoint
    def write_file(
        self,
        sandbox_id: str,
        path: str,
        contents: str | bytes,
        *,
        mode: str | int | None = None,
        overwrite: bool = True,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[WriteResult]:
        """Write text (`str`) or bytes; `mode` is octal, as "0755" or 0o755."""
        data = (
            {"contents_b64": base64.b64encode(contents).decode("ascii")}
            if isinstance(contents, bytes)
            else {"contents": contents}
        )
        body = compact(
            {
                "path": path,
                **data,
                "mode": octal_mode(mode),
                "overwrite": overwrite,
                "holder": holder,
                "epoch": epoch,
            }
        )
        return Call("PUT", sandbox_path(sandbox_id, "files"), parser(WriteResult), json=body)

    @endpoint
    def read_file(
        self, sandbox_id: str, path: str, *, max_bytes: int | None = None
    ) -> Call[FileContents]:
        """The file's bytes (`.data`) and text (`.text`), at most `max_bytes` of them."""
        params = compact({"path": path, "max_bytes": max_bytes})
        return Call("GET", sandbox_path(sandbox_id, "files"), FileContents.from_json, params=params)

    @endpoint
    def list_files(
        self, sandbox_id: str, path: str | None = None, *, recursive: bool = False
    ) -> Call[FileList]:
        """A directory's entries (default /workspace)."""
        params = compact({"path": path, "recursive": recursive})
        return Call(
            "GET", sandbox_path(sandbox_id, "files", "list"), parser(FileList), params=params
        )

    @endpoint
    def delete_file(
        self,
        sandbox_id: str,
        path: str,
        *,
        recursive: bool = False,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[DeleteResult]:
        params = compact({"path": path, "recursive": recursive, "holder": holder, "epoch": epoch})
        return Call(
            "DELETE", sandbox_path(sandbox_id, "files"), parser(DeleteResult), params=params
        )

    # --- sessions and the lease -----------------------------------------------------------
    @endpoint
    def sessions(self, sandbox_id: str) -> Call[list[Session]]:
        """The sandbox's shell sessions."""
        return Call("GET", sandbox_path(sandbox_id, "sessions"), list_parser(Session, "sessions"))

    @endpoint
    def create_session(
        self,
        sandbox_id: str,
        name: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[Session]:
        """Start a shell session with its own cwd and environment (exec with `session=name`)."""
        body = compact(
            {
                "name": name,
                "cwd": cwd,
                "env": optional_dict(env),
                "holder": holder,
                "epoch": epoch,
            }
        )
        return Call("POST", sandbox_path(sandbox_id, "sessions"), parser(Session), json=body)

    @endpoint
    def delete_session(
        self, sandbox_id: str, name: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[DeleteResult]:
        """End a session's shell and whatever runs in it."""
        return Call(
            "DELETE",
            sandbox_path(sandbox_id, "sessions", quote(name, safe="")),
            parser(DeleteResult),
            params=compact({"holder": holder, "epoch": epoch}),
        )

    # --- managed processes ----------------------------------------------------------------
    @endpoint
    def processes(self, sandbox_id: str) -> Call[list[Process]]:
        """The pipeline's managed processes in this sandbox."""
        return Call("GET", sandbox_path(sandbox_id, "processes"), list_parser(Process, "processes"))

    @endpoint
    def process_stdin(
        self,
        sandbox_id: str,
        name: str,
        data: str | bytes = "",
        *,
        eof: bool = False,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[StdinResult]:
        """Write text or bytes to the process's stdin; `eof` closes it afterwards."""
        payload = (
            {"data_b64": base64.b64encode(data).decode("ascii")}
            if isinstance(data, bytes)
            else {"text": data}
        )
        return Call(
            "POST",
            sandbox_path(sandbox_id, "processes", quote(name, safe=""), "stdin"),
            parser(StdinResult),
            json=compact({**payload, "eof": eof or None, "holder": holder, "epoch": epoch}),
        )

    @endpoint
    def process_output(
        self,
        sandbox_id: str,
        name: str,
        since_seq: int = 0,
        *,
        generation: int | None = None,
        max_bytes: int | None = None,
        wait_seconds: float = 0,
    ) -> Call[ProcessOutput]:
        """The process's output after `since_seq`; `wait_seconds` waits for something new."""
        params = compact(
            {
                "since_seq": since_seq,
                "generation": generation,
                "max_bytes": max_bytes,
                "wait_seconds": wait_seconds or None,
            }
        )
        return Call(
            "GET",
            sandbox_path(sandbox_id, "processes", quote(name, safe=""), "output"),
            parser(ProcessOutput),
            params=params,
            wait_seconds=wait_seconds,
        )

    @endpoint
    def restart_process(
        self, sandbox_id: str, name: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[Process]:
        return Call(
            "POST",
            sandbox_path(sandbox_id, "processes", quote(name, safe=""), "restart"),
            parser(Process),
            json=compact({"holder": holder, "epoch": epoch}),
        )

    @endpoint
    def keep_alive(
        self, sandbox_id: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[KeptAlive]:
        """Count as activity now (the idle deadline moves) and renew the lease."""
        body = compact({"holder": holder, "epoch": epoch})
        return Call("POST", sandbox_path(sandbox_id, "keepalive"), parser(KeptAlive), json=body)

    @endpoint
    def reset(
        self,
        sandbox_id: str,
        *,
        reason: str | None = None,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[ResetDone]:
        """End every process in the sandbox (it works when the sandbox is jammed); sessions
        and managed processes start again, the workspace stays."""
        body = compact({"reason": reason, "holder": holder, "epoch": epoch})
        return Call("POST", sandbox_path(sandbox_id, "reset"), parser(ResetDone), json=body)

    @endpoint
    def renew_lease(
        self, sandbox_id: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[Lease]:
        """Keep the lease for another lease timeout."""
        return lease_call(sandbox_id, "renew", {"holder": holder, "epoch": epoch})

    @endpoint
    def takeover_lease(
        self, sandbox_id: str, *, holder: str | None = None, reason: str = ""
    ) -> Call[Lease]:
        """Take the lease whoever holds it; the previous holder gets `TakenOver` until released."""
        return lease_call(sandbox_id, "takeover", {"holder": holder, "reason": reason})

    @endpoint
    def release_lease(
        self, sandbox_id: str, *, holder: str | None = None, epoch: int | None = None
    ) -> Call[Lease]:
        """Free the lease for another holder."""
        return lease_call(sandbox_id, "release", {"holder": holder, "epoch": epoch})

    # --- pipelines and compute mode ------------------------------------------------------
    @endpoint
    def tools(self, pipeline: str) -> Call[Tools]:
        """The pipeline's tool definitions and system prompt, ready for an LLM."""
        return Call("GET", f"/pipelines/{quote(pipeline, safe='')}/tools", parser(Tools))

    @endpoint
    def run(
        self,
        pipeline: str,
        language: str,
        code: str,
        files: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
        args: Sequence[str] | None = None,
    ) -> Call[RunResult]:
        """Run `code` (python, javascript, bash or sh) once, with `args` passed to it, in a
        fresh sandbox that is destroyed after."""
        body = compact(
            {
                "pipeline": pipeline,
                "language": language,
                "code": code,
                "args": None if args is None else list(args),
                "files": optional_dict(files),
                "env": optional_dict(env),
                "timeout_seconds": timeout_seconds,
            }
        )
        return Call("POST", "/run", parser(RunResult), json=body, wait_seconds=timeout_seconds or 0)
