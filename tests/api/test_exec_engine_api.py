"""The exec engine through the HTTP API: sessions, background execs, the event stream,
fresh (one-shot) execs and managed processes, as a bot sees them."""

import asyncio
import json
import time
from typing import Any

import pytest
from django.test import AsyncClient

from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sandbox_id(support: Any, docker_engine: Any) -> str:
    opened = support.call("post", "/sandboxes/open", {"pipeline": "support", "variables": CHAT})
    assert opened.status_code == 200, opened.content
    return opened.json()["sandbox_id"]


def test_sessions_over_http(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    created = support.call(
        "post", f"{base}/sessions", {"name": "build", "cwd": "/tmp", "env": {"K": "v"}}
    )
    assert created.status_code == 200, created.content
    assert (created.json()["cwd"], created.json()["env"]["K"]) == ("/tmp", "v")
    ran = support.call(
        "post", f"{base}/exec", {"cmd": "cd /; export X=1; echo $K", "session": "build"}
    )
    assert ran.json()["stdout"] == "v\n"
    listed = {s["name"]: s for s in support.call("get", f"{base}/sessions").json()["sessions"]}
    assert listed["build"]["cwd"] == "/" and listed["build"]["env"]["X"] == "1"
    assert listed["default"]["cwd"] == "/workspace"
    again = support.call("post", f"{base}/sessions", {"name": "build"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    missing = support.call("post", f"{base}/exec", {"cmd": "true", "session": "nope"})
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    assert support.call("delete", f"{base}/sessions/default").status_code == 400
    deleted = support.call("delete", f"{base}/sessions/build")
    assert deleted.status_code == 200 and deleted.json() == {"ok": True, "deleted": "build"}
    assert support.call("delete", f"{base}/sessions/build").status_code == 404


def test_a_shell_ending_command_is_reported(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    support.call("post", f"{base}/exec", {"cmd": "cd /tmp"})
    ended = support.call("post", f"{base}/exec", {"cmd": "exit 7"}).json()
    assert (ended["exit_code"], ended["session_restarted"]) == (7, True)
    assert support.call("post", f"{base}/exec", {"cmd": "pwd"}).json()["stdout"] == "/tmp\n"


def test_background_exec_poll_wait_and_kill(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    started = support.call(
        "post", f"{base}/exec", {"cmd": "echo one; sleep 0.3; echo two", "background": True}
    )
    body = started.json()
    assert started.status_code == 200 and body["status"] == "running" and body["background"]
    exec_id = body["exec_id"]
    waited = support.call("post", f"{base}/execs/{exec_id}/wait", {"timeout_seconds": 10}).json()
    assert waited == {"done": True, "status": "completed", "exit_code": 0}
    output = support.call("get", f"{base}/execs/{exec_id}/output", since_seq=0).json()
    assert "".join(c["text"] for c in output["chunks"]) == "one\ntwo\n"
    assert [c["seq"] for c in output["chunks"]] == list(range(1, len(output["chunks"]) + 1))
    last = output["chunks"][-1]["seq"]
    assert (
        support.call("get", f"{base}/execs/{exec_id}/output", since_seq=last).json()["chunks"] == []
    )
    record = support.call("get", f"{base}/execs/{exec_id}").json()
    assert (record["status"], record["stdout"]) == ("completed", "one\ntwo\n")

    long = support.call("post", f"{base}/exec", {"cmd": "sleep 300", "background": True}).json()
    killed = support.call("post", f"{base}/execs/{long['exec_id']}/kill", {})
    assert killed.json() == {"ok": True, "status": "killed"}


def test_fresh_exec_runs_outside_the_session(support: Any, sandbox_id: str) -> None:
    base = f"/sandboxes/{sandbox_id}"
    support.call("post", f"{base}/exec", {"cmd": "cd /tmp; export IN_SESSION=1"})
    fresh = support.call(
        "post", f"{base}/exec", {"cmd": "pwd; echo [$IN_SESSION]; cd /", "fresh": True}
    )
    assert fresh.json()["stdout"] == "/workspace\n[]\n"
    assert support.call("post", f"{base}/exec", {"cmd": "pwd"}).json()["stdout"] == "/tmp\n"
    refused = support.call(
        "post", f"{base}/exec", {"cmd": "true", "fresh": True, "background": True}
    )
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "fresh"


def test_the_stream_delivers_chunks_live_then_the_exit(support: Any, sandbox_id: str) -> None:
    base = f"/api/v1/sandboxes/{sandbox_id}"
    started = support.call(
        "post",
        f"/sandboxes/{sandbox_id}/exec",
        {"cmd": "for i in 1 2 3; do echo tick$i; sleep 0.4; done", "background": True},
    ).json()

    async def follow() -> list[tuple[float, str, dict]]:
        response = await AsyncClient().get(
            f"{base}/execs/{started['exec_id']}/stream",
            headers={"Authorization": f"Bearer {support.token}"},
        )
        assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
        events, buffer = [], ""
        async for part in response.streaming_content:
            buffer += part.decode()
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                if block.startswith(":"):
                    continue
                kind = block.split("\n")[0].removeprefix("event: ")
                data = json.loads(block.split("\n")[1].removeprefix("data: "))
                events.append((time.monotonic(), kind, data))
        return events

    events = asyncio.run(follow())
    chunks = [data for _, kind, data in events if kind == "chunk"]
    assert "".join(chunk["text"] for chunk in chunks) == "tick1\ntick2\ntick3\n"
    assert [chunk["seq"] for chunk in chunks] == list(range(1, len(chunks) + 1))
    assert events[-1][1] == "exit" and events[-1][2]["exit_code"] == 0
    assert events[-1][0] - events[0][0] >= 0.6, "the chunks came all at once, not as produced"


def test_managed_process_over_http(support: Any, make_pipeline: Any, docker_engine: Any) -> None:
    pipeline = support.pipeline
    pipeline.processes = [{"name": "echo", "cmd": ["cat"]}]
    pipeline.full_clean()
    pipeline.save()
    sandbox_id = support.call(
        "post", "/sandboxes/open", {"pipeline": "support", "variables": CHAT}
    ).json()["sandbox_id"]
    base = f"/sandboxes/{sandbox_id}/processes"
    listed = support.call("get", base).json()["processes"]
    assert [(p["name"], p["state"], p["cmd"]) for p in listed] == [("echo", "running", ["cat"])]
    sent = support.call("post", f"{base}/echo/stdin", {"text": "ping\n"})
    assert sent.status_code == 200, sent.content
    read = support.call("get", f"{base}/echo/output", since_seq=0, wait_seconds=5).json()
    assert read["chunks"][0]["text"] == "ping\n" and read["running"]
    bad = support.call("post", f"{base}/echo/stdin", {"data_b64": "%%%"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "data_b64"
    assert support.call("get", f"{base}/nope/output").status_code == 404
    restarted = support.call("post", f"{base}/echo/restart", {}).json()
    assert restarted["generation"] == 2 and restarted["state"] == "running"
