"""Two real Docker hosts: the machine's engine and a second engine of the tests' own
(`tests/engines.py`: its own socket, data root and exec root, its images built or copied into
it), registered as a host and reached only through its row. A pipeline's labels send its
sandboxes there; the engine's process is killed and started again under them."""

import hashlib
import time
from typing import Any

import pytest
from django.test import Client

from boxyard.errors import HostUnavailable
from hosts import engines, keeper, services
from hosts.engines import get_runtime
from hosts.models import DockerHost
from pipelines.models import PipelineToken, Retention
from sandboxes.models import Sandbox, State
from sandboxes.services.reconciling import reconcile
from tests.conftest import wait_for
from tests.engines import SecondEngine, second_engine  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def second_host(second_engine: SecondEngine) -> Any:
    """The second engine as the host `second` (zone b); afterwards, running again, with none
    of the test's containers and volumes."""
    from boxyard.actors import Actor

    host = services.add_host(Actor("command", "tests"), "second", url=second_engine.url)
    services.edit_host(host, Actor("command", "tests"), labels={"zone": "b"})
    assert keeper.check(host)
    try:
        yield host
    finally:
        if not second_engine.running:
            second_engine.start()
        second_engine.clean()


def _bot(pipeline: Any) -> Client:
    _, token = PipelineToken.issue(pipeline, name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def _open(bot: Client, slug: str, chat: str) -> Any:
    return bot.post(
        "/api/v1/sandboxes/open",
        {"pipeline": slug, "variables": {"launcher_type": "group", "launcher_id": chat}},
        content_type="application/json",
    )


def _up_here(host: DockerHost) -> bool:
    """Whether this process takes the host for up (from the row as it last read it)."""
    try:
        engines.runtime_for(host.pk)
    except HostUnavailable:
        return False
    return True


def _exec(bot: Client, sandbox_id: str, command: str) -> Any:
    return bot.post(
        f"/api/v1/sandboxes/{sandbox_id}/exec",
        {"cmd": command},
        content_type="application/json",
    )


def test_a_pipelines_labels_place_its_sandboxes_on_the_host_that_has_them(
    make_pipeline, second_engine, second_host, docker_engine, settings
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    zoned = make_pipeline(slug="zoned", host_labels={"zone": "b"})
    anywhere = make_pipeline(slug="anywhere")
    DockerHost.objects.filter(pk=second_host.pk).update(max_sandboxes=1)

    opened = _open(_bot(zoned), "zoned", "1")
    assert opened.status_code == 200, opened.content
    sandbox = Sandbox.objects.get(pk=opened.json()["sandbox_id"])
    assert sandbox.host == second_host
    # Its container is on the second engine, not on the machine's.
    on_second = second_engine.runtime.inspect_container(sandbox.container_id)
    assert on_second is not None and on_second.running
    assert get_runtime().inspect_container(sandbox.container_id) is None
    ran = _exec(_bot(zoned), str(sandbox.pk), "echo from the second host")
    assert ran.status_code == 200 and ran.json()["stdout"] == "from the second host\n"

    # The second host is full (1 of 1): a zoned sandbox has nowhere to go; others do.
    refused = _open(_bot(zoned), "zoned", "2")
    assert refused.status_code == 503, refused.content
    assert refused.json()["error"]["code"] == "no_room"
    assert "second: full (1 of 1 sandboxes)" in refused.json()["error"]["message"]
    assert "local: lacks the labels zone=b" in refused.json()["error"]["message"]
    assert int(refused["Retry-After"]) > 0
    elsewhere = _open(_bot(anywhere), "anywhere", "3")
    assert elsewhere.status_code == 200, elsewhere.content
    assert Sandbox.objects.get(pk=elsewhere.json()["sandbox_id"]).host.is_default


def test_a_host_killed_answers_503_at_once_and_comes_back_with_nothing_lost(
    make_pipeline, second_engine, second_host, docker_engine, settings
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    zoned = make_pipeline(slug="zoned", host_labels={"zone": "b"}, retention=Retention.PERSISTENT)
    bot = _bot(zoned)
    sandbox_id = _open(bot, "zoned", "1").json()["sandbox_id"]
    wrote = _exec(bot, sandbox_id, "head -c 100000 /dev/urandom > data.bin; sha256sum data.bin")
    assert wrote.status_code == 200, wrote.content
    digest = wrote.json()["stdout"].split()[0]

    second_engine.kill()
    killed = time.monotonic()
    while DockerHost.objects.get(pk=second_host.pk).down_since is None:
        keeper.check(DockerHost.objects.get(pk=second_host.pk))
        assert time.monotonic() - killed < 10, "the host was not marked down within 10 s"
        time.sleep(keeper.CHECK_SECONDS)
    # Every process reads the host's row again within REFRESH_SECONDS: this one sees it down.
    wait_for(lambda: not _up_here(second_host), engines.REFRESH_SECONDS + 2)

    asked = time.monotonic()
    refused = _exec(bot, sandbox_id, "cat data.bin")
    assert time.monotonic() - asked < 2, "a sandbox of a host that is down made its caller wait"
    assert refused.status_code == 503, refused.content
    assert refused.json()["error"]["code"] == "host_unavailable"
    assert "second" in refused.json()["error"]["message"]
    assert int(refused["Retry-After"]) > 0
    # New keys of a pipeline that may go anywhere go elsewhere meanwhile.
    anywhere = make_pipeline(slug="anywhere")
    elsewhere = _open(_bot(anywhere), "anywhere", "2")
    assert elsewhere.status_code == 200, elsewhere.content

    second_engine.start()
    assert keeper.check(DockerHost.objects.get(pk=second_host.pk))
    assert DockerHost.objects.get(pk=second_host.pk).down_since is None
    reconcile(grace_seconds=0, host=second_host.pk)
    wait_for(lambda: _up_here(second_host), engines.REFRESH_SECONDS + 2)
    reopened = _open(bot, "zoned", "1")
    assert reopened.status_code == 200, reopened.content
    assert reopened.json()["sandbox_id"] == sandbox_id
    assert Sandbox.objects.get(pk=sandbox_id).state == State.RUNNING
    read = _exec(bot, sandbox_id, "sha256sum data.bin")
    assert read.status_code == 200, read.content
    assert read.json()["stdout"].split()[0] == digest
    actions = list(second_host.events.order_by("created_at").values_list("action", flat=True))
    assert actions[-2:] == ["host.down", "host.up"], actions
    assert hashlib.sha256(b"").hexdigest() != digest  # the file was not empty
