"""The plain websocket clients of `bench_live.py`'s second section: fleet pages without a
browser, in a process of their own.

Each client opens the websocket a fleet page opens (the same URL, the admin's cookies, the
page's Origin, User-Agent and Accept-Language), reads every frame the server sends, and notes
the moment (epoch ms, taken as the frame is handed to it, before anything else is done with it)
at which a frame first named each `bench-holder-N`. The clients run on one asyncio loop in a
child process (`multiprocessing`, spawned), so that reading 100 sockets does not take the
benchmark's own thread; the moments come back over a pipe when the benchmark asks for them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import time
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

HOLDER = re.compile(r"bench-holder-[0-9]+")
CONNECTED = "connected"
STOP = "stop"


class FleetClients:
    """Websocket clients of `url` in a child process, connected a few at a time (`connect`),
    closed by `arrivals` or on leaving."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.timeout = timeout
        self.process = context.Process(
            target=_serve,
            args=(child, url, headers),
            name="bench-live-clients",
            daemon=True,
        )

    def __enter__(self) -> FleetClients:
        self.process.start()
        return self

    def connect(self, count: int) -> None:
        """`count` more clients, each having had its first frame (the table: its consumer has
        joined the fleet's group) when this returns."""
        self.pipe.send(count)
        message = self._receive(self.timeout + 30)
        if message != CONNECTED:
            raise RuntimeError(f"the websocket clients did not connect: {message}")

    def arrivals(self) -> list[dict[str, float]]:
        """Per client, when (epoch ms) a frame first named each holder; the clients close."""
        self.pipe.send(STOP)
        message = self._receive(self.timeout)
        if not isinstance(message, list):
            raise RuntimeError(f"the websocket clients failed: {message}")
        return message

    def _receive(self, timeout: float) -> Any:
        if not self.pipe.poll(timeout):
            raise RuntimeError(f"the websocket clients did not answer within {timeout:.0f} s")
        return self.pipe.recv()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.process.join(timeout=15)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.pipe.close()


def _serve(pipe: Connection, url: str, headers: dict[str, str]) -> None:
    try:
        asyncio.run(_clients(pipe, url, headers))
    except BaseException as error:
        pipe.send(f"{type(error).__name__}: {error}")
        raise


async def _clients(pipe: Connection, url: str, headers: dict[str, str]) -> None:
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.typing import Origin

    seen: list[dict[str, float]] = []
    sockets: list[ClientConnection] = []
    listeners: list[asyncio.Task[None]] = []

    def note(client: int, frame: str | bytes) -> None:
        moment = time.time() * 1000
        text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
        for holder in HOLDER.findall(text):
            seen[client].setdefault(holder, moment)

    async def listen(client: int, socket: ClientConnection) -> None:
        async for frame in socket:
            note(client, frame)

    others = {
        name: value for name, value in headers.items() if name not in ("Origin", "User-Agent")
    }

    async def command() -> int | str:
        while not pipe.poll():
            await asyncio.sleep(0.2)
        order: int | str = pipe.recv()
        return order

    while isinstance(order := await command(), int):
        for _ in range(order):
            socket = await connect(
                url,
                origin=Origin(headers["Origin"]),
                additional_headers=others,
                user_agent_header=headers["User-Agent"],
                proxy=None,
                ping_interval=None,  # a browser sends no pings; the server's are answered
                max_size=None,
            )
            sockets.append(socket)
            seen.append({})
            note(len(sockets) - 1, await socket.recv())  # the table: the consumer has joined
            listeners.append(asyncio.create_task(listen(len(sockets) - 1, socket)))
        pipe.send(CONNECTED)
    await asyncio.gather(*(socket.close() for socket in sockets))
    await asyncio.gather(*listeners, return_exceptions=True)
    pipe.send(seen)
