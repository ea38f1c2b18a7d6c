"""What a Bay sandbox can do: run a shell command, run Python (in the sandbox's default Python
context, the code interpreter's kernel, whose state stays between calls as in Bay's own),
read and write its files; a browser it does not have (`capability_not_supported`, as the SDK
expects of a profile without one).

Each call runs the record of its operation (`sandboxes.operations`), as the bot API does, and
turns the answer into Bay's; the upload and the download move bytes, and call the file
services directly, as the bot API's byte streams do. A sandbox that was stopped starts again
at its next call (Bay starts a new session then); one whose time to live passed does not.
Paths are relative to /workspace.
"""

import base64
import posixpath
from datetime import UTC, datetime
from functools import partial
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from ninja import File, Form, Router
from ninja.files import UploadedFile

from boxyard.errors import N_
from boxyard.later import Later
from sandboxes import services
from sandboxes.bay.api import Answer, CapabilityMissing, SandboxExpired, principal, run
from sandboxes.bay.sandboxes import CAPABILITIES, SANDBOX, bay_sandbox, bay_status
from sandboxes.bay.schemas import BrowserIn, FileIn, PythonIn, ShellIn
from sandboxes.downloads import file_response
from sandboxes.models import ExecState, Sandbox, State
from sandboxes.operations import Call, code, execs, files
from sandboxes.scripts import WORKSPACE

router = Router(tags=["bay"])

# How a command that did not end by itself ended, said where Bay says what went wrong.
_ENDED = {
    ExecState.TIMED_OUT: "the command timed out",
    ExecState.KILLED: "the command was killed",
    ExecState.FAILED: "the command could not run",
    ExecState.LOST: "the command was lost with its sandbox",
}
_RUN_ENDED = {
    ExecState.KILLED: "the code's run was killed",
    ExecState.FAILED: "the code could not run",
    ExecState.LOST: "the code's run was lost with its sandbox",
}


def awake(request: HttpRequest, sandbox_id: str) -> Sandbox:
    """The caller's sandbox, started again (with its workspace) if it was stopped."""
    sandbox = bay_sandbox(request, sandbox_id)
    if bay_status(sandbox) == "expired":
        raise SandboxExpired(N_("the sandbox reached its time to live; create another"))
    if sandbox.state in (State.STOPPED, State.ERROR):
        services.resume_sandbox(sandbox, principal(request).actor)
    return sandbox


def _ran(answer: Answer) -> tuple[bool, str | None]:
    """Whether a command succeeded, and what went wrong (its stderr, and how it ended)."""
    status, stderr = answer["status"], answer["stderr"] or ""
    ended = _ENDED.get(status)
    if ended:
        stderr = f"{stderr}\n{ended}" if stderr else ended
    ok = status == ExecState.COMPLETED and answer["exit_code"] == 0
    return ok, stderr or None


def _shell_out(body: ShellIn, answer: Answer) -> Answer:
    ok, error = _ran(answer)
    return {
        "success": ok,
        "output": answer["stdout"],
        "error": error,
        "exit_code": answer["exit_code"],
        "execution_id": str(answer["exec_id"]),
        "execution_time_ms": answer["duration_ms"],
        "command": body.command if body.include_code else None,
    }


def _python_data(results: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    """The text and the PNG images of a run's results, as Bay's kernel gathers them: what was
    printed (both streams) and each result's text, in order, stripped; a displayed PNG
    instead of its text, the last expression's value with both."""
    texts: list[str] = []
    images: list[dict[str, str]] = []
    for result in results:
        if result["type"] in ("stdout", "stderr"):
            texts.append(result["text"])
        elif result["type"] == "result":
            png = result.get("png")
            if png:
                images.append({"image/png": png})
            if result.get("text") is not None and (result["is_main_result"] or not png):
                texts.append(result["text"])
    return "".join(texts).strip(), images


def _python_error(body: PythonIn, answer: Answer) -> str | None:
    """What went wrong, as Bay says it: the traceback, or how the run ended."""
    if answer["status"] == ExecState.TIMED_OUT:
        return f"Code execution timed out after {body.timeout} seconds"
    error = answer["error"]
    if error:
        return str(error["traceback"] or f"{error['name']}: {error['value']}")
    return _RUN_ENDED.get(answer["status"])


def _python_out(body: PythonIn, answer: Answer) -> Answer:
    text, images = _python_data(answer["results"])
    error = _python_error(body, answer)
    return {
        "success": error is None,
        "output": text,
        "error": error,
        "data": {
            "execution_count": answer["execution_count"],
            "output": {"text": text, "images": images},
        },
        "execution_id": answer["exec_id"],
        "execution_time_ms": answer["duration_ms"],
        "code": body.code if body.include_code else None,
    }


@router.post(SANDBOX + "/shell/exec", summary="Run a shell command")
def shell_exec(request: HttpRequest, sandbox_id: str, body: ShellIn) -> Answer | Later:
    sandbox = awake(request, sandbox_id)
    given = {"cmd": body.command, "cwd": body.cwd, "timeout_seconds": body.timeout}
    call = Call(execs.EXEC.parse(given), str(sandbox.pk))
    return run(request, execs.EXEC, call, partial(_shell_out, body))


@router.post(
    SANDBOX + "/python/exec",
    summary="Run Python in the sandbox's default context (a kernel: state kept between calls)",
)
def python_exec(request: HttpRequest, sandbox_id: str, body: PythonIn) -> Answer | Later:
    sandbox = awake(request, sandbox_id)
    given = {"code": body.code, "timeout_seconds": body.timeout}
    call = Call(code.RUN_CODE.parse(given), str(sandbox.pk))
    return run(request, code.RUN_CODE, call, partial(_python_out, body))


def _no_browser(request: HttpRequest, sandbox_id: str) -> None:
    bay_sandbox(request, sandbox_id)  # another pipeline's sandbox is not found, as anywhere
    raise CapabilityMissing(
        N_(
            "this sandbox has no browser; its profile's capabilities are %(capabilities)s",
            capabilities=", ".join(CAPABILITIES),
        ),
        capability="browser",
    )


@router.post(SANDBOX + "/browser/exec", summary="A browser command: not offered (no browser)")
def browser_exec(request: HttpRequest, sandbox_id: str, body: BrowserIn) -> None:
    _no_browser(request, sandbox_id)


@router.post(SANDBOX + "/browser/exec_batch", summary="Browser commands: not offered")
def browser_exec_batch(request: HttpRequest, sandbox_id: str, body: BrowserIn) -> None:
    _no_browser(request, sandbox_id)


def _relative(path: str) -> str:
    return posixpath.relpath(path, WORKSPACE) if path.startswith(WORKSPACE) else path


def _read_out(answer: Answer) -> Answer:
    content = answer.get("contents")
    if content is None:  # not UTF-8: Bay's read is text, so as text it is shown
        content = base64.b64decode(answer.get("contents_b64") or "").decode("utf-8", "replace")
    return {
        "path": _relative(answer["path"]),
        "content": content,
        "size": answer["size_bytes"],
        "truncated": answer["truncated"],
    }


def _entry_out(entry: dict[str, Any]) -> Answer:
    is_dir = entry["type"] == "dir"
    return {
        "name": entry["name"],
        "path": _relative(entry["path"]),
        "is_dir": is_dir,
        "size": None if is_dir else entry["size"],
        "modified_at": datetime.fromtimestamp(entry["mtime_unix"], UTC).isoformat(),
    }


@router.get(SANDBOX + "/filesystem/files", summary="Read a text file")
def read_file(request: HttpRequest, sandbox_id: str, path: str) -> Answer | Later:
    sandbox = awake(request, sandbox_id)
    call = Call(files.READ.parse({"path": path}), str(sandbox.pk))
    return run(request, files.READ, call, _read_out)


@router.put(SANDBOX + "/filesystem/files", summary="Write a text file (parents are made)")
def write_file(request: HttpRequest, sandbox_id: str, body: FileIn) -> Answer | Later:
    sandbox = awake(request, sandbox_id)
    call = Call(files.WRITE.parse({"path": body.path, "contents": body.content}), str(sandbox.pk))
    return run(
        request,
        files.WRITE,
        call,
        lambda written: {"path": _relative(written["path"]), "size": written["size_bytes"]},
    )


@router.delete(SANDBOX + "/filesystem/files", summary="Delete a file or a directory")
def delete_file(request: HttpRequest, sandbox_id: str, path: str) -> Answer | Later:
    sandbox = awake(request, sandbox_id)
    call = Call(files.DELETE.parse({"path": path, "recursive": True}), str(sandbox.pk))
    return run(request, files.DELETE, call, lambda deleted: {"path": path})


@router.get(SANDBOX + "/filesystem/directories", summary="List a directory")
def list_directory(request: HttpRequest, sandbox_id: str, path: str = ".") -> Answer | Later:
    sandbox = awake(request, sandbox_id)
    call = Call(files.LIST.parse({"path": path}), str(sandbox.pk))
    return run(
        request,
        files.LIST,
        call,
        lambda listed: {
            "path": path,
            "entries": [_entry_out(entry) for entry in listed["entries"]],
            "truncated": listed["truncated"],
        },
    )


@router.post(SANDBOX + "/filesystem/upload", summary="Upload a file (multipart: path, file)")
def upload(
    request: HttpRequest, sandbox_id: str, path: Form[str], file: File[UploadedFile]
) -> Answer:
    sandbox = awake(request, sandbox_id)
    written = services.write_file(
        sandbox, path, file.chunks(), principal(request).actor, size=file.size
    )
    return {"path": _relative(written.path), "size": written.size_bytes}


@router.get(SANDBOX + "/filesystem/download", summary="Download a file's bytes")
def download(request: HttpRequest, sandbox_id: str, path: str) -> HttpResponseBase:
    return file_response(request, awake(request, sandbox_id), path)
