"""The distributed mode with two Docker hosts: each host's engine work goes to its own
queue, done by the workers that serve it (BOXYARD_WORKER_HOSTS); the web process reaches
the agents of sandboxes on either host. Runs where REDIS_URL is set on PostgreSQL (CI:
`bin/with-postgres bin/with-redis bin/test`)."""

import json
import socket
from typing import Any

import redis
from django.conf import settings

from hosts.models import DockerHost, default_host_pk
from sandboxes.services.background import BOOT
from tests.conftest import CHAT, DEPLOYMENT
from tests.engines import second_engine  # noqa: F401 - fixture
from tests.hosts.test_second_host import second_host  # noqa: F401 - fixture
from tests.test_distributed import _wait, bot_client, cluster  # noqa: F401 - fixture
from tests.test_distributed import pytestmark as distributed

pytestmark = distributed


def _open(bot: Any, pipeline: Any, chat: str) -> str:
    opened = bot.post(
        "/sandboxes/open",
        json={"pipeline": pipeline.slug, "variables": {**CHAT, "launcher_id": chat}, "async": True},
    )
    assert opened.status_code == 200, opened.text
    assert opened.json()["status"] == "creating"
    return str(opened.json()["sandbox_id"])


def _queued_boots(queue: str) -> list[str]:
    """The sandboxes whose boot tasks wait in a queue's lists in the broker (kombu keeps one
    list per priority, each named after the queue)."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        messages = [
            json.loads(raw)
            for key in broker.scan_iter(match=f"{queue}*")
            for raw in broker.lrange(key, 0, -1)
        ]
    finally:
        broker.close()
    return [
        message["headers"]["argsrepr"] for message in messages if message["headers"]["task"] == BOOT
    ]


def _consumes(worker: str, queue: str) -> bool:
    """Whether the cluster's worker `worker` consumes `queue` now, as it answers Celery's
    remote control (a worker that has not started, or does not serve it, says no)."""
    from config.celery import app

    destination = f"{worker}@{socket.gethostname()}"
    answers = app.control.inspect(destination=[destination], timeout=1).active_queues() or {}
    return queue in {bound["name"] for bound in answers.get(destination, [])}


def _status(bot: Any, sandbox_id: str) -> str:
    return str(bot.get(f"/sandboxes/{sandbox_id}").json()["status"])


def test_each_hosts_boots_run_in_the_workers_that_serve_it(
    cluster, make_pipeline, second_host
) -> None:
    local = DockerHost.objects.get(pk=default_host_pk())
    cluster.processes["worker"].stop()  # it serves every host: out of the way
    # The disk keeper's image as the second engine has it (the cluster's default image is the
    # test image, which cannot keep disks).
    disks = {"BOXYARD_DISK_IMAGE": settings.BOXYARD_DISK_IMAGE}
    cluster.worker("worker-local", BOXYARD_WORKER_HOSTS=local.name, **disks)
    serving_second = cluster.worker("worker-second", BOXYARD_WORKER_HOSTS=second_host.name, **disks)
    queue = f"boxyard-{DEPLOYMENT}.host.{second_host.name}"  # the cluster's name for it
    _wait(lambda: _consumes("worker-second", queue), 60, cluster)
    zoned = make_pipeline(slug="zoned", host_labels={"zone": "b"})
    anywhere = make_pipeline(slug="anywhere")
    DockerHost.objects.filter(pk=second_host.pk).update(labels={"zone": "b"})

    with bot_client(cluster, zoned) as on_second, bot_client(cluster, anywhere) as on_local:
        first = _open(on_second, zoned, "1")
        _wait(lambda: _status(on_second, first) == "running", 60, cluster)
        # The web process reaches the agent of a sandbox on the second host.
        ran = on_second.post(f"/sandboxes/{first}/exec", json={"cmd": "echo on second"})
        assert ran.json()["stdout"] == "on second\n", ran.text

        # With no worker serving the second host, its boots wait in its queue...
        serving_second.stop()
        waiting = _open(on_second, zoned, "2")
        elsewhere = _open(on_local, anywhere, "3")
        _wait(lambda: _status(on_local, elsewhere) == "running", 60, cluster)
        # Its boot task is still in the queue's list in Redis: no worker took it (a worker
        # that had taken it would have moved it out, to its unacknowledged messages).
        assert [waiting in args for args in _queued_boots(queue)] == [True]
        assert _status(on_second, waiting) == "creating"
        # ... and a worker that serves it takes them up.
        cluster.worker("worker-second-again", BOXYARD_WORKER_HOSTS=second_host.name, **disks)
        _wait(lambda: _consumes("worker-second-again", queue), 60, cluster)
        _wait(lambda: _status(on_second, waiting) == "running", 60, cluster)


def test_a_worker_serving_every_host_takes_up_a_host_added_later(
    cluster, make_pipeline, second_host
) -> None:
    from boxyard.actors import Actor
    from hosts import services

    serving_all = cluster.processes["worker"]
    _wait(lambda: "ready." in serving_all.tail(), 60, cluster)
    services.add_host(Actor("command", "tests"), "third", url="tcp://third.invalid:2376")
    _wait(lambda: "now serves Docker host third" in serving_all.tail(), 30, cluster)
    # Nothing answers at third.invalid: the worker's health check marks it down.
    _wait(lambda: DockerHost.objects.get(name="third").down_since is not None, 30, cluster)
