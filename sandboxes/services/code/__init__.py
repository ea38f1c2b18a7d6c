"""The code interpreter: stateful contexts (a Jupyter kernel for Python, node for
JavaScript) in a sandbox, and runs of code in them.

`results`: a run's results, shaped once for every door; `running`: a run (an exec whose
program is the context's interpreter); `contexts`: create, list, restart, delete."""

from sandboxes.services.code.contexts import (
    MAX_CONTEXTS,
    context_of,
    create_context,
    delete_context,
    list_contexts,
    restart_context,
)
from sandboxes.services.code.results import CodeOutcome, Result
from sandboxes.services.code.running import CodeRun, code_outcome, execute_code, start_code
from sandboxes.services.code.streaming import start_code_stream

__all__ = [
    "MAX_CONTEXTS",
    "CodeOutcome",
    "CodeRun",
    "Result",
    "code_outcome",
    "context_of",
    "create_context",
    "delete_context",
    "execute_code",
    "list_contexts",
    "restart_context",
    "start_code",
    "start_code_stream",
]
