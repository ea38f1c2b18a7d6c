"""The distributed mode: web, Celery worker and beat as separate processes on PostgreSQL and
Redis, spoken to over HTTP like a bot would. Runs where REDIS_URL is set on a PostgreSQL
database (CI: `bin/with-postgres bin/with-redis bin/test`)."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from pipelines.models import PipelineToken
from sandboxes.models import Sandbox, State
from tests.conftest import CHAT, DEPLOYMENT, database_url, wait_for
from tests.sandboxes.services.test_reconciling import assert_converged

pytestmark = [
    pytest.mark.docker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL or "sqlite" in settings.DATABASES["default"]["ENGINE"],
        reason="the distributed mode needs REDIS_URL and PostgreSQL (bin/with-postgres bin/with-redis)",
    ),
]

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


@dataclass
class Cluster:
    base_url: str
    tmp: Path
    env: dict[str, str]
    processes: dict[str, Process]

    def start(self, name: str, command: list[str], **extra_env: str) -> Process:
        log = self.tmp / f"{name}.log"
        with log.open("wb") as output:
            popen = subprocess.Popen(
                command,
                cwd=REPO,
                env={**self.env, **extra_env},
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[name] = Process(name, popen, log)
        return self.processes[name]

    def worker(self, name: str = "worker", **extra_env: str) -> Process:
        return self.start(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-l",
                "info",
                "--concurrency",
                "2",
                "-n",
                f"{name}@%h",
            ],
            **extra_env,
        )

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail()}" for p in self.processes.values())


@pytest.fixture
def cluster(tmp_path: Path, docker_engine: Any) -> Iterator[Cluster]:
    port = _free_port()
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        BOXYARD_DEPLOYMENT=DEPLOYMENT,
        BOXYARD_DATA_DIR=str(tmp_path / "data"),
        BOXYARD_ALLOWED_HOSTS="127.0.0.1",
        BOXYARD_IMAGE_ALLOWLIST=settings.BOXYARD_TEST_IMAGE,
        BOXYARD_DEFAULT_IMAGE=settings.BOXYARD_TEST_IMAGE,
        BOXYARD_REAP_INTERVAL="2",
        BOXYARD_RECONCILE_INTERVAL="3",
        BOXYARD_RECONCILE_GRACE_SECONDS="2",
        BOXYARD_LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    running = Cluster(f"http://127.0.0.1:{port}", tmp_path, env, {})
    try:
        running.start(
            "web",
            [sys.executable, "-m", "config.serving", "--host", "127.0.0.1", "--port", str(port)],
        )
        running.worker()
        running.start(
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "-l",
                "info",
                "-s",
                str(tmp_path / "beat-schedule"),
            ],
        )
        _wait(lambda: _answers(running.base_url), 60, running)
        yield running
    finally:
        for process in running.processes.values():
            process.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _wait(condition: Any, seconds: float, cluster: Cluster) -> float:
    return wait_for(condition, seconds, cluster.logs)


@contextmanager
def bot_client(cluster: Cluster, pipeline: Any) -> Iterator[httpx.Client]:
    token = PipelineToken.issue(pipeline, name="distributed")[1]
    with httpx.Client(
        base_url=f"{cluster.base_url}/api/v1",
        timeout=60,
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        yield client


def test_a_background_open_is_booted_by_a_worker_process(cluster, pipeline) -> None:
    with bot_client(cluster, pipeline) as bot:
        opened = bot.post(
            "/sandboxes/open", json={"pipeline": pipeline.slug, "variables": CHAT, "async": True}
        )
        assert opened.status_code == 200, opened.text
        assert opened.json()["status"] == "creating"
        sandbox_id = opened.json()["sandbox_id"]
        _wait(
            lambda: bot.get(f"/sandboxes/{sandbox_id}").json()["status"] == "running", 60, cluster
        )
        ran = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "echo from-the-worker"})
        assert ran.json()["stdout"] == "from-the-worker\n", ran.text


def test_the_scheduler_and_the_worker_reap_an_idle_sandbox(cluster, make_pipeline) -> None:
    pipeline = make_pipeline(idle_timeout_seconds=1)
    with bot_client(cluster, pipeline) as bot:
        sandbox_id = bot.post(
            "/sandboxes/open", json={"pipeline": pipeline.slug, "variables": CHAT}
        ).json()["sandbox_id"]
        assert bot.post(f"/sandboxes/{sandbox_id}/lease/release", json={}).status_code == 200
        took = _wait(
            lambda: bot.get(f"/sandboxes/{sandbox_id}").json()["status"] == "destroyed", 31, cluster
        )
        assert took <= 1 + 30
        gone = bot.get(f"/sandboxes/{sandbox_id}").json()
        assert gone["stop_reason"] == "idle"
        refused = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
        assert refused.status_code == 409 and refused.json()["error"]["stop_reason"] == "idle"


def test_a_worker_killed_while_booting_is_made_good(cluster, pipeline, docker_engine) -> None:
    """The worker dies after the container is made and before it starts; another worker
    (its start-up reconciliation, or the redelivered task) finishes the boot."""
    cluster.processes["worker"].stop()
    doomed = cluster.worker("doomed", BOXYARD_CRASH_AT="create:container")
    with bot_client(cluster, pipeline) as bot:
        opened = bot.post(
            "/sandboxes/open", json={"pipeline": pipeline.slug, "variables": CHAT, "async": True}
        )
        sandbox_id = opened.json()["sandbox_id"]
        _wait(
            lambda: any(
                c.status == "created"
                for c in docker_engine.list_containers({"io.boxyard.sandbox": sandbox_id})
            ),
            60,
            cluster,
        )
        doomed.stop(signal.SIGKILL)
        assert Sandbox.objects.get(pk=sandbox_id).state == State.CREATING
        cluster.worker("rescuer")
        _wait(
            lambda: bot.get(f"/sandboxes/{sandbox_id}").json()["status"] == "running", 60, cluster
        )
        ran = bot.post(f"/sandboxes/{sandbox_id}/exec", json={"cmd": "echo rescued"})
        assert ran.json()["stdout"] == "rescued\n", ran.text
    assert_converged(docker_engine)


def test_the_channel_layer_is_shared_through_redis(cluster) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer
    from channels_redis.core import RedisChannelLayer

    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    name = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("fleet", name)
    async_to_sync(layer.group_send)("fleet", {"type": "fleet.changed", "sandbox": "x"})
    assert async_to_sync(layer.receive)(name) == {"type": "fleet.changed", "sandbox": "x"}
