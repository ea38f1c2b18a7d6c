"""An exec's small state table and its one writer of an end (`execs.ending.end`): it runs,
then ends once; the first report counts and a later one changes nothing. Read from the source
too, as tests/test_layers.py reads imports: nothing else writes an exec's end."""

import ast
from pathlib import Path

import pytest

from sandboxes.models import Exec, ExecState
from sandboxes.services.creating import create_row
from sandboxes.services.execs import ending

REPO = Path(__file__).resolve().parents[3]
ENDED = set(ExecState) - {ExecState.RUNNING}


def test_an_exec_runs_then_ends_once() -> None:
    assert set(ending.TRANSITIONS) == set(ExecState)
    assert ending.TRANSITIONS[ExecState.RUNNING] == ENDED
    for state in ENDED:
        assert ending.TRANSITIONS[state] == frozenset(), f"{state} moves on"


@pytest.fixture
def record(pipeline, bot) -> Exec:
    sandbox = create_row(pipeline, "chat-1", {}, bot)
    return Exec.objects.create(
        sandbox=sandbox, command="sleep 9", actor=str(bot), timeout_seconds=0
    )


@pytest.mark.django_db
def test_the_first_report_counts(record: Exec) -> None:
    first = ending.end(Exec.objects.get(pk=record.pk), ExecState.COMPLETED, exit_code=0)
    assert (first.state, first.exit_code) == (ExecState.COMPLETED, 0)
    later = ending.end(Exec.objects.get(pk=record.pk), ExecState.KILLED, exit_code=-9)
    assert (later.state, later.exit_code) == (ExecState.COMPLETED, 0)  # read again as it is
    stored = Exec.objects.get(pk=record.pk)
    assert (stored.state, stored.exit_code, stored.finished_at) == (
        ExecState.COMPLETED,
        0,
        first.finished_at,
    )


@pytest.mark.django_db
def test_a_failure_after_the_agents_report_changes_nothing(record: Exec) -> None:
    """The agent's report came first (a watcher thread); the request that then fails to
    reach the agent does not overwrite it, as it did when a failure was saved whole."""
    reported = ending.finish_from_status(
        Exec.objects.get(pk=record.pk),
        {"finished": True, "exit_code": 0, "stdout": "", "stderr": "", "duration_ms": 5},
    )
    assert reported.state == ExecState.COMPLETED
    after = ending.fail(Exec.objects.get(pk=record.pk), ExecState.LOST, "the agent went away")
    assert (after.state, after.error) == (ExecState.COMPLETED, "")
    assert ending.forgotten(Exec.objects.get(pk=record.pk)).state == ExecState.COMPLETED


@pytest.mark.django_db
def test_an_exec_cannot_end_running(record: Exec) -> None:
    with pytest.raises(ValueError, match="does not end"):
        ending.end(record, ExecState.RUNNING)
    assert Exec.objects.get(pk=record.pk).state == ExecState.RUNNING


def _writes_an_end(node: ast.AST) -> bool:
    """A call that sets an exec's state or end (`.update(state=…)`, `.create(state=…)`), or an
    assignment to `….state` / `….finished_at` of something that is not a sandbox."""
    writes = ("update", "create", "update_or_create", "bulk_update")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in writes and any(
            keyword.arg in ending.END_FIELDS for keyword in node.keywords
        )
    if isinstance(node, ast.Assign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(
            isinstance(target, ast.Attribute)
            and target.attr in ending.END_FIELDS
            and any(word in ast.unparse(target.value).lower() for word in ("exec", "record"))
            for target in targets
        )
    return False


def _uses_exec(tree: ast.AST) -> bool:
    return any(
        (isinstance(node, ast.Name) and node.id == "Exec")
        or (isinstance(node, ast.ImportFrom) and any(a.name == "Exec" for a in node.names))
        for node in ast.walk(tree)
    )


def test_only_ending_writes_an_exec_end() -> None:
    """Every other way to end an exec (a failure, a lost one, a terminal's close, the
    reconciler) goes through `ending.end`."""
    own = REPO / "sandboxes" / "services" / "execs" / "ending.py"
    writers = []
    for folder in ("sandboxes", "pipelines", "hosts", "boxyard"):
        for path in (REPO / folder).rglob("*.py"):
            if "migrations" in path.parts or path == own:
                continue
            tree = ast.parse(path.read_text())
            if not _uses_exec(tree):
                continue
            for node in ast.walk(tree):
                if not _writes_an_end(node):
                    continue
                source = ast.unparse(node)
                if "Exec" in source or "record" in source or "exec" in source.lower():
                    writers.append(f"{path.relative_to(REPO)}:{node.lineno}: {source[:80]}")
    assert writers == []
