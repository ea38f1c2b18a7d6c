"""The sandbox's port (`sandboxes.runtime.port`): chosen once, by the agent the sandbox runs;
what it can do is said as capabilities, never as a version. The channel it rides is faked
here; the real one is proven by every exec against the engine."""

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from sandboxes.runtime import port


@dataclass(frozen=True)
class Box:
    container_id: str = "c0ffee"
    host_id: int | None = None
    agent: str = "digest"


@pytest.fixture
def handshake(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The channel as the agent's ping left it (`version`), and whether one was opened."""
    said: dict[str, Any] = {"version": port.PROTOCOL, "opened": 0}

    def channel(_placed: Any) -> SimpleNamespace:
        said["opened"] += 1
        return SimpleNamespace(version=said["version"], call=lambda op, **_: {"op": op})

    monkeypatch.setattr(port, "channel", channel)
    return said


def test_a_sandbox_without_the_agent_has_no_port(handshake: dict[str, Any]) -> None:
    with pytest.raises(port.AgentOutdated, match="without the agent"):
        port.port_of(Box(agent=""))
    assert port.outdated(Box(agent=""))
    assert handshake["opened"] == 0  # decided from the row, without asking the engine


def test_an_agent_older_than_the_protocol_has_no_port(handshake: dict[str, Any]) -> None:
    handshake["version"] = port.PROTOCOL - 1
    with pytest.raises(port.AgentOutdated, match="older"):
        port.port_of(Box())
    assert port.outdated(Box())


def test_the_current_agent_is_reached_through_its_port(handshake: dict[str, Any]) -> None:
    reached = port.port_of(Box())
    assert not port.outdated(Box())
    assert reached.call("ping") == {"op": "ping"}


def test_files_take_the_agents_socket_only_where_allowed(
    handshake: dict[str, Any], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    engine = SimpleNamespace(agent_socket=lambda container: asked.append(container) or None)
    monkeypatch.setattr(port, "engine_at", lambda host: engine)
    settings.BOXYARD_AGENT_DIRECT = False
    off = port.port_of(Box())
    assert off.capabilities == port.Capabilities(direct_files=False)
    assert off.file_socket() is None and asked == []
    settings.BOXYARD_AGENT_DIRECT = True
    on = port.port_of(Box())
    assert on.capabilities.direct_files
    assert on.file_socket() is None and asked == ["c0ffee"]  # out of reach here: engine execs
