"""A container that dies or is removed outside Boxyard is marked lost within a moment, from the
engine's event stream, and nothing Boxyard does itself is taken for such a loss.

Against the real engine: `docker kill` and `docker rm -f` from the command line, the kernel's
out-of-memory killer, Boxyard's own close, restart and destroy beside them; the dashboard's
push; two followers at once; a follower that missed events; the follower of the embedded
worker and of a Celery worker process, each ending with its worker; an engine that goes away
(a socket between Boxyard and the engine that is cut and restored) and a stream that outlives
its windows. The 1 s figure itself is the benchmark's (`bench/_events_lost.py`); the tests
allow 5 s on a busy machine.
"""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import Client

from boxyard.errors import RuntimeUnavailable
from config.celery import app
from config.embedded import start_worker_and_scheduler
from hosts.engines import get_runtime
from sandboxes import services
from sandboxes.models import Event, Lease, Sandbox, State, StopReason
from sandboxes.runtime import ContainerSpec, event_stream, labels_for, set_runtime
from sandboxes.runtime.docker import DockerRuntime
from sandboxes.services import watching
from sandboxes.services.watching import Follower
from tests.conftest import CHAT, DEPLOYMENT, database_url, wait_for
from tests.security.engine import (  # noqa: F401 - handled: a fixture
    BOUND_SECONDS,
    docker,
    handled,
    handled_by_all,
    marker,
)

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]

OTHER = {"launcher_type": "group", "launcher_id": "other"}


@pytest.fixture
def follower(docker_engine: Any) -> Iterator[Follower]:
    """A follower as every worker process runs one, reading the engine's stream."""
    running = Follower().start()
    assert running.following.wait(10), "the follower did not reach the engine"
    yield running
    running.stop()
    assert not running.alive


def row(sandbox: Sandbox) -> Sandbox:
    return Sandbox.objects.select_related("pipeline").get(pk=sandbox.pk)


def lost_within(sandbox: Sandbox, seconds: float) -> float:
    return wait_for(
        lambda: row(sandbox).stop_reason == StopReason.LOST,
        seconds,
        lambda: f"the sandbox is {row(sandbox).state} ({row(sandbox).stop_reason or 'no reason'})",
    )


def stopped_events(sandbox: Sandbox) -> list[Event]:
    return list(Event.objects.filter(sandbox=sandbox, action="sandbox.stopped"))


def test_a_docker_kill_marks_the_sandbox_lost_at_once(
    follower, pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    container = sandbox.container_id
    started = time.monotonic()
    docker("kill", container)
    took = lost_within(sandbox, BOUND_SECONDS)
    assert took < BOUND_SECONDS

    lost = row(sandbox)
    assert lost.state == State.STOPPED and lost.container_id == "" and lost.stopped_at is not None
    lease = Lease.objects.get(sandbox=sandbox)
    assert lease.holder == "" and lease.expires_at is None  # the lease released
    [event] = stopped_events(sandbox)
    assert event.reason == StopReason.LOST and event.detail["exit_code"] == 137
    assert event.detail["seen"] == "engine_event" and "oom_killed" not in event.detail
    # The dead container is removed as the reconciler would; the workspace stays.
    wait_for(lambda: docker_engine.inspect_container(container) is None, BOUND_SECONDS)
    assert lost.volume_name in docker_engine.list_volumes(labels_for())
    # The next open starts it again on the same workspace.
    again = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert again.pk == sandbox.pk and again.state == State.RUNNING
    assert again.generation == sandbox.generation + 1
    assert time.monotonic() - started < 60


def test_a_docker_rm_marks_the_sandbox_lost_at_once(follower, pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    docker("rm", "-f", sandbox.container_id)
    assert lost_within(sandbox, BOUND_SECONDS) < BOUND_SECONDS
    assert row(sandbox).state == State.STOPPED
    assert len(stopped_events(sandbox)) == 1


def test_a_container_the_oom_killer_ends_is_lost_and_one_command_it_ends_is_not(
    handled, follower, make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(memory_mb=32)
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    runtime = get_runtime()
    hog = "x=a; while :; do x=$x$x; done"  # doubles at once: the killer need not reclaim first
    # The killer takes a command's process, never the agent's; the container runs on.
    request = services.clean_request(sandbox, cmd=hog, timeout_seconds=60)
    first = services.run_exec(sandbox, request, bot)
    assert (first.exit_code, first.oom_killed) == (137, True)
    # The engine's "oom" event has come and gone: the follower handled a later one.
    handled_by_all(handled, marker())
    assert ("oom", row(sandbox).container_name) in handled, handled
    assert row(sandbox).state == State.RUNNING
    assert docker_engine.inspect_container(sandbox.container_id).running

    # Now the container's own process (tini's child) is made the killer's first choice.
    docker(
        "exec",
        "-u",
        "0",
        sandbox.container_id,
        "sh",
        "-c",
        "for d in /proc/[0-9]*; do grep -q '^PPid:[[:space:]]*1$' $d/status 2>/dev/null"
        " && echo 1000 > $d/oom_score_adj; done; true",  # the loop's status is its last grep's
    )
    runtime.exec(sandbox.container_id, ["sh", "-c", hog], deadline_seconds=60)
    assert lost_within(sandbox, BOUND_SECONDS) < BOUND_SECONDS
    [event] = stopped_events(sandbox)
    assert event.detail["oom_killed"] is True and event.detail["exit_code"] == 137


def test_what_boxyard_does_itself_is_not_a_loss(
    follower, pipeline, bot, alice_actor, docker_engine
) -> None:
    closed = services.open_sandbox(pipeline, CHAT, bot).sandbox
    restarted = services.open_sandbox(pipeline, OTHER, bot).sandbox
    destroyed = services.open_sandbox(pipeline, {**CHAT, "launcher_id": "3"}, bot).sandbox
    marker = services.open_sandbox(pipeline, {**CHAT, "launcher_id": "4"}, bot).sandbox

    services.close_sandbox(closed, bot)
    old_container = restarted.container_id
    restarted = services.restart_sandbox(row(restarted), alice_actor)
    services.close_sandbox(destroyed, alice_actor, delete_workspace=True, force=True)
    assert docker_engine.inspect_container(old_container) is None
    # Events are handled in order: once the marker's kill is handled, so were the others.
    docker("kill", marker.container_id)
    lost_within(marker, BOUND_SECONDS)

    assert row(closed).state == State.STOPPED and row(closed).stop_reason == StopReason.CLOSED
    assert row(restarted).state == State.RUNNING
    assert row(restarted).generation == restarted.generation
    assert docker_engine.inspect_container(row(restarted).container_id).running
    assert row(destroyed).state == State.DESTROYED
    assert row(destroyed).stop_reason == StopReason.CLOSED
    lost = Event.objects.filter(action="sandbox.stopped", reason=StopReason.LOST)
    assert [event.sandbox_id for event in lost] == [marker.pk]


def test_the_dashboard_hears_of_the_loss(
    follower, pipeline, bot, django_user_model, settings
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    admin = Client()
    admin.force_login(django_user_model.objects.create_user("alice", password="x", is_staff=True))
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox

    async def scenario() -> tuple[float, str]:
        from channels.testing import WebsocketCommunicator

        from config.asgi import application

        cookie = f"sessionid={admin.cookies['sessionid'].value}".encode()
        page = WebsocketCommunicator(
            application,
            "/ws/fleet/?state=live",
            headers=[
                (b"origin", b"http://testserver"),
                (b"host", b"testserver"),
                (b"cookie", cookie),
            ],
        )
        connected, _ = await page.connect()
        assert connected
        first = await page.receive_from(timeout=10)
        assert f"sandbox-{sandbox.pk}" in first
        started = time.monotonic()
        await database_sync_to_async(docker)("kill", sandbox.container_id)
        pushed = await page.receive_from(timeout=BOUND_SECONDS)
        took = time.monotonic() - started
        await page.disconnect()
        return took, pushed

    took, pushed = asyncio.run(scenario())
    # The row says what happened, and the counters moved with it.
    assert f'<tr id="sandbox-{sandbox.pk}" class="state-stopped"' in pushed
    assert "Container lost" in pushed and '<strong data-state="running">0</strong>' in pushed
    assert took < BOUND_SECONDS
    assert row(sandbox).stop_reason == StopReason.LOST


def test_two_followers_make_one_change(handled, follower, pipeline, bot, docker_engine) -> None:
    second = Follower().start()
    try:
        assert second.following.wait(10)
        sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
        docker("kill", sandbox.container_id)
        lost_within(sandbox, BOUND_SECONDS)
        # Both have handled the die and the destroy that followed: and a later event.
        handled_by_all(handled, marker(), followers=2)
    finally:
        second.stop()
    assert len(stopped_events(sandbox)) == 1


def test_a_follower_that_missed_events_catches_up(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    before = time.time() - 1
    docker("kill", sandbox.container_id)  # no follower runs, so nothing can mark it lost
    assert row(sandbox).state == State.RUNNING
    late = Follower(since=before).start()
    try:
        assert lost_within(sandbox, BOUND_SECONDS) < BOUND_SECONDS
    finally:
        late.stop()


# --- where it runs ------------------------------------------------------------------------------


def test_the_embedded_worker_follows_the_engine_and_stops_with_it(
    pipeline, bot, docker_engine, settings, tmp_path
) -> None:
    settings.CELERY_BEAT_SCHEDULE_FILENAME = str(tmp_path / "beat-schedule")
    app.control.purge()
    worker = start_worker_and_scheduler()
    try:
        # Its keeper checks the hosts and follows each one that answers: here, this machine's.
        wait_for(lambda: bool(watching.following()), 10)
        follower = watching._followers[next(iter(watching.following()))]
        assert follower.following.wait(10)
        sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
        docker("kill", sandbox.container_id)
        assert lost_within(sandbox, BOUND_SECONDS) < BOUND_SECONDS
    finally:
        worker.stop(in_sighandler=False)
        from celery.beat import _Threaded

        for thread in threading.enumerate():
            if isinstance(thread, _Threaded):  # the embedded scheduler
                thread.stop()
    assert watching.following() == set() and not follower.alive


def test_a_celery_worker_process_follows_the_engine_and_ends_quietly(
    pipeline, bot, docker_engine, tmp_path
) -> None:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        BOXYARD_DEPLOYMENT=DEPLOYMENT,
        BOXYARD_DATA_DIR=str(tmp_path / "data"),
        BOXYARD_LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-l",
                "info",
                "--pool",
                "solo",
                "-n",
                f"events-{uuid.uuid4().hex[:6]}@%h",
            ],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: "following the engine's events" in log.read_text(), 60, log.read_text)
        sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
        docker("kill", sandbox.container_id)
        assert lost_within(sandbox, BOUND_SECONDS) < BOUND_SECONDS
    finally:
        worker.send_signal(signal.SIGTERM)  # a warm shutdown, as a service manager stops it
        try:
            code = worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            raise
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text(), log.read_text()


# --- engine trouble ------------------------------------------------------------------------------


class _CuttableSocket:
    """A unix socket in front of the engine's: connections pass through until `cut()`, which
    drops them and refuses new ones, as a stopped engine does; `restore()` serves again."""

    def __init__(self, path: Path, engine: str) -> None:
        self.path, self.engine = path, engine
        self._conns: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._lock = threading.Lock()

    def restore(self) -> None:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            conns, self._conns = self._conns, []
        if server is not None:
            server.close()
        self.path.unlink(missing_ok=True)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.engine)
            with self._lock:
                self._conns += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, target), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        for end in (source, target):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _engine_socket() -> str:
    host = (
        settings.BOXYARD_DOCKER_HOST
        or os.environ.get("DOCKER_HOST")
        or "unix:///var/run/docker.sock"
    )
    if not host.startswith("unix://"):
        pytest.fail(f"this test cuts a unix socket; the engine is at {host}")
    return host.removeprefix("unix://")


def test_a_follower_outlives_an_engine_that_goes_away(
    pipeline, bot, docker_engine, tmp_path
) -> None:
    cuttable = _CuttableSocket(tmp_path / f"engine-{uuid.uuid4().hex[:6]}.sock", _engine_socket())
    cuttable.restore()
    set_runtime(DockerRuntime(base_url=f"unix://{cuttable.path}"))
    follower = Follower().start()
    try:
        assert follower.following.wait(10)
        first = services.open_sandbox(pipeline, CHAT, bot).sandbox
        second = services.open_sandbox(pipeline, OTHER, bot).sandbox

        cuttable.cut()  # the engine is gone for the follower (and for Boxyard)
        wait_for(lambda: not follower.following.is_set(), BOUND_SECONDS)
        with pytest.raises(RuntimeUnavailable):
            get_runtime().ping()
        docker("kill", first.container_id)  # while it cannot listen
        # It reads no stream (it would have set `following`), so it cannot have heard it.
        assert not follower.following.is_set()
        assert row(first).state == State.RUNNING
        assert follower.alive

        cuttable.restore()  # back: it resumes where it was, and hears what it missed
        assert lost_within(first, 40) < 40
        docker("kill", second.container_id)
        assert lost_within(second, BOUND_SECONDS) < BOUND_SECONDS
    finally:
        follower.stop()
        set_runtime(None)
        cuttable.cut()
    assert not follower.alive


def test_the_stream_outlives_quiet_windows_and_gives_each_event_once(
    monkeypatch, docker_engine
) -> None:
    monkeypatch.setattr(event_stream, "WINDOW_SECONDS", 1.0)
    labels = labels_for(**{"io.boxyard.test": uuid.uuid4().hex})
    stream = docker_engine.events(labels)
    seen: list[tuple[str, str]] = []
    reader = threading.Thread(target=lambda: seen.extend((e.action, e.name) for e in stream))
    reader.start()
    api_name = f"by-events-{uuid.uuid4().hex[:8]}"
    try:
        docker_engine.ensure_container(
            ContainerSpec(
                name=api_name,
                image=settings.BOXYARD_TEST_IMAGE,
                labels=labels,
                user=settings.BOXYARD_SANDBOX_USER,
                mounts=(),
            )
        )
        time.sleep(3.5)  # three windows end in silence, each resuming at the start
        docker("kill", api_name)
        docker_engine.remove_container(api_name)
        wait_for(lambda: len(seen) >= 3, BOUND_SECONDS)
        # No event comes twice: a later container's start comes right after them.
        later = f"{api_name}-later"
        docker_engine.ensure_container(
            ContainerSpec(
                name=later,
                image=settings.BOXYARD_TEST_IMAGE,
                labels=labels,
                user=settings.BOXYARD_SANDBOX_USER,
                mounts=(),
            )
        )
        wait_for(lambda: ("start", later) in seen, BOUND_SECONDS)
        docker_engine.remove_container(later)
    finally:
        stream.close()
        reader.join(5)
        docker_engine.remove_container(api_name)
    assert not reader.is_alive()
    assert seen[:4] == [
        ("start", api_name),
        ("die", api_name),
        ("destroy", api_name),
        ("start", later),
    ]
