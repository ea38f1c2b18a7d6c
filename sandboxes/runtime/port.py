"""The one way the services reach into a sandbox: its port.

Every sandbox runs the current agent (`bin/setup` builds it; a sandbox made without it, or
with an agent older than `PROTOCOL`, is restarted with the current one: the services'
`booting.migrate`). A port is chosen once per sandbox by `port_of`, and it says what it can
do as `Capabilities`, never as a version number:

- requests (run a command, sessions, processes, reset, terminals, statfs …) go over this
  process's channel to the agent, through the engine of the sandbox's host (`agent.channel`);
- a file's bytes go over a connection to the agent's own socket where this process can reach
  it (`Runtime.agent_socket`: the engine on this machine, Boxyard allowed into the container)
  and the operator has not turned it off (`BOXYARD_AGENT_DIRECT`); elsewhere `file_socket`
  answers None and the file scripts run in the engine's execs.

A sandbox whose agent cannot serve (none, or older) raises `AgentOutdated` here, and nowhere
else decides it.
"""

import concurrent.futures
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

from boxyard.errors import N_, RuntimeFailure
from sandboxes.runtime import answers, engine_at
from sandboxes.runtime.agent import AgentChannel, channel

# The agent's protocol this Boxyard speaks (agent/main.go's `version`, answered to ping):
# an agent that answers less is migrated, never served (6: code contexts).
PROTOCOL = 6


class AgentOutdated(RuntimeFailure):
    """The sandbox runs without the agent, or with one older than `PROTOCOL`: it must be
    restarted with the current agent (its workspace kept) before it is used."""

    code = "agent_outdated"


@dataclass(frozen=True)
class Capabilities:
    """What a port can do beyond the agent's requests, which every port serves."""

    # A file's bytes may go over the agent's own socket (else through the engine's execs).
    direct_files: bool


class Reachable(Protocol):
    """A sandbox as the port needs it: its container, the host it is on, and the digest of
    the agent it was started with (empty: none)."""

    @property
    def container_id(self) -> str: ...

    @property
    def host_id(self) -> int | None: ...

    @property
    def agent(self) -> str: ...


class SandboxPort(Protocol):
    """What the services may ask of a sandbox."""

    @property
    def capabilities(self) -> Capabilities: ...

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """A request to the agent, answered (`AgentChannel.call`: `deadline`, `on_event`,
        `on_slow`, and the request's own fields)."""
        ...

    def ask(
        self, op: str, **fields: Any
    ) -> tuple[int, "concurrent.futures.Future[dict[str, Any]]"]:
        """A request sent without waiting (`AgentChannel.ask`)."""
        ...

    def forget(self, request_id: int) -> None: ...

    def follow(
        self, exec_id: str, since_seq: int, on_event: Callable[[dict[str, Any]], None]
    ) -> Callable[[], None]: ...

    def run_followed(
        self, on_event: Callable[[dict[str, Any]], None], **fields: Any
    ) -> tuple[int, "concurrent.futures.Future[dict[str, Any]]", Callable[[], None]]:
        """A `run` whose output and end go to `on_event` from its first byte, as `follow`
        gives them (`AgentPort.run_followed`)."""
        ...

    def file_socket(self) -> socket.socket | None: ...


class AgentPort:
    """A sandbox reached through its agent: requests over this process's channel (through
    the engine), a file's bytes over the agent's own socket where it is in reach."""

    def __init__(self, sandbox: Reachable, agent: AgentChannel) -> None:
        self._container = sandbox.container_id
        self._host = sandbox.host_id
        self._agent = agent
        self.capabilities = Capabilities(direct_files=settings.BOXYARD_AGENT_DIRECT)

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        return self._agent.call(op, **fields)

    def ask(
        self, op: str, **fields: Any
    ) -> tuple[int, "concurrent.futures.Future[dict[str, Any]]"]:
        return self._agent.ask(op, **fields)

    def forget(self, request_id: int) -> None:
        self._agent.forget(request_id)

    def follow(
        self, exec_id: str, since_seq: int, on_event: Callable[[dict[str, Any]], None]
    ) -> Callable[[], None]:
        """Subscribe to what the agent keeps as `exec_id` (an exec, or a managed process's
        run): `on_event` gets {"event": "chunk", seq, stream, text, data}, then one {"event":
        "exit", exit_code, timed_out, killed, status} (`status`: the agent's report of the
        end, as `status` answers it but for the output's first bytes) or {"event": "gone",
        reason}, from the channel's reader thread. Returns the function that stops it. A
        chunk's `data` is its bytes as the command wrote them; `text` is them decoded, invalid
        UTF-8 replaced (a character split between two chunks too)."""
        answer = self._agent.call(
            "subscribe", exec=exec_id, since_seq=since_seq, on_event=_relayed(on_event)
        )
        subscription = answer["_id"]
        return lambda: self._agent.unsubscribe(subscription, exec_id)

    def run_followed(
        self, on_event: Callable[[dict[str, Any]], None], **fields: Any
    ) -> tuple[int, "concurrent.futures.Future[dict[str, Any]]", Callable[[], None]]:
        """A `run` (`fields`) whose output and end go to `on_event` from its first byte, as
        `follow` gives them, with no subscription of its own: the agent pushes them to the
        run's own request (`watch`). (Its id, the future of its answer, the function that
        stops following.)"""
        request_id, answer = self._agent.ask(
            "run", on_event=_relayed(on_event), watch=True, **fields
        )
        exec_id = str(fields["exec"])
        return request_id, answer, lambda: self._agent.unsubscribe(request_id, exec_id)

    def file_socket(self) -> socket.socket | None:
        """A new connection to the agent's own socket for one file's bytes, or None where
        this process cannot reach it (the file scripts then run in the engine's execs)."""
        if not self.capabilities.direct_files:
            return None
        return engine_at(self._host).agent_socket(self._container)


def _relayed(on_event: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """The agent's events of an exec as `follow` gives them."""

    def relay(message: dict[str, Any]) -> None:
        if message["event"] == "chunk":
            chunk = answers.chunks([message])[0]
            on_event({"event": "chunk", **chunk, "data": answers.data(message.get("data"))})
        elif message["event"] == "exit":
            status = message.get("status") or {}
            on_event(
                {
                    "event": "exit",
                    "exit_code": answers.optional_int(status.get("exit_code")),
                    "timed_out": status.get("timed_out") is True,
                    "killed": status.get("killed") is True,
                    "status": status,
                }
            )
        else:
            on_event({"event": "gone", "reason": message.get("reason", "")})

    return relay


def outdated(sandbox: Reachable) -> bool:
    """Whether the sandbox must be migrated before it is used: it has no agent, or its agent
    answers an older protocol (asked on this process's channel, opened if need be)."""
    if not sandbox.agent:
        return True
    return channel(sandbox).version < PROTOCOL


def port_of(sandbox: Reachable) -> SandboxPort:
    """The sandbox's port. Raises AgentOutdated (see `outdated`), and the channel's errors
    (AgentGone, ContainerGone …) when the agent cannot be reached."""
    if not sandbox.agent:
        raise AgentOutdated(N_("this sandbox was started without the agent; restart it"))
    agent = channel(sandbox)
    if agent.version < PROTOCOL:
        raise AgentOutdated(N_("this sandbox runs an agent older than this Boxyard's; restart it"))
    return AgentPort(sandbox, agent)
