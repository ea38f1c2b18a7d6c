"""Making a directory and moving files in the workspace against the real engine, including a
symlink planted by sandbox code that would carry a move or a directory outside it."""

import pytest

from boxyard.errors import InvalidInput, NotFound
from sandboxes import services
from sandboxes.models import Event
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture
def sandbox(pipeline, bot, docker_engine):
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def sh(sandbox, bot, cmd):
    return services.run_exec(sandbox, services.clean_request(sandbox, cmd=cmd), bot)


def test_make_dir_makes_parents_once(sandbox, bot) -> None:
    assert services.make_dir(sandbox, "a/b/c", bot) is True
    assert services.make_dir(sandbox, "/workspace/a/b/c", bot) is False  # there already
    assert sh(sandbox, bot, "test -d a/b/c && echo dir").stdout == "dir\n"
    made = Event.objects.filter(action="file.directory_made")
    assert [event.detail["path"] for event in made] == ["/workspace/a/b/c"]


def test_move_renames_files_and_directories_making_parents(sandbox, bot) -> None:
    services.write_file(sandbox, "d/f.txt", b"x", bot)
    assert services.move_file(sandbox, "d/f.txt", "e/g.txt", bot) == "/workspace/e/g.txt"
    assert services.move_file(sandbox, "e", "renamed", bot) == "/workspace/renamed"
    assert sh(sandbox, bot, "cat renamed/g.txt; ls d").stdout == "x"
    assert Event.objects.filter(action="file.moved", detail__destination="/workspace/e/g.txt")
    with pytest.raises(NotFound):
        services.move_file(sandbox, "nothing", "else", bot)
    with pytest.raises(InvalidInput, match="source"):
        services.move_file(sandbox, "/workspace", "x", bot)
    with pytest.raises(InvalidInput, match="outside /workspace"):
        services.move_file(sandbox, "renamed/g.txt", "/etc/g.txt", bot)


def test_a_planted_symlink_carries_nothing_outside(sandbox, bot) -> None:
    services.write_file(sandbox, "f.txt", b"x", bot)
    sh(sandbox, bot, "ln -s /tmp out")
    with pytest.raises(InvalidInput, match="outside /workspace"):
        services.move_file(sandbox, "f.txt", "out/f.txt", bot)
    with pytest.raises(InvalidInput, match="outside /workspace"):
        services.make_dir(sandbox, "out/new", bot)
    assert sh(sandbox, bot, "ls /tmp; cat f.txt").stdout == "x"
