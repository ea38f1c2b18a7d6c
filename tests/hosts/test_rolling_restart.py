"""A rolling restart of the distributed mode with two Docker hosts: two web processes and two
workers, each stopped (SIGTERM, as a service manager does) and started again in turn, while a
bot keeps sending commands to a sandbox on each host through whichever web process answers.
No command the bot was told ran is lost, none is left running, and no container is left
without its sandbox on either host. Runs where REDIS_URL is set on PostgreSQL."""

import sys
import threading
import time
from typing import Any

import httpx
from django.conf import settings

from hosts.engines import get_runtime
from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import Exec, ExecState, Sandbox, State
from sandboxes.runtime import LABEL_SANDBOX
from sandboxes.services.reconciling import reconcile
from tests.conftest import CHAT, DEPLOYMENT
from tests.engines import SecondEngine, second_engine  # noqa: F401 - fixture
from tests.hosts.test_second_host import second_host  # noqa: F401 - fixture
from tests.test_distributed import _answers, _free_port, _wait, cluster  # noqa: F401
from tests.test_distributed import pytestmark as distributed

pytestmark = distributed


class Stream:
    """The bot: `echo N >> stream.txt` in each sandbox in turn, over and over, through the
    web processes in turn; a web process that does not answer is skipped for the next (as a
    load balancer would), and the command sent again there."""

    def __init__(self, token: str, webs: list[str], sandboxes: list[str]) -> None:
        self.webs, self.sandboxes = webs, sandboxes
        self.headers = {"Authorization": f"Bearer {token}"}
        self.answered: dict[str, list[int]] = {sandbox: [] for sandbox in sandboxes}
        self.retries = 0
        self.refused: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        number = 0
        while not self.stopping.is_set():
            sandbox = self.sandboxes[number % len(self.sandboxes)]
            self.send(sandbox, number)
            number += 1

    def send(self, sandbox: str, number: int) -> None:
        for attempt in range(40):
            web = self.webs[(number + attempt) % len(self.webs)]
            try:
                answer = httpx.post(
                    f"{web}/api/v1/sandboxes/{sandbox}/exec",
                    json={"cmd": f"echo {number} >> stream.txt"},
                    headers=self.headers,
                    timeout=30,
                )
            except httpx.TransportError:
                self.retries += 1
                time.sleep(0.1)
                continue
            if answer.status_code == 200 and answer.json()["exit_code"] == 0:
                self.answered[sandbox].append(number)
            else:
                self.refused.append(f"{number}: {answer.status_code} {answer.text[:200]}")
            return
        self.refused.append(f"{number}: no web process answered")


def _restart(cluster: Any, name: str, command: list[str] | None, **env: str) -> None:
    """Stop a process as a service manager does and start it again the same way."""
    cluster.processes[name].stop()
    if command is None:
        cluster.worker(name, **env)
    else:
        cluster.start(name, command, **env)


def _wait_for_commands(streams: list[Stream], cluster: Any, more: int = 3) -> None:
    """Until each bot has had `more` further commands answered: the processes restarted
    before were back at work, and the next restart happens while commands flow."""
    since = [sum(map(len, stream.answered.values())) for stream in streams]
    _wait(
        lambda: all(
            sum(map(len, stream.answered.values())) >= before + more
            for stream, before in zip(streams, since, strict=True)
        ),
        60,
        cluster,
    )


def _orphans(runtime: Any, host: int) -> list[str]:
    """Containers of this deployment on a host that no running sandbox of that host has."""
    rows = {
        str(pk): container
        for pk, container in Sandbox.objects.filter(host=host, state=State.RUNNING).values_list(
            "pk", "container_id"
        )
    }
    return [
        info.name
        for info in runtime.list_containers({"io.boxyard.deployment": DEPLOYMENT})
        if rows.get(info.labels.get(LABEL_SANDBOX, "")) != info.id
    ]


def test_a_rolling_restart_loses_no_command_and_leaves_no_orphan(
    cluster, make_pipeline, bot, second_engine, second_host
) -> None:
    disks = {"BOXYARD_DISK_IMAGE": settings.BOXYARD_DISK_IMAGE}
    port = _free_port()
    web2 = [sys.executable, "-m", "config.serving", "--host", "127.0.0.1", "--port", str(port)]
    web1 = list(cluster.processes["web"].popen.args)  # type: ignore[arg-type]
    cluster.start("web2", web2, **disks)
    cluster.processes["worker"].stop()
    cluster.worker("worker-1", **disks)
    cluster.worker("worker-2", **disks)
    webs = [cluster.base_url, f"http://127.0.0.1:{port}"]
    _wait(lambda: all(_answers(web) for web in webs), 60, cluster)

    anywhere = make_pipeline(slug="anywhere")
    local = services.open_sandbox(anywhere, {**CHAT, "launcher_id": "1"}, bot).sandbox
    zoned = make_pipeline(slug="zoned", host_labels={"zone": "b"})
    remote = services.open_sandbox(zoned, {**CHAT, "launcher_id": "2"}, bot).sandbox
    assert local.host_id != second_host.pk and remote.host_id == second_host.pk
    token = PipelineToken.issue(anywhere, name="stream")[1]
    zoned_token = PipelineToken.issue(zoned, name="stream")[1]
    streams = [
        Stream(token, webs, [str(local.pk)]),
        Stream(zoned_token, list(reversed(webs)), [str(remote.pk)]),
    ]
    for stream in streams:
        stream.thread.start()
    _wait_for_commands(streams, cluster)
    _restart(cluster, "web", web1)
    _wait(lambda: _answers(webs[0]), 60, cluster)
    _wait_for_commands(streams, cluster)
    _restart(cluster, "web2", web2, **disks)
    _wait(lambda: _answers(webs[1]), 60, cluster)
    _wait_for_commands(streams, cluster)
    _restart(cluster, "worker-1", None, **disks)
    _wait_for_commands(streams, cluster)
    _restart(cluster, "worker-2", None, **disks)
    _wait_for_commands(streams, cluster)
    for stream in streams:
        stream.stopping.set()
    for stream in streams:
        stream.thread.join(60)

    for stream in streams:
        assert stream.refused == [], stream.refused
    assert sum(stream.retries for stream in streams) > 0, "no web process was ever down"
    for stream, sandbox in zip(streams, (local, remote), strict=True):
        numbers = stream.answered[str(sandbox.pk)]
        assert len(numbers) > 10
        sandbox.refresh_from_db()
        assert sandbox.state == State.RUNNING
        written = services.run_exec(
            sandbox, services.clean_request(sandbox, cmd="cat stream.txt"), bot
        ).stdout.split()
        # Every command the bot was told ran is in the file, once, in order.
        assert [int(n) for n in written] == numbers
    assert not Exec.objects.filter(state__in=[ExecState.RUNNING, ExecState.LOST]).exists()
    reconcile(grace_seconds=0)
    assert _orphans(get_runtime(), local.host_id) == []
    assert _orphans(second_engine.runtime, second_host.pk) == []
