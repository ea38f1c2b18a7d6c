"""LangBot's own E2B back end (`E2BSandboxBackend`, from LangBot's box runtime), unchanged,
against a served Boxyard, with nothing set but the three settings the README gives:
`E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_API_KEY`. A session starts, runs commands in
LangBot's workspace (`/home/user/workspace`, the sandbox's persistent `/workspace`), keeps its
files between commands, carries the host folder LangBot shares with it there and back, and
stops."""

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from langbot_plugin.box.e2b_backend import E2BSandboxBackend
from langbot_plugin.box.errors import BoxError
from langbot_plugin.box.models import BoxExecutionStatus, BoxSessionInfo, BoxSpec

from sandboxes.models import Sandbox, State
from tests.e2b.conftest import Bot
from tests.servers import Server

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def langbot(server: Server, support: Bot, monkeypatch: pytest.MonkeyPatch) -> E2BSandboxBackend:
    """LangBot's back end as LangBot makes it: `configure` with its config.yaml's (empty)
    `box.e2b` section, then `initialize`, which reads the settings from the environment."""
    monkeypatch.setenv("E2B_API_URL", f"{server.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", support.key)
    backend = E2BSandboxBackend(logging.getLogger("langbot.box"))
    backend.configure({"api_key": "", "api_url": "", "template": ""})
    asyncio.run(backend.initialize())
    return backend


def _spec(session: str, cmd: str = "", **more: Any) -> BoxSpec:
    return BoxSpec(session_id=session, cmd=cmd, timeout_sec=30, **more)


def test_a_langbot_session_runs_keeps_its_files_and_stops(
    langbot: E2BSandboxBackend, support: Bot
) -> None:
    async def go() -> tuple[BoxSessionInfo, list[Any], bool, bool]:
        assert await langbot.is_available()
        session = await langbot.start_session(_spec("chat-1"))
        ran = [
            await langbot.exec(session, _spec("chat-1", "pwd && echo kept > note.txt")),
            await langbot.exec(session, _spec("chat-1", "cat note.txt; ls /workspace")),
        ]
        # A command that fails is LangBot's BoxError, with the SDK's words for it.
        with pytest.raises(BoxError, match=r"exited with code 3 and error:\n?oops"):
            await langbot.exec(session, _spec("chat-1", "echo oops >&2; exit 3"))
        alive = await langbot.is_session_alive(session)
        await langbot.stop_session(session)
        return session, ran, alive, await langbot.is_session_alive(session)

    session, (first, second), alive, alive_after = asyncio.run(go())

    sandbox = Sandbox.objects.get(pk=session.backend_session_id)
    assert sandbox.pipeline == support.pipeline
    assert first.status == BoxExecutionStatus.COMPLETED and first.exit_code == 0
    assert first.stdout == "/home/user/workspace\n"
    # The second command is a new one, in the same sandbox: the file stayed, in the workspace.
    assert second.stdout.splitlines()[0] == "kept"
    # LangBot's /workspace is its /home/user/workspace: the workspace's own folder.
    assert "note.txt" in second.stdout.splitlines()[1:]
    assert alive and not alive_after
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.DESTROYED


def test_a_langbot_host_folder_goes_in_and_comes_back(
    langbot: E2BSandboxBackend, tmp_path: Path
) -> None:
    """LangBot shares a folder of its host with the session (`host_path`): its files are
    written into the sandbox before a command, and what the command made is read back."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "in.txt").write_text("from the host\n")
    spec = {"host_path": str(shared)}

    async def go() -> Any:
        session = await langbot.start_session(_spec("chat-2", **spec))
        try:
            return await langbot.exec(
                session, _spec("chat-2", "cat in.txt && echo made here > out.txt", **spec)
            )
        finally:
            await langbot.stop_session(session)

    ran = asyncio.run(go())

    assert (ran.exit_code, ran.stdout) == (0, "from the host\n"), ran
    assert (shared / "out.txt").read_text() == "made here\n"
