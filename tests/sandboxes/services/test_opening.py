"""Opening sandboxes against the real engine: scope sharing, idempotency, quotas, restarts."""

import threading
import time
from typing import Any

import pytest
from django.db import connection

from boxyard.errors import InvalidInput, NotFound, QuotaExceeded
from hosts.engines import get_runtime
from sandboxes import services
from sandboxes.models import Event, Sandbox, State
from sandboxes.runtime import LABEL_GENERATION, LABEL_MANAGED, LABEL_PIPELINE, LABEL_SANDBOX, agent
from tests.conftest import CHAT, DEPLOYMENT

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def test_opening_readies_the_agent_for_the_first_command(pipeline, bot, docker_engine) -> None:
    """The channel to a new sandbox's agent is opened in the background while the bot thinks
    about its first command, which then costs what any later one does."""
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    deadline = time.monotonic() + 10
    while not agent.is_open(sandbox.container_id) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert agent.is_open(sandbox.container_id)
    request = services.clean_request(sandbox, cmd="echo ready")
    assert services.run_exec(sandbox, request, bot).stdout == "ready\n"


def test_open_creates_a_labelled_running_container(pipeline, bot, docker_engine) -> None:
    opened = services.open_sandbox(pipeline, CHAT, bot)
    sandbox = opened.sandbox
    assert opened.created and sandbox.state == State.RUNNING
    assert sandbox.scope_key == "group_123456"
    info = docker_engine.inspect_container(sandbox.container_id)
    assert info.running
    assert info.labels[LABEL_MANAGED] == "1"
    assert info.labels[LABEL_SANDBOX] == str(sandbox.id)
    assert info.labels[LABEL_PIPELINE] == pipeline.slug
    assert info.labels[LABEL_GENERATION] == "1"
    assert info.labels["io.boxyard.deployment"] == DEPLOYMENT
    assert Event.objects.filter(sandbox=sandbox, action="sandbox.started").exists()


def test_reopening_the_same_key_gives_the_same_sandbox(pipeline, bot, docker_engine) -> None:
    first = services.open_sandbox(pipeline, CHAT, bot)
    again = services.open_sandbox(pipeline, {**CHAT, "sender_id": "someone-else"}, bot)
    assert again.sandbox.pk == first.sandbox.pk and not again.created
    assert again.sandbox.container_id == first.sandbox.container_id


def test_missing_variable_creates_nothing(pipeline, bot, docker_engine) -> None:
    with pytest.raises(InvalidInput, match="launcher_id"):
        services.open_sandbox(pipeline, {"launcher_type": "group"}, bot)
    assert not Sandbox.objects.exists()


# Seed 000 §3: the eight target scenarios, each as (template, same-box pairs, different-box pairs).
ALICE_PM = {
    "launcher_type": "person",
    "launcher_id": "alice",
    "sender_id": "alice",
    "conversation_id": "c1",
    "query_id": "1",
}
ALICE_PM_LATER = {**ALICE_PM, "conversation_id": "c2", "query_id": "2"}
BOB_PM = {
    "launcher_type": "person",
    "launcher_id": "bob",
    "sender_id": "bob",
    "conversation_id": "c3",
    "query_id": "3",
}
GROUP_ALICE = {
    "launcher_type": "group",
    "launcher_id": "g1",
    "sender_id": "alice",
    "conversation_id": "c4",
    "query_id": "4",
}
GROUP_BOB = {
    "launcher_type": "group",
    "launcher_id": "g1",
    "sender_id": "bob",
    "conversation_id": "c4",
    "query_id": "5",
}
GROUP2_ALICE = {
    "launcher_type": "group",
    "launcher_id": "g2",
    "sender_id": "alice",
    "conversation_id": "c5",
    "query_id": "6",
}
SCENARIOS = [
    (
        "1 personal assistant",
        "{launcher_type}_{launcher_id}",
        [(ALICE_PM, ALICE_PM_LATER)],
        [(ALICE_PM, BOB_PM)],
    ),
    (
        "2 customer service",
        "{launcher_type}_{launcher_id}",
        [(BOB_PM, {**BOB_PM, "query_id": "9"})],
        [(BOB_PM, ALICE_PM)],
    ),
    (
        "3 employee tool",
        "{launcher_type}_{launcher_id}",
        [(ALICE_PM_LATER, ALICE_PM)],
        [(ALICE_PM, GROUP_ALICE)],
    ),
    (
        "4 group shared",
        "{launcher_type}_{launcher_id}",
        [(GROUP_ALICE, GROUP_BOB)],
        [(GROUP_ALICE, GROUP2_ALICE)],
    ),
    (
        "5 group per user",
        "{launcher_type}_{launcher_id}_{sender_id}",
        [(GROUP_ALICE, {**GROUP_ALICE, "query_id": "7"})],
        [(GROUP_ALICE, GROUP_BOB)],
    ),
    (
        "6 teaching across chats",
        "{sender_id}",
        [(GROUP_ALICE, GROUP2_ALICE), (GROUP_ALICE, ALICE_PM)],
        [(GROUP_ALICE, GROUP_BOB)],
    ),
    (
        "7 one-off per message",
        "{query_id}",
        [(GROUP_ALICE, {**GROUP_BOB, "query_id": "4"})],
        [(GROUP_ALICE, GROUP_BOB)],
    ),
    (
        "8 multi-project",
        "{launcher_type}_{launcher_id}_{conversation_id}",
        [(ALICE_PM, {**ALICE_PM, "query_id": "8"})],
        [(ALICE_PM, ALICE_PM_LATER)],
    ),
]


@pytest.mark.parametrize(
    ("name", "template", "same", "different"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_seed_000_scenarios(
    name, template, same, different, make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(scope_template=template)
    for left, right in same:
        assert _open(pipeline, left, bot) == _open(pipeline, right, bot), (name, left, right)
    for left, right in different:
        assert _open(pipeline, left, bot) != _open(pipeline, right, bot), (name, left, right)


def _open(pipeline: Any, variables: dict, bot: Any) -> Any:
    return services.open_sandbox(pipeline, variables, bot).sandbox.pk


@pytest.mark.django_db(transaction=True)
def test_twenty_parallel_opens_give_one_sandbox_and_one_container(
    pipeline, bot, docker_engine
) -> None:
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(20)

    def open_one() -> None:
        try:
            barrier.wait()
            results.append(services.open_sandbox(pipeline, CHAT, bot).sandbox)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=open_one) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len({sandbox.pk for sandbox in results}) == 1
    assert Sandbox.objects.count() == 1
    containers = get_runtime().list_containers({"io.boxyard.deployment": DEPLOYMENT})
    assert len(containers) == 1 and containers[0].running
    assert {sandbox.container_id for sandbox in results} == {containers[0].id}


def test_quota_of_live_sandboxes_per_pipeline(make_pipeline, bot, docker_engine) -> None:
    pipeline = make_pipeline(max_live_sandboxes=2)
    services.open_sandbox(pipeline, {**CHAT, "launcher_id": "1"}, bot)
    services.open_sandbox(pipeline, {**CHAT, "launcher_id": "2"}, bot)
    with pytest.raises(QuotaExceeded) as caught:
        services.open_sandbox(pipeline, {**CHAT, "launcher_id": "3"}, bot)
    assert caught.value.status == 429 and "max_live_sandboxes=2" in caught.value.message
    # An existing key still opens: the quota limits new sandboxes only.
    services.open_sandbox(pipeline, {**CHAT, "launcher_id": "1"}, bot)
    assert Sandbox.objects.count() == 2


def test_container_names_are_valid_and_distinct_for_similar_keys(
    make_pipeline, bot, docker_engine
) -> None:
    pipeline = make_pipeline(scope_template="{launcher_id}")
    a = services.open_sandbox(pipeline, {"launcher_id": "a/b c"}, bot).sandbox
    b = services.open_sandbox(pipeline, {"launcher_id": "a_b_c"}, bot).sandbox
    c = services.open_sandbox(pipeline, {"launcher_id": "群/../x" * 20}, bot).sandbox
    names = {a.container_name, b.container_name, c.container_name}
    assert len(names) == 3
    for name in names:
        assert docker_engine.inspect_container(name).running


def test_closed_sandbox_with_kept_workspace_reopens_with_its_files(
    pipeline, bot, docker_engine
) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.write_file(sandbox, "notes.txt", b"remember me", bot)
    closed = services.close_sandbox(sandbox, bot, delete_workspace=False)
    assert closed.state == State.STOPPED and closed.stop_reason == "closed"
    assert docker_engine.inspect_container(sandbox.container_id) is None

    reopened = services.open_sandbox(pipeline, CHAT, bot).sandbox
    assert reopened.pk == sandbox.pk and reopened.generation == 2
    assert reopened.state == State.RUNNING and reopened.container_id != sandbox.container_id
    assert services.read_file(reopened, "notes.txt").data == b"remember me"


def test_close_deleting_the_workspace_destroys_it(pipeline, bot, docker_engine) -> None:
    sandbox = services.open_sandbox(pipeline, CHAT, bot).sandbox
    services.write_file(sandbox, "notes.txt", b"gone soon", bot)
    closed = services.close_sandbox(sandbox, bot, delete_workspace=True)
    assert closed.state == State.DESTROYED
    assert sandbox.volume_name not in docker_engine.list_volumes(
        {"io.boxyard.deployment": DEPLOYMENT}
    )
    fresh = services.open_sandbox(pipeline, CHAT, bot)
    assert fresh.created and fresh.sandbox.pk != sandbox.pk
    with pytest.raises(NotFound, match="does not exist"):
        services.read_file(fresh.sandbox, "notes.txt")


def test_unavailable_image_puts_the_sandbox_in_error_with_the_reason(
    make_pipeline, bot, settings, docker_engine
) -> None:
    from boxyard.errors import RuntimeFailure

    settings.BOXYARD_IMAGE_ALLOWLIST = ["boxyard/*"]
    pipeline = make_pipeline(image="boxyard/does-not-exist:1")
    with pytest.raises(RuntimeFailure, match="does-not-exist"):
        services.open_sandbox(pipeline, CHAT, bot)
    sandbox = Sandbox.objects.get()
    assert sandbox.state == State.ERROR and "does-not-exist" in sandbox.status_detail
    assert not docker_engine.list_containers({"io.boxyard.deployment": DEPLOYMENT})
