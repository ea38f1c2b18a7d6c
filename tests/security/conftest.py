"""What every containment test needs: a sandbox to attack, a neighbour that must not notice,
and eyes inside (`ps`, as root, outside the agent) and outside (the engine's counters)."""

import time
from dataclasses import dataclass
from typing import Any

import pytest

from sandboxes import services
from sandboxes.models import Exec, Sandbox
from sandboxes.runtime import ROOT
from tests.conftest import CHAT, wait_for

NEIGHBOUR_CHAT = {"launcher_type": "group", "launcher_id": "neighbour", "sender_id": "1"}


@dataclass(frozen=True)
class Proc:
    pid: int
    user: str
    args: str


def run(sandbox: Sandbox, actor: Any, cmd: Any, **kwargs: Any) -> Exec:
    holder = kwargs.pop("holder", None)
    epoch = kwargs.pop("epoch", None)
    request = services.clean_request(sandbox, cmd=cmd, **kwargs)
    return services.run_exec(sandbox, request, actor, holder=holder, epoch=epoch)


def processes(engine: Any, sandbox: Sandbox) -> list[Proc]:
    """The sandbox user's processes, seen by a `ps` of root's that is not one of them."""
    # procps wants -e for every process; busybox's ps shows them all and knows no -e.
    listing = "ps -eo pid,user,args 2>/dev/null || ps -o pid,user,args"
    result = engine.exec(sandbox.container_id, ["sh", "-c", listing], user=ROOT)
    found = []
    for line in result.stdout.decode(errors="replace").splitlines()[1:]:
        pid, user, args = [*line.split(None, 2), "", ""][:3]
        if user in ("sandbox", "10001") and pid.isdigit():
            found.append(Proc(int(pid), user, args))
    return found


# How the agent starts a session's shell (busybox's sh, or bash without start-up files).
SESSION_SHELLS = ("sh", "/bin/sh", "bash --norc --noprofile", "/bin/bash --norc --noprofile")


def leftovers(engine: Any, sandbox: Sandbox, *, but: tuple[str, ...] = ()) -> list[Proc]:
    """The sandbox user's processes other than idle session shells (and those whose command
    line contains one of `but`)."""
    return [
        p
        for p in processes(engine, sandbox)
        if p.args.strip() not in SESSION_SHELLS and not any(text in p.args for text in but)
    ]


def cpu_share(engine: Any, sandbox: Sandbox, seconds: float = 1.0) -> float:
    """The share of one CPU the container used over `seconds`, from the engine's counters
    (what `docker stats` shows)."""
    first = engine.usage(sandbox.container_id)
    time.sleep(seconds)
    second = engine.usage(sandbox.container_id)
    assert first is not None and second is not None, "the container is not running"
    return (second.cpu_ns - first.cpu_ns) / (seconds * 1e9)


def wait_until(condition: Any, seconds: float, what: str) -> float:
    return wait_for(condition, seconds, lambda: what)


@pytest.fixture
def attacked(make_pipeline: Any, bot: Any, docker_engine: Any) -> Any:
    """Open a sandbox of a pipeline made with the given profile (the one under attack)."""

    def open_one(**profile: Any) -> Sandbox:
        pipeline = make_pipeline(**profile)
        return services.open_sandbox(pipeline, CHAT, bot).sandbox

    return open_one


@pytest.fixture
def neighbour(make_pipeline: Any, bot: Any, docker_engine: Any) -> Any:
    """A sandbox of another pipeline on the same engine; `answers()` runs `true` in it and
    fails unless it completes, quickly."""
    sandbox = services.open_sandbox(make_pipeline(slug="neighbour"), NEIGHBOUR_CHAT, bot).sandbox

    class Neighbour:
        def __init__(self) -> None:
            self.sandbox = sandbox

        def answers(self, within: float = 5.0) -> float:
            started = time.monotonic()
            record = run(sandbox, bot, ["true"], timeout_seconds=30)
            took = time.monotonic() - started
            assert (record.state, record.exit_code) == ("completed", 0), record.error
            assert took < within, f"the neighbour's `true` took {took:.2f} s"
            return took

    return Neighbour()
