"""Running code in a context: an exec (`execs.start_exec`: the guard, the lease, the record,
the pipeline's long calls, the dashboard) whose program is the context's interpreter. Its
results reach `on_result` as the interpreter gives them, and come back in order at the end."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from boxyard.actors import Actor
from boxyard.later import Awaited
from sandboxes.models import Exec, ExecState, Sandbox
from sandboxes.services.code.results import CodeOutcome, Lines, Result, outcome_of
from sandboxes.services.execs import exec_output_bytes, start_exec
from sandboxes.services.execs.requests import CodeRequest

OnResult = Callable[[Result], object]


@dataclass(frozen=True)
class CodeRun:
    """A finished run: its exec's record, and its results."""

    record: Exec
    outcome: CodeOutcome


class _Results:
    """Follows a run as the agent pushes its output (an `ExecWatch`): results parsed from
    the interpreter's lines, kept, and told to `on_result`."""

    def __init__(self, on_result: OnResult | None, on_start: Callable[[Exec], None] | None) -> None:
        self.on_result = on_result
        self.on_start = on_start
        self.lines = Lines()
        self.outcome = CodeOutcome()

    def started(self, record: Exec) -> None:
        if self.on_start is not None:
            self.on_start(record)

    def chunk(self, chunk: dict[str, Any]) -> None:
        if chunk.get("stream") != "stdout":
            return
        for result in self.lines.feed(str(chunk.get("text", ""))):
            self.outcome.add(result)
            if self.on_result is not None:
                self.on_result(result)


def start_code(
    sandbox: Sandbox,
    request: CodeRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    on_result: OnResult | None = None,
    started: Callable[[Exec], None] | None = None,
) -> Awaited[CodeRun]:
    """Run code (`clean_code_request`) as a long call: recorded and sent here, its end
    waited for by whoever holds the result. `started` is told the record first (to kill
    it)."""
    # Followed as it runs only for whoever wants the results as they come: the others read
    # them from the run's answer, which carries its output.
    watch = _Results(on_result, started) if on_result or started else None
    awaited = start_exec(sandbox, request, actor, holder=holder, epoch=epoch, watch=watch)
    return awaited.then(
        lambda record: CodeRun(record, _whole(record, watch.outcome if watch else None))
    )


def execute_code(
    sandbox: Sandbox,
    request: CodeRequest,
    actor: Actor,
    *,
    holder: str | None = None,
    epoch: int | None = None,
    on_result: OnResult | None = None,
) -> CodeRun:
    """`start_code`, waited for in place."""
    return start_code(
        sandbox, request, actor, holder=holder, epoch=epoch, on_result=on_result
    ).block()


def _whole(record: Exec, followed: CodeOutcome | None) -> CodeOutcome:
    """The run's results: as followed, when the end was among them; else from what its
    record kept of its output, when that is all of it; else from the agent's copy."""
    if followed is not None and (followed.of("end") or record.state == ExecState.RUNNING):
        return followed
    if not record.stdout_truncated:
        return outcome_of(record.stdout)
    return code_outcome(record)


def code_outcome(record: Exec) -> CodeOutcome:
    """A run's results from its kept output (the agent's copy, else its record's)."""
    output = b"".join(exec_output_bytes(record, "stdout"))
    return outcome_of(output.decode("utf-8", errors="replace"))
