"""The code interpreter's shapes: a run of code, its results, and the contexts."""

from typing import Annotated, Any

from ninja import Schema
from pydantic import Field, StringConstraints

from sandboxes.models import SESSION_NAME, Exec
from sandboxes.schemas.common import NO_NUL, Fencing
from sandboxes.schemas.execs import Cwd, Env, Timeout
from sandboxes.services import CodeRun

ContextName = Annotated[str, StringConstraints(pattern=f"^(?:{SESSION_NAME})?$")]
Language = Annotated[str, StringConstraints(max_length=32)]


class CodeIn(Fencing):
    code: Annotated[str, StringConstraints(pattern=NO_NUL)] = Field(
        ...,
        description="The code to run. Its state stays for the next run in the same context: "
        "variables, imports, functions. The last expression's value is the main result.",
    )
    context_id: ContextName | None = Field(
        None,
        description='The context to run in (default: the language\'s default context, "default" '
        "for Python).",
    )
    language: Language | None = Field(
        None, description='"python" (default) or "javascript"; with no context_id, its default.'
    )
    env: Env | None = Field(None, description="Environment variables for this run only.")
    timeout_seconds: Timeout | None = Field(
        None,
        description="Interrupt the run after this many seconds (the context's state stays; "
        "default: the pipeline's command timeout).",
    )


RESULTS = (
    "What the run gave, in order: `stdout`/`stderr` ({type, text}); `result` (a display, or "
    "the last expression's value: {type, is_main_result, and each representation by name: "
    "text, html, markdown, svg, png, jpeg, pdf, latex, json, javascript, chart; extra}); "
    "`error` ({type, name, value, traceback}); `restarted` (the context's interpreter had "
    "ended); and last `end` ({type, status, execution_count})."
)


class CodeOut(Schema):
    exec_id: str
    context_id: str
    language: str
    status: str = Field(..., description="The exec's state: completed, timed_out, killed, failed.")
    ok: bool = Field(..., description="Whether the code ran to its end without an error.")
    text: str | None = Field(None, description="The main result's text, if there is one.")
    stdout: str
    stderr: str
    error: dict[str, Any] | None = None
    execution_count: int | None = None
    results: list[dict[str, Any]] = Field(..., description=RESULTS)
    duration_ms: int | None = None


class ContextIn(Fencing):
    language: Language | None = Field(None, description='"python" (default) or "javascript".')
    cwd: Cwd | None = Field(
        None, description="Where its code starts, relative to /workspace (default: the workdir)."
    )


class ContextOut(Schema):
    id: str
    language: str
    cwd: str
    running: bool = Field(..., description="Whether its interpreter runs now (it holds state).")
    busy: bool
    runs: int
    exec_id: str | None = Field(None, description="The run it is busy with, an exec.")


class ContextListOut(Schema):
    contexts: list[ContextOut]


def code_out(run: CodeRun) -> dict[str, Any]:
    record: Exec = run.record
    outcome = run.outcome
    main = outcome.main
    error = outcome.error
    return {
        "exec_id": str(record.pk),
        "context_id": record.session,
        "language": record.language,
        "status": record.state,
        "ok": record.state == "completed" and error is None,
        "text": main.get("text") if main else None,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "error": {k: v for k, v in error.items() if k != "type"} if error else None,
        "execution_count": outcome.execution_count,
        "results": outcome.results,
        "duration_ms": record.duration_ms,
    }


# The representations of a result that are images a model can see, and their MIME types.
IMAGES = (("png", "image/png"), ("jpeg", "image/jpeg"))


def code_media(answer: dict[str, Any]) -> list[tuple[str, str]]:
    """Each PNG or JPEG image the run displayed (a chart), as (MIME type, base64), in order;
    the base64 without the line breaks a kernel may put in it."""
    return [
        (mime, "".join(result[name].split()))
        for result in answer["results"]
        if result.get("type") == "result"
        for name, mime in IMAGES
        if isinstance(result.get(name), str) and result[name]
    ]
