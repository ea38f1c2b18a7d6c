"""Compute mode: one run in a fresh sandbox, destroyed afterwards whatever happens."""

import pytest

from boxyard.errors import InvalidInput
from sandboxes.models import Sandbox, State
from sandboxes.services.compute import run_code
from tests.conftest import DEPLOYMENT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def nothing_left(engine) -> bool:
    labels = {"io.boxyard.deployment": DEPLOYMENT}
    return not engine.list_containers(labels) and not engine.list_volumes(labels)


def test_a_run_with_files_and_env(pipeline, bot, docker_engine) -> None:
    result = run_code(
        pipeline,
        bot,
        language="sh",
        code='. ./lib/greet.sh; greet "$WHO"',
        files_in={"lib/greet.sh": 'greet() { echo "hello $1"; }\n'},
        env={"WHO": "world"},
    )
    assert result.ok and result.exec.stdout == "hello world\n"
    assert Sandbox.objects.get().state == State.DESTROYED
    assert nothing_left(docker_engine)


def test_a_failing_run_is_reported_and_cleaned_up(pipeline, bot, docker_engine) -> None:
    result = run_code(pipeline, bot, language="sh", code="echo oops >&2; exit 3")
    assert not result.ok and (result.exec.exit_code, result.exec.stderr) == (3, "oops\n")
    assert nothing_left(docker_engine)


def test_a_run_that_times_out_is_killed_and_cleaned_up(pipeline, bot, docker_engine) -> None:
    result = run_code(pipeline, bot, language="sh", code="sleep 60", timeout_seconds=1)
    assert result.exec.state == "timed_out" and not result.ok
    assert result.duration_ms < 15_000
    assert nothing_left(docker_engine)


def test_python_runs_in_the_default_image(make_pipeline, bot, docker_engine, settings) -> None:
    pipeline = make_pipeline(image=settings.BOXYARD_DEFAULT_IMAGE)
    result = run_code(pipeline, bot, language="python", code="print(sum(range(10)))")
    assert result.exec.stdout == "45\n"
    assert nothing_left(docker_engine)


def test_javascript_runs_with_node_and_its_args(
    make_pipeline, bot, docker_engine, settings
) -> None:
    pipeline = make_pipeline(image=settings.BOXYARD_DEFAULT_IMAGE)
    code = "console.log(JSON.stringify(process.argv.slice(2)))"
    result = run_code(pipeline, bot, language="javascript", code=code, args=["a b", "", "ü"])
    assert result.ok and result.exec.stdout == '["a b","","ü"]\n'
    assert nothing_left(docker_engine)


def test_args_reach_a_shell_program(pipeline, bot, docker_engine) -> None:
    result = run_code(pipeline, bot, language="sh", code='printf "%s|" "$@"', args=["x", "y z"])
    assert result.ok and result.exec.stdout == "x|y z|"
    assert nothing_left(docker_engine)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"language": "cobol", "code": "x"}, "language"),
        ({"language": "sh", "code": "x", "files_in": {"../x": "y"}}, "files"),
        ({"language": "sh", "code": "x", "timeout_seconds": 0}, "timeout_seconds"),
        ({"language": "sh", "code": "x", "files_in": {"main.js": "y"}}, "files"),
        ({"language": "sh", "code": "x", "args": ["a"] * 101}, "args"),
        ({"language": "sh", "code": "x", "args": ["a\x00b"]}, "args"),
        ({"language": "sh", "code": "x", "args": ["a" * 40_000] * 2}, "args"),
        ({"language": "sh", "code": "x", "args": "abc"}, "args"),
    ],
)
def test_bad_runs_are_refused_and_leave_nothing(
    pipeline, bot, docker_engine, kwargs, field
) -> None:
    with pytest.raises(InvalidInput) as caught:
        run_code(pipeline, bot, **kwargs)
    assert caught.value.field == field
    assert nothing_left(docker_engine)
    assert not Sandbox.objects.exists()  # refused before anything was made
