"""The code interpreter: run code in a context, and the contexts themselves."""

from typing import Any

from boxyard.later import Awaited
from pipelines.models import Pipeline
from sandboxes import selectors, services
from sandboxes.models import Sandbox
from sandboxes.operations.record import Call, Context, Hints, Operation
from sandboxes.operations.sandboxes import SANDBOX_PATH, named_sandbox
from sandboxes.schemas import FencingQuery
from sandboxes.schemas.code import (
    CodeIn,
    CodeOut,
    ContextIn,
    ContextListOut,
    ContextOut,
    code_media,
    code_out,
)
from sandboxes.schemas.files import DeleteOut
from sandboxes.services.execs import CodeRequest

Answer = dict[str, Any]
CONTEXTS_PATH = SANDBOX_PATH + "/code/contexts"


def clean_code(target: Sandbox | Pipeline, body: CodeIn) -> CodeRequest:
    """The run the body asks for, checked against the sandbox (or its pipeline)."""
    return services.clean_code_request(
        target,
        code=body.code,
        context=body.context_id,
        language=body.language,
        env=body.env,
        timeout_seconds=body.timeout_seconds,
    )


def _checked(pipeline: Pipeline, body: CodeIn) -> None:
    clean_code(pipeline, body)


def _run(context: Context, call: Call[CodeIn]) -> Awaited[services.CodeRun]:
    who, body = context.principal, call.given
    sandbox = selectors.sandbox_for(who, call.sandbox_id)
    return services.start_code(
        sandbox, clean_code(sandbox, body), who.actor, holder=body.holder, epoch=body.epoch
    )


def _create(context: Context, call: Call[ContextIn]) -> Answer:
    body = call.given
    return services.create_context(
        named_sandbox(context, call), context.principal.actor, language=body.language,
        cwd=body.cwd, holder=body.holder, epoch=body.epoch,
    )  # fmt: skip


def _restart(context: Context, call: Call[FencingQuery]) -> Answer:
    given = call.given
    return services.restart_context(
        named_sandbox(context, call), call.name, context.principal.actor, holder=given.holder,
        epoch=given.epoch,
    )  # fmt: skip


def _delete(context: Context, call: Call[FencingQuery]) -> str:
    given = call.given
    services.delete_context(
        named_sandbox(context, call), call.name, context.principal.actor, holder=given.holder,
        epoch=given.epoch,
    )  # fmt: skip
    return call.name


RUN_CODE = Operation[CodeIn, services.CodeRun](
    name="sandbox_run_code",
    summary="Run code in a stateful interpreter",
    method="POST",
    path=SANDBOX_PATH + "/code",
    input=CodeIn,
    output=CodeOut,
    service=_run,
    present=code_out,
    check=_checked,
    media=code_media,
    title="Run code",
    description=(
        "Run Python (or JavaScript) in the sandbox's code interpreter, a Jupyter kernel that "
        "keeps its state between calls: a DataFrame loaded in one call is there in the next. "
        "numpy, pandas and matplotlib are installed; there is no network unless this bot's "
        "pipeline enables it. Returns stdout, stderr, the last expression's value (text), "
        "every displayed result with all its representations (a matplotlib chart comes back "
        "as a PNG image you can see, a DataFrame as HTML and text) and an error with its "
        "traceback. Files are under /workspace, shared with sandbox_exec. A run is "
        "interrupted at its timeout; the state stays."
    ),
    hints=Hints(destructive=True, opens_chat_sandbox=True, networked=True),
)

LIST_CONTEXTS = Operation[None, list[Answer]](
    name="code_contexts_list",
    summary="Code contexts",
    method="GET",
    path=CONTEXTS_PATH,
    output=ContextListOut,
    service=lambda context, call: services.list_contexts(named_sandbox(context, call)),
    present=lambda contexts: {"contexts": contexts},
    hints=Hints(read_only=True, idempotent=True),
)

CREATE_CONTEXT = Operation[ContextIn, Answer](
    name="code_context_create",
    summary="Create a code context (an interpreter of its own)",
    method="POST",
    path=CONTEXTS_PATH,
    input=ContextIn,
    output=ContextOut,
    service=_create,
    present=lambda answer: answer,
    status=201,
)

RESTART_CONTEXT = Operation[FencingQuery, Answer](
    name="code_context_restart",
    summary="Restart a code context (its state is lost)",
    method="POST",
    path=CONTEXTS_PATH + "/{name}/restart",
    input=FencingQuery,
    output=ContextOut,
    service=_restart,
    present=lambda answer: answer,
)

DELETE_CONTEXT = Operation[FencingQuery, str](
    name="code_context_delete",
    summary="Delete a code context",
    method="DELETE",
    path=CONTEXTS_PATH + "/{name}",
    input=FencingQuery,
    output=DeleteOut,
    service=_delete,
    present=lambda name: {"ok": True, "deleted": name},
    hints=Hints(destructive=True, idempotent=True),
)
