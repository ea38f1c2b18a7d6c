"""A kernel is contained like every command: a fork bomb and a memory bomb end in the
sandbox's limits, a kill interrupts the run (not the sandbox), a reset ends the kernels."""

import threading
from typing import Any

import pytest

from sandboxes.models import Exec
from tests.code.conftest import Coder
from tests.conftest import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


def _still_serves(coder: Coder, sandbox: str) -> None:
    answer = coder.call("post", f"/sandboxes/{sandbox}/exec", json={"cmd": "echo alive"})
    assert answer.status_code == 200 and answer.json()["stdout"] == "alive\n", answer.text


def test_a_fork_bomb_in_a_kernel_ends_at_its_timeout_and_the_sandbox_serves(coder: Coder) -> None:
    sandbox = coder.open()
    bomb = coder.run(sandbox, "import os\nwhile True:\n    os.fork()", timeout_seconds=3)
    assert bomb["ok"] is False and bomb["status"] in ("timed_out", "completed")
    _still_serves(coder, sandbox)
    after = coder.run(sandbox, "21 * 2")
    assert after["text"] == "42", after
    left = coder.call("post", f"/sandboxes/{sandbox}/exec", json={"cmd": "ps -e | wc -l"})
    assert int(left.json()["stdout"]) < 20, "the bomb's processes were ended"


def test_a_memory_bomb_kills_the_kernel_not_the_sandbox(coder: Coder) -> None:
    sandbox = coder.open()
    coder.run(sandbox, "before = 1")
    bomb = coder.run(
        sandbox,
        "def bomb():\n    chunks = []\n    while True:\n"
        "        chunks.append(bytearray(64 * 1024 * 1024))\nbomb()",
    )
    assert bomb["ok"] is False
    assert bomb["error"]["name"] in ("MemoryError", "ContextDied", "KernelDied"), bomb["error"]
    _still_serves(coder, sandbox)
    again = coder.run(sandbox, "'before' in globals()")
    assert again["ok"] is True, repr(
        (bomb["error"], bomb["status"], again["results"])
    )  # the kernel (a new one, if it was killed) answers
    assert again["text"] == ("False" if bomb["error"]["name"] != "MemoryError" else "True")


def test_a_kill_interrupts_the_run_and_the_state_stays(coder: Coder) -> None:
    sandbox = coder.open()
    coder.run(sandbox, "kept = 'yes'")
    ran: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: ran.update(coder.run(sandbox, "import time\ntime.sleep(600)"))
    )
    thread.start()
    busy: list[str] = []

    def running() -> bool:
        listed = coder.call("get", f"/sandboxes/{sandbox}/code/contexts").json()["contexts"]
        busy.extend(c["exec_id"] for c in listed if c["exec_id"])
        return bool(busy)

    wait_for(running, 60)
    killed = coder.call("post", f"/sandboxes/{sandbox}/execs/{busy[0]}/kill", json={})
    assert killed.status_code == 200, killed.text
    thread.join(30)
    assert ran["status"] == "killed" and ran["error"]["name"] == "KeyboardInterrupt", ran
    assert coder.run(sandbox, "kept")["text"] == "'yes'"


def test_a_reset_ends_the_kernels(coder: Coder) -> None:
    sandbox = coder.open()
    coder.run(sandbox, "lost = 1")
    reset = coder.call("post", f"/sandboxes/{sandbox}/reset", json={})
    assert reset.status_code == 200, reset.text
    after = coder.run(sandbox, "lost")
    assert after["error"]["name"] == "NameError"
    assert after["results"][0]["type"] == "restarted"


def test_a_run_killed_while_it_waits_its_turn_never_runs(coder: Coder) -> None:
    sandbox = coder.open()
    coder.run(sandbox, "ran = []")
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    threading.Thread(
        target=lambda: first.update(coder.run(sandbox, "import time\ntime.sleep(600)"))
    ).start()
    waiting = threading.Thread(target=lambda: second.update(coder.run(sandbox, "ran.append(1)")))
    waiting.start()
    queued: list[Exec] = []

    def both_recorded() -> bool:
        rows = list(Exec.objects.filter(sandbox_id=sandbox, state="running", language="python"))
        queued[:] = [row for row in rows if row.command == "ran.append(1)"]
        return len(rows) == 2 and bool(queued)

    wait_for(both_recorded, 60)
    killed = coder.call("post", f"/sandboxes/{sandbox}/execs/{queued[0].pk}/kill", json={})
    assert killed.status_code == 200, killed.text
    waiting.join(30)
    assert second["status"] == "killed", second
    busy = coder.call("get", f"/sandboxes/{sandbox}/code/contexts").json()["contexts"][0]
    coder.call("post", f"/sandboxes/{sandbox}/execs/{busy['exec_id']}/kill", json={})
    assert coder.run(sandbox, "ran")["text"] == "[]"
