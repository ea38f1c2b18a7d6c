"""A chat bot driving Boxyard through the Python client: a real server, the real Docker Engine.

The server is pytest-django's `live_server`; the sandboxes are busybox containers of the test
image, removed after each test by `docker_engine`.
"""

import asyncio
import hashlib
import uuid
from typing import Any

import pytest

from boxyard_client import (
    AsyncBoxyardClient,
    BadRequest,
    BoxyardClient,
    LeaseBusy,
    NotFound,
    StaleEpoch,
    TakenOver,
    Unauthorized,
)
from tests.api.conftest import Bot

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHAT_42 = {"launcher_type": "group", "launcher_id": "42", "sender_id": "7"}
CHAT_43 = {"launcher_type": "group", "launcher_id": "43", "sender_id": "7"}


@pytest.fixture
def server(live_server: Any, docker_engine: Any) -> str:
    return str(live_server.url)


def test_a_chat_keeps_its_sandbox_from_one_message_to_the_next(server: str, support: Bot) -> None:
    # Message 1 in chat group/42: the bot opens the chat's sandbox and runs a script in it.
    with BoxyardClient(server, support.token) as bot:
        box = bot.open("support", CHAT_42)
        assert box.created
        assert (box.scope_key, box.status, box.workdir) == ("group_42", "running", "/workspace")
        assert box.lease.holder == "group_42"

        written = bot.write_file(box.sandbox_id, "hello.sh", "echo hello $1\n")
        assert (written.path, written.size_bytes) == ("/workspace/hello.sh", 14)
        assert written.sha256 == hashlib.sha256(b"echo hello $1\n").hexdigest()
        result = bot.exec(box.sandbox_id, "sh hello.sh world")
        assert result.ok, result
        assert (result.stdout, result.stderr) == ("hello world\n", "")

        assert bot.exec_wait(box.sandbox_id, result.exec_id, timeout_seconds=1).done
        output = bot.exec_output(box.sandbox_id, result.exec_id)
        assert (output.done, output.exit_code, output.text()) == (True, 0, "hello world\n")
        assert bot.get_exec(box.sandbox_id, result.exec_id).stdout == "hello world\n"

        failed = bot.exec(box.sandbox_id, ["sh", "-c", "echo oops >&2; exit 3"])
        assert (failed.ok, failed.exit_code, failed.stderr) == (False, 3, "oops\n")

    # A later message: a new client, the same chat variables, the same sandbox and files.
    with BoxyardClient(server, support.token) as bot:
        again = bot.open("support", CHAT_42)
        assert (again.sandbox_id, again.created) == (box.sandbox_id, False)
        assert "/workspace/hello.sh" in bot.list_files(again.sandbox_id).paths
        assert bot.read_file(again.sandbox_id, "hello.sh").text == "echo hello $1\n"
        assert [s.sandbox_id for s in bot.list_sandboxes(scope_key="group_42")] == [box.sandbox_id]
        assert [s.name for s in bot.sessions(box.sandbox_id)] == ["default"]

        bot.write_file(box.sandbox_id, "data.bin", b"\x00\xffbin")
        assert bot.read_file(box.sandbox_id, "data.bin").data == b"\x00\xffbin"
        assert bot.delete_file(box.sandbox_id, "data.bin").ok
        assert "/workspace/data.bin" not in bot.list_files(box.sandbox_id).paths

        # Another chat gets a sandbox of its own.
        other = bot.open("support", CHAT_43)
        assert other.created
        assert other.sandbox_id != box.sandbox_id
        assert "/workspace/hello.sh" not in bot.list_files(other.sandbox_id).paths

        closed = bot.close(box.sandbox_id, delete_workspace=True)
        assert (closed.ok, closed.status) == (True, "destroyed")
        assert bot.get_sandbox(box.sandbox_id).status == "destroyed"


def test_refusals_arrive_as_typed_errors(server: str, support: Bot) -> None:
    with BoxyardClient(server, support.token) as bot:
        with pytest.raises(NotFound):
            bot.get_sandbox(str(uuid.uuid4()))
        with pytest.raises(NotFound):
            bot.exec("not-a-sandbox", "true")
        with pytest.raises(BadRequest) as missing:
            bot.open("support", {"launcher_type": "group"})
        assert missing.value.field == "variables.launcher_id"
        with pytest.raises(BadRequest) as bad_filter:
            bot.list_sandboxes(status="sleeping")
        assert bad_filter.value.field == "status"

        tools = bot.tools("support")
        assert tools.pipeline == "support"
        assert tools.system_prompt
        assert tools.openai
        with pytest.raises(NotFound):
            bot.tools("billing")

    with BoxyardClient(server, "not-a-token") as stranger, pytest.raises(Unauthorized):
        stranger.list_sandboxes()


def test_leases_fence_off_other_holders(server: str, support: Bot) -> None:
    with BoxyardClient(server, support.token) as bot, BoxyardClient(server, support.token) as peer:
        box = bot.open("support", CHAT_42)

        with pytest.raises(LeaseBusy) as busy:
            peer.open("support", CHAT_42, holder="worker-2")
        assert busy.value.holder == "group_42"
        assert busy.value.expires_at is not None

        renewed = bot.renew_lease(box.sandbox_id, epoch=box.lease.epoch)
        assert (renewed.holder, renewed.epoch) == ("group_42", box.lease.epoch)
        with pytest.raises(StaleEpoch):
            bot.exec(box.sandbox_id, "true", epoch=box.lease.epoch + 5)

        taken = peer.takeover_lease(box.sandbox_id, holder="admin-x", reason="debugging")
        assert taken.holder == "admin-x"
        assert taken.epoch > box.lease.epoch
        with pytest.raises(TakenOver) as taken_over:
            bot.exec(box.sandbox_id, "echo mine")
        assert taken_over.value.holder == "admin-x"
        assert peer.exec(box.sandbox_id, "echo admin", holder="admin-x").stdout == "admin\n"

        released = peer.release_lease(box.sandbox_id, holder="admin-x", epoch=taken.epoch)
        assert released.holder == ""
        assert bot.exec(box.sandbox_id, "echo mine again").stdout == "mine again\n"


def test_the_async_client_opens_and_runs(server: str, support: Bot) -> None:
    async def chat() -> tuple[str, str, bool]:
        async with AsyncBoxyardClient(server, support.token) as bot:
            box = await bot.open("support", CHAT_43)
            await bot.write_file(box.sandbox_id, "hello.sh", "echo hello $1\n")
            result = await bot.exec(box.sandbox_id, "sh hello.sh async")
            again = await bot.open("support", CHAT_43)
            await bot.close(box.sandbox_id, delete_workspace=True)
            return result.stdout, again.sandbox_id, again.created

    stdout, sandbox_id, created = asyncio.run(chat())
    assert stdout == "hello async\n"
    assert sandbox_id
    assert not created


def test_run_computes_once_in_a_fresh_sandbox(server: str, support: Bot) -> None:
    with BoxyardClient(server, support.token) as bot:
        result = bot.run("support", "sh", "echo $((6*7))")
        assert (result.ok, result.exit_code, result.stdout) == (True, 0, "42\n")
        assert bot.list_sandboxes() == []
