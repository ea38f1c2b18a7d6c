"""AstrBot's Bay client (`shipyard_neo_sdk`, unchanged) against a served Boxyard on the real
engine: a sandbox created and ready, shell and Python, files both ways, stop and start again,
its lifetime, delete; and the same sandboxes, leases and events the bot API sees."""

import base64
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone
from shipyard_neo import BayClient
from shipyard_neo.errors import (
    CapabilityNotSupportedError,
    CargoFileNotFoundError,
    NotFoundError,
    ValidationError,
)
from shipyard_neo.sandbox import Sandbox as BaySandbox

from sandboxes.models import Event, Exec, Sandbox, State
from tests.bay.conftest import Bay

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


async def ready(client: BayClient, **create: Any) -> BaySandbox:
    """A sandbox created and polled until ready, as AstrBot's booter does."""
    sandbox = await client.create_sandbox(**create)
    for _ in range(300):
        await sandbox.refresh()
        if sandbox.status.value == "ready":
            return sandbox
        assert sandbox.status.value == "starting", sandbox.status
    raise AssertionError(f"{sandbox.id} never became ready")


def test_a_sandbox_runs_commands_and_python_and_keeps_files(support: Bay) -> None:
    async def work(client: BayClient) -> dict[str, Any]:
        sandbox = await ready(client, ttl=600)
        seen: dict[str, Any] = {"id": sandbox.id, "capabilities": sandbox.capabilities}
        seen["shell"] = await sandbox.shell.exec("echo hello; echo oops >&2; pwd")
        seen["failed"] = await sandbox.shell.exec("exit 3")
        await sandbox.filesystem.write_file("notes/today.txt", "first line\nsecond\n")
        seen["cwd"] = await sandbox.shell.exec("cat today.txt", cwd="notes")
        seen["python"] = await sandbox.python.exec(
            "import os\nprint(sum(range(10)), os.getcwd())", include_code=True
        )
        seen["raised"] = await sandbox.python.exec("raise ValueError('bad value')")
        await sandbox.python.exec("x = 41")
        seen["kept"] = await sandbox.python.exec("x + 1")
        seen["chart"] = await sandbox.python.exec(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('drawn')"
        )
        seen["slow"] = await sandbox.python.exec("import time\ntime.sleep(30)", timeout=1)
        seen["after"] = await sandbox.python.exec("print(x)")
        seen["read"] = await sandbox.filesystem.read_file("notes/today.txt")
        seen["listed"] = await sandbox.filesystem.list_dir("notes")
        payload = bytes(range(256)) * 64
        await sandbox.filesystem.upload("bin/blob.dat", payload)
        seen["downloaded"] = await sandbox.filesystem.download("bin/blob.dat") == payload
        await sandbox.filesystem.delete("notes")
        with pytest.raises(CargoFileNotFoundError):
            await sandbox.filesystem.read_file("notes/today.txt")
        seen["root"] = [entry.name for entry in await sandbox.filesystem.list_dir()]
        return seen

    seen = support.run(work)
    assert seen["capabilities"] == ["python", "shell", "filesystem"]
    shell = seen["shell"]
    assert (shell.success, shell.exit_code) == (True, 0)
    assert shell.output == "hello\n/workspace\n" and shell.error == "oops\n"
    assert (seen["failed"].success, seen["failed"].exit_code) == (False, 3)
    assert seen["cwd"].output == "first line\nsecond\n"
    python = seen["python"]
    assert python.success and python.output == "45 /workspace" and python.code is not None
    assert python.data["output"] == {"text": "45 /workspace", "images": []}
    raised = seen["raised"]
    assert not raised.success and "ValueError: bad value" in (raised.error or "")
    # One kernel per sandbox, as Bay's: state stays between calls, and each is counted.
    kept = seen["kept"]
    assert kept.success and kept.output == "42" and kept.error is None
    assert kept.data["execution_count"] > python.data["execution_count"]
    chart = seen["chart"]
    assert chart.success and chart.output == "drawn" and chart.code is None
    [image] = chart.data["output"]["images"]
    assert base64.b64decode(image["image/png"]).startswith(b"\x89PNG")
    slow = seen["slow"]
    assert not slow.success and slow.error == "Code execution timed out after 1 seconds"
    assert seen["after"].output == "41"  # interrupted at its timeout, the state stays
    assert seen["read"] == "first line\nsecond\n"
    [entry] = seen["listed"]
    assert (entry.name, entry.path, entry.is_dir, entry.size) == (
        "today.txt",
        "notes/today.txt",
        False,
        len("first line\nsecond\n"),
    )
    assert seen["downloaded"]
    assert seen["root"] == ["bin"]
    # The same sandbox as every door sees it: its commands recorded, its events written.
    sandbox = Sandbox.objects.get(pk=seen["id"])
    assert sandbox.pipeline == support.pipeline and sandbox.scope_key.startswith("own-")
    assert Exec.objects.filter(sandbox=sandbox).count() == 10
    actions = set(Event.objects.filter(sandbox=sandbox).values_list("action", flat=True))
    assert {"sandbox.created", "sandbox.lifetime_set", "file.written", "file.deleted"} <= actions


def test_stop_keeps_the_workspace_and_the_next_call_starts_the_sandbox(support: Bay) -> None:
    async def work(client: BayClient) -> tuple[str, str, str]:
        sandbox = await ready(client)
        await sandbox.filesystem.write_file("kept.txt", "still here")
        await sandbox.stop()
        await sandbox.refresh()
        stopped = sandbox.status.value
        await sandbox.keepalive()  # starts nothing
        await sandbox.refresh()
        still = sandbox.status.value
        ran = await sandbox.shell.exec("cat kept.txt")
        return stopped, still, ran.output

    assert support.run(work) == ("idle", "idle", "still here")


def test_ttl_within_the_pipelines_ceiling_extend_and_keepalive(support: Bay) -> None:
    ceiling = support.pipeline.ttl_seconds

    async def work(client: BayClient) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with pytest.raises(ValidationError) as refused:
            await client.create_sandbox(ttl=ceiling + 1)
        seen["refused"] = refused.value
        sandbox = await ready(client, ttl=300)
        seen["expires"] = sandbox.expires_at
        await sandbox.extend_ttl(120)
        seen["extended"] = sandbox.expires_at
        with pytest.raises(ValidationError) as past:
            await sandbox.extend_ttl(ceiling)
        seen["past"] = past.value
        seen["id"] = sandbox.id
        return seen

    async def keep_alive(client: BayClient) -> None:
        await (await client.get_sandbox(seen["id"])).keepalive()

    seen = support.run(work)
    before = Sandbox.objects.get(pk=seen["id"]).idle_deadline
    support.run(keep_alive)
    assert Sandbox.objects.get(pk=seen["id"]).idle_deadline > before
    assert seen["refused"].details["field"] == "ttl" and "ttl_seconds" in seen["refused"].message
    assert Sandbox.objects.filter(pipeline=support.pipeline).count() == 1  # the refused made none
    now = timezone.now()
    assert now + timedelta(seconds=250) < seen["expires"] <= now + timedelta(seconds=300)
    assert seen["extended"] - seen["expires"] >= timedelta(seconds=119)
    assert seen["past"].details["field"] == "extend_by"


def test_delete_destroys_the_sandbox(support: Bay) -> None:
    async def work(client: BayClient) -> str:
        sandbox = await ready(client)
        await sandbox.delete()
        with pytest.raises(NotFoundError):
            await client.get_sandbox(sandbox.id)
        return sandbox.id

    deleted = Sandbox.objects.get(pk=support.run(work))
    assert deleted.state == State.DESTROYED and deleted.container_id == ""


def test_a_cargo_names_an_existing_workspace(support: Bay) -> None:
    async def work(client: BayClient) -> tuple[str, str, str, str]:
        first = await ready(client)
        await first.filesystem.write_file("shared.txt", "from the first")
        again = await ready(client, cargo_id=first.cargo_id)
        with pytest.raises(NotFoundError):
            await client.create_sandbox(cargo_id="no-such-cargo")
        return first.id, again.id, first.cargo_id, await again.filesystem.read_file("shared.txt")

    first, again, cargo, text = support.run(work)
    assert (again, text) == (first, "from the first")
    assert Sandbox.objects.filter(pipeline=support.pipeline, scope_key=cargo).count() == 1


def test_profiles_list_and_the_missing_browser(support: Bay) -> None:
    async def work(client: BayClient) -> dict[str, Any]:
        sandbox = await ready(client)
        with pytest.raises(CapabilityNotSupportedError) as missing:
            await sandbox.browser.exec("open https://example.com")
        return {
            "profiles": (await client.list_profiles()).items,
            "listed": (await client.list_sandboxes(status="ready")).items,
            "idle": (await client.list_sandboxes(status="idle")).items,
            "id": sandbox.id,
            "missing": missing.value,
        }

    seen = support.run(work)
    [profile] = seen["profiles"]
    assert profile.id == "python-default" and "browser" not in profile.capabilities
    assert profile.image == support.pipeline.image
    assert [item.id for item in seen["listed"]] == [seen["id"]] and seen["idle"] == []
    assert "browser" in seen["missing"].message


def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(support: Bay) -> None:
    headers = {"Authorization": f"Bearer {support.token}"}
    with httpx.Client(base_url=support.endpoint, headers=headers, timeout=60) as http:
        cases = [
            ("/v1/sandboxes", {"profile": "gpu-large"}, "profile"),
            ("/v1/sandboxes", {"ttl": -1}, "ttl"),
            ("/v1/sandboxes", {"ttl": "soon"}, "ttl"),
            ("/v1/sandboxes", {"cargo": "x"}, "cargo"),
        ]
        for path, body, field in cases:
            answer = http.post(path, json=body)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["code"] == "validation_error" and error["details"]["field"] == field
        assert not Sandbox.objects.filter(pipeline=support.pipeline).exists()
        created = http.post("/v1/sandboxes", json={}).json()
        exec_path = f"/v1/sandboxes/{created['id']}/shell/exec"
        for body, field in [({"command": "true", "timeout": 0}, "timeout"), ({}, "command")]:
            answer = http.post(exec_path, json=body)
            assert answer.status_code == 400 and answer.json()["error"]["details"]["field"] == field
        outside = http.get(f"/v1/sandboxes/{created['id']}/filesystem/files?path=../etc/passwd")
        assert outside.status_code == 400 and outside.json()["error"]["code"] == "invalid_path"
    assert not Exec.objects.filter(sandbox_id=created["id"]).exists()


def test_created_at_is_a_time(support: Bay) -> None:
    async def work(client: BayClient) -> datetime:
        return (await ready(client)).created_at

    assert abs(timezone.now() - support.run(work)) < timedelta(minutes=5)
