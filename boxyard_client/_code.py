"""The code interpreter's calls, written once for both clients (`boxyard_client._calls`): run
code in a stateful context (Python in a Jupyter kernel, or JavaScript) and get its results at
the end or as they come, and manage the contexts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from boxyard_client._calls import (
    Call,
    compact,
    endpoint,
    list_parser,
    optional_dict,
    parser,
    sandbox_path,
    streamed,
)
from boxyard_client._models import DeleteResult

Result = dict[str, Any]


@dataclass(frozen=True)
class CodeResult:
    """`run_code`'s answer. `results` are what the run gave, in order, as the API sends them:
    {"type": "stdout" | "stderr", "text"}; {"type": "result", "is_main_result", and each
    representation by name: "text", "html", "markdown", "svg", "png" and "jpeg" (base64),
    "pdf", "latex", "json", "javascript", "chart"}; {"type": "error", "name", "value",
    "traceback"}; {"type": "restarted"}; and last {"type": "end", "status",
    "execution_count"}. `text` is the main result's text (the last expression's value);
    `status` the exec's state (completed, timed_out, killed, failed)."""

    exec_id: str
    context_id: str
    language: str
    status: str
    ok: bool
    stdout: str = ""
    stderr: str = ""
    text: str | None = None
    error: Result | None = None  # {"name", "value", "traceback"}
    execution_count: int | None = None
    results: tuple[Result, ...] = ()
    duration_ms: int | None = None

    @property
    def displayed(self) -> list[Result]:
        """The results that are displays or the main result (a chart, a table, a value)."""
        return [result for result in self.results if result.get("type") == "result"]


@dataclass(frozen=True)
class CodeContext:
    """A code context: an interpreter of its own (`running` while it holds state)."""

    id: str
    language: str
    cwd: str
    running: bool = False
    busy: bool = False
    runs: int = 0
    exec_id: str | None = None  # the run it is busy with, an exec


def _code_body(
    code: str,
    context_id: str | None,
    language: str | None,
    env: Mapping[str, str] | None,
    timeout_seconds: int | None,
    holder: str | None,
    epoch: int | None,
) -> dict[str, Any]:
    return compact(
        {
            "code": code,
            "context_id": context_id,
            "language": language,
            "env": optional_dict(env),
            "timeout_seconds": timeout_seconds,
            "holder": holder,
            "epoch": epoch,
        }
    )


def _context_path(sandbox_id: str, *rest: str) -> str:
    return sandbox_path(sandbox_id, "code", "contexts", *rest)


class CodeEndpoints:
    @endpoint
    def run_code(
        self,
        sandbox_id: str,
        code: str,
        *,
        context_id: str | None = None,
        language: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[CodeResult]:
        """Run `code` in a context (default: the language's, "default" for Python) and wait
        for its results; the context keeps its state for the next run. At `timeout_seconds`
        the run is interrupted (status timed_out) and the state stays."""
        body = _code_body(code, context_id, language, env, timeout_seconds, holder, epoch)
        return Call(
            "POST",
            sandbox_path(sandbox_id, "code"),
            parser(CodeResult),
            json=body,
            wait_seconds=timeout_seconds or 0,
        )

    @streamed
    def run_code_stream(
        self,
        sandbox_id: str,
        code: str,
        *,
        context_id: str | None = None,
        language: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[Result]:
        """`run_code`, its results yielded as they come (the shapes of `CodeResult.results`);
        the last is {"type": "end", "status": "ok" | "error" | "timed_out" | "killed" |
        "failed", "execution_count", "exec_id", "context_id"}."""
        body = _code_body(code, context_id, language, env, timeout_seconds, holder, epoch)
        return Call(
            "POST",
            sandbox_path(sandbox_id, "code"),
            lambda item: item,
            json=body,
            headers={"Accept": "application/x-ndjson"},
            wait_seconds=timeout_seconds or 0,
        )

    @endpoint
    def code_contexts(self, sandbox_id: str) -> Call[list[CodeContext]]:
        """The sandbox's code contexts (the default ones are there before their first run)."""
        return Call("GET", _context_path(sandbox_id), list_parser(CodeContext, "contexts"))

    @endpoint
    def create_code_context(
        self,
        sandbox_id: str,
        *,
        language: str | None = None,
        cwd: str | None = None,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[CodeContext]:
        """A new context, an interpreter of its own: "python" (default) or "javascript";
        `cwd` is where its code starts, relative to /workspace."""
        body = compact({"language": language, "cwd": cwd, "holder": holder, "epoch": epoch})
        return Call("POST", _context_path(sandbox_id), parser(CodeContext), json=body)

    @endpoint
    def restart_code_context(
        self,
        sandbox_id: str,
        context_id: str,
        *,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[CodeContext]:
        """Start the context's interpreter anew: its state is lost."""
        return Call(
            "POST",
            _context_path(sandbox_id, quote(context_id, safe=""), "restart"),
            parser(CodeContext),
            json=compact({"holder": holder, "epoch": epoch}),
        )

    @endpoint
    def delete_code_context(
        self,
        sandbox_id: str,
        context_id: str,
        *,
        holder: str | None = None,
        epoch: int | None = None,
    ) -> Call[DeleteResult]:
        """End the context's interpreter and forget the context."""
        return Call(
            "DELETE",
            _context_path(sandbox_id, quote(context_id, safe="")),
            parser(DeleteResult),
            params=compact({"holder": holder, "epoch": epoch}),
        )
