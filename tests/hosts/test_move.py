"""Draining a host and moving its sandboxes to another, on two real engines: the workspace
arrives byte for byte (its sha256 unchanged), the lease and the history stay, and nothing is
left on the old host."""

from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from boxyard.actors import Actor
from boxyard.errors import ImageMissing, InvalidState, NoRoom
from hosts import services as hosts
from hosts.engines import get_runtime
from hosts.models import DockerHost, default_host_pk
from pipelines.models import Retention
from sandboxes import services
from sandboxes.models import Event, Sandbox, State
from sandboxes.services.moving import move_all, move_sandbox
from tests.conftest import CHAT
from tests.engines import SecondEngine, second_engine  # noqa: F401 - fixtures
from tests.hosts.test_second_host import second_host  # noqa: F401 - fixture

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

ADMIN = Actor("admin", "alice")
FILES = (
    "mkdir -p deep/er && head -c 3000000 /dev/urandom > deep/er/big.bin && "
    "echo hello > note.txt && chmod 600 note.txt && ln -s note.txt link && "
    "find . -path ./.skills -prune -o -type f -print | sort | xargs sha256sum | sha256sum"
)
DIGEST = "find . -path ./.skills -prune -o -type f -print | sort | xargs sha256sum | sha256sum"


def _run(sandbox: Sandbox, command: str, holder: str | None = None) -> Any:
    sandbox.refresh_from_db()
    request = services.clean_request(sandbox, cmd=command)
    return services.run_exec(sandbox, request, ADMIN, holder=holder)


def test_a_sandbox_moves_with_its_workspace_lease_and_history(
    make_pipeline, bot, second_engine, second_host, docker_engine
) -> None:
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    opened = services.open_sandbox(pipeline, CHAT, bot, holder="bot-1")
    sandbox = opened.sandbox
    assert sandbox.host.is_default
    wrote = _run(sandbox, FILES, "bot-1")
    assert wrote.exit_code == 0, wrote.stderr
    digest = wrote.stdout
    old_container, epoch = sandbox.container_id, opened.lease.epoch

    moved = move_sandbox(sandbox, second_host, ADMIN)

    sandbox.refresh_from_db()
    assert (moved.source, moved.target) == ("local", "second")
    assert sandbox.host == second_host and sandbox.state == State.RUNNING
    assert (sandbox.lease.holder, sandbox.lease.epoch) == ("bot-1", epoch)
    assert second_engine.runtime.inspect_container(sandbox.container_id).running
    # Nothing of it is left on the machine's engine: no container, no workspace.
    assert get_runtime().inspect_container(old_container) is None
    assert sandbox.volume_name not in get_runtime().list_volumes({})
    read = _run(sandbox, DIGEST + "; stat -c '%a %u' note.txt; readlink link", "bot-1")
    assert read.exit_code == 0, read.stderr
    sums, mode, link = read.stdout.splitlines()
    assert sums == digest.strip()  # every file's sha256, over all of them: unchanged
    assert (mode, link) == (f"600 {settings.BOXYARD_SANDBOX_USER.split(':')[0]}", "note.txt")
    actions = list(Event.objects.filter(sandbox=sandbox).values_list("action", flat=True))
    assert {"sandbox.created", "sandbox.moving", "sandbox.moved"} <= set(actions)
    # The bot's own lease still works on the new host.
    again = services.open_sandbox(pipeline, CHAT, bot, holder="bot-1")
    assert again.sandbox.pk == sandbox.pk and again.lease.epoch == epoch


def test_draining_stops_placement_and_moves_every_sandbox_off(
    make_pipeline, bot, second_engine, second_host, docker_engine
) -> None:
    zoned = make_pipeline(slug="zoned", retention=Retention.PERSISTENT)
    # Two sandboxes on the second host (the machine's engine draining meanwhile).
    hosts.drain(DockerHost.objects.get(pk=default_host_pk()), ADMIN)
    first = services.open_sandbox(zoned, {**CHAT, "launcher_id": "1"}, bot).sandbox
    second = services.open_sandbox(zoned, {**CHAT, "launcher_id": "2"}, bot).sandbox
    assert first.host == second.host == second_host
    _run(first, "echo one > one.txt")
    services.close_sandbox(second, bot)  # a stopped one moves too, and stays stopped
    with pytest.raises(InvalidState, match="drain the Docker host second"):
        move_all(second_host, ADMIN)

    local = DockerHost.objects.get(pk=default_host_pk())
    hosts.undrain(local, ADMIN)
    hosts.drain(second_host, ADMIN)
    with pytest.raises(NoRoom), transaction.atomic():  # a draining host takes no new sandbox
        from sandboxes.services.placing import place

        DockerHost.objects.filter(pk=local.pk).update(state="draining")
        place(zoned)
    DockerHost.objects.filter(pk=local.pk).update(state="active")

    moved = move_all(DockerHost.objects.get(pk=second_host.pk), ADMIN)

    assert sorted(m.sandbox.pk for m in moved) == sorted([first.pk, second.pk])
    assert not Sandbox.objects.filter(host=second_host).exclude(state=State.DESTROYED).exists()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == (State.RUNNING, State.STOPPED)
    assert _run(first, "cat one.txt").stdout == "one\n"
    assert second_engine.runtime.list_volumes({}) == [] or all(
        not name.startswith("boxyard-ws") for name in second_engine.runtime.list_volumes({})
    )


def test_a_move_that_cannot_carry_is_cancelled_and_loses_nothing(
    make_pipeline, bot, second_engine, second_host, docker_engine
) -> None:
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    _run(sandbox, "echo kept > kept.txt")
    # The target lacks the sandbox's image under another name: its helper cannot be made.
    sandbox.image = "boxyard/not-there:1"
    Sandbox.objects.filter(pk=sandbox.pk).update(image=sandbox.image)
    with pytest.raises(ImageMissing):
        move_sandbox(sandbox, second_host, ADMIN)
    sandbox.refresh_from_db()
    assert sandbox.host.is_default and sandbox.state == State.STOPPED
    assert sandbox.volume_name in get_runtime().list_volumes({})
    assert sandbox.volume_name not in second_engine.runtime.list_volumes({})
    Sandbox.objects.filter(pk=sandbox.pk).update(image=pipeline.effective_image)
    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert _run(reopened, "cat kept.txt").stdout == "kept\n"


def test_the_command_line_moves_one_sandbox_and_empties_a_draining_host(
    make_pipeline, bot, second_engine, second_host, docker_engine
) -> None:
    import io

    from django.core.management import call_command

    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    _run(sandbox, "echo carried > c.txt")
    out = io.StringIO()
    call_command("hosts", "move", str(sandbox.pk), "--to", "second", stdout=out)
    assert f"moved {sandbox.pk} from local to second" in out.getvalue()
    call_command("hosts", "drain", "second", stdout=out)
    call_command("hosts", "move-all", "second", stdout=out)
    assert "1 moved; 0 left on second" in out.getvalue()
    sandbox.refresh_from_db()
    assert sandbox.host.is_default and sandbox.state == State.RUNNING
    assert _run(sandbox, "cat c.txt").stdout == "carried\n"


def test_an_admin_moves_a_sandbox_and_empties_a_draining_host_from_the_dashboard(
    make_pipeline, bot, admin_client, second_engine, second_host, docker_engine, monkeypatch
) -> None:
    """The sandbox page's Move and the Hosts page's Move them elsewhere hand the work to a
    worker of the sandbox's host (its queue); the task, run here as that worker would, moves
    it."""
    from celery import current_app

    from sandboxes import tasks

    queued: list[tuple[str, list[Any], dict[str, Any]]] = []
    monkeypatch.setattr(
        current_app,
        "send_task",
        lambda name, args=(), **options: queued.append((name, list(args), options)),
    )
    pipeline = make_pipeline(retention=Retention.PERSISTENT)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    _run(sandbox, "echo by hand > h.txt")

    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    assert 'data-testid="move"' in page and '<option value="second">second</option>' in page
    answer = admin_client.post(f"/sandboxes/{sandbox.pk}/move", {"to": "second"}, follow=True)
    assert "group_123456 is moving to second" in answer.content.decode()
    [(name, args, _options)] = queued
    assert name == "sandboxes.move"
    assert tasks.move(*args) == "second"
    sandbox.refresh_from_db()
    assert sandbox.host == second_host and sandbox.state == State.RUNNING
    events = Event.objects.filter(sandbox=sandbox, action="sandbox.moved")
    assert events.get().actor == "admin:alice"

    # A bad target is refused and queues nothing.
    queued.clear()
    refused = admin_client.post(f"/sandboxes/{sandbox.pk}/move", {"to": "second"}, follow=True)
    assert "to: the sandbox is on second already" in refused.content.decode()
    assert queued == []

    hosts.drain(DockerHost.objects.get(pk=second_host.pk), ADMIN)
    answer = admin_client.post("/hosts/second/move-all", {"next": "/hosts/"}, follow=True)
    assert "The 1 sandbox of second is moving to other hosts" in answer.content.decode()
    [(name, args, _options)] = queued
    assert (name, tasks.move_all(*args)) == ("sandboxes.move_all", 1)
    sandbox.refresh_from_db()
    assert sandbox.host.is_default
    assert _run(sandbox, "cat h.txt").stdout == "by hand\n"
