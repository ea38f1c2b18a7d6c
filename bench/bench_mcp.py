#!/usr/bin/env python
"""MCP against the bot API over HTTP, in the same run, interleaved (each round runs every
variant once, in a new random order; see `bench_core.run_interleaved`).

`exec true` in the same sandbox:

- `rest`: `POST /api/v1/sandboxes/{id}/exec {"cmd": ["true"]}` (httpx, keep-alive);
- `mcp auto` / `mcp auto id`: `tools/call sandbox_exec {"cmd": ["true"]}` through the official
  `mcp` client in its default mode (revision 2026-07-28, no session), the sandbox found from the
  URL's chat variables, or named by `sandbox_id`;
- `mcp legacy` / `mcp legacy id`: the same with the handshake revision and its session;
- `mcp raw`: the very request the official client sends in its default mode, posted with httpx,
  to tell the server's time from the client library's.

The gateway (`/mcp/servers/{name}`): a managed process that is a minimal stdio MCP server (a
stdlib-only Python script, one JSON line per answer) answers `tools/call add`:

- `gateway auto` / `gateway legacy`: through the official client at `/mcp/servers/adder`;
- `stdin+output`: what a bot does without the gateway: `POST .../processes/adder/stdin` with the
  JSON-RPC line, then `GET .../processes/adder/output?since_seq=&wait_seconds=` until the answer
  to that id has come.

The official client lives in an event loop of its own thread; each variant's time is taken
inside that loop, around the call alone. It prints p50/p90 per variant and its ratio to `rest`
(the gateway's to `stdin+output`), and the issue's target (MCP p50 at most 1.5 times REST's) as
PASS or FAIL lines that never change the exit status. Nothing is asserted.

    .venv/bin/python bench/bench_mcp.py [--n 100] [--warmup 10] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import Stats, run_interleaved, timed

TARGET = 1.5
PYTHON_IMAGE = "boxyard/default:1"  # the stdio server is a python3 script
CHAT = {"launcher_type": "bench", "launcher_id": "1"}
ADDER = "adder"
# A stdio MCP server in one screen of stdlib Python: the gateway's process under test.
ADDER_SCRIPT = r"""
import json, sys
for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if "id" not in message:
        continue
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
                  "serverInfo": {"name": "adder", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "add", "inputSchema": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}}}]}
    elif method == "tools/call":
        arguments = params.get("arguments") or {}
        result = {"content": [{"type": "text", "text": str(arguments["a"] + arguments["b"])}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                          "error": {"code": -32601, "message": "unknown method"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


class Loop:
    """An event loop in a thread of its own, where the MCP clients live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class Clients:
    """The official clients, entered and left in one task of the loop (as anyio wants)."""

    def __init__(self, loop: Loop, connections: dict[str, tuple[str, str]], token: str) -> None:
        self.loop = loop
        self.connections = connections
        self.token = token
        self.clients: dict[str, Any] = {}
        self._ready = threading.Event()
        self._done: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._task = asyncio.run_coroutine_threadsafe(self._host(), loop.loop)
        if not self._ready.wait(120):
            raise RuntimeError("the MCP clients did not connect within 120 s")
        if self._failure is not None:
            raise self._failure

    async def _host(self) -> None:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        self._done = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                for name, (url, mode) in self.connections.items():
                    http = create_mcp_http_client(headers={"Authorization": f"Bearer {self.token}"})
                    client = Client(streamable_http_client(url, http_client=http), mode=mode)
                    self.clients[name] = await stack.enter_async_context(client)
                self._ready.set()
                await self._done.wait()
        except BaseException as error:
            self._failure = error
            self._ready.set()
            raise

    def call(
        self, name: str, tool: str, arguments: dict[str, Any], check: Callable[[Any], bool]
    ) -> float:
        async def once() -> float:
            started = time.perf_counter()
            result = await self.clients[name].call_tool(tool, arguments)
            seconds = time.perf_counter() - started
            if result.is_error or not check(result):
                raise RuntimeError(f"{name} {tool} failed: {result}")
            return seconds

        seconds: float = self.loop.run(once())
        return seconds

    def close(self) -> None:
        if self._done is not None:
            self.loop.loop.call_soon_threadsafe(self._done.set)
        try:
            self._task.result(timeout=30)
        except Exception:
            pass


def declare_adder() -> None:
    """The bench pipeline declares the adder process (read by the server from the database)."""
    from pipelines.models import Pipeline

    Pipeline.objects.filter(slug=PIPELINE).update(
        processes=[{"name": ADDER, "cmd": ["python3", "/workspace/adder.py"]}]
    )


def wait_running(client: Any, sandbox_id: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        listed = client.get(f"/api/v1/sandboxes/{sandbox_id}/processes").json()["processes"]
        if listed and listed[0]["state"] == "running":
            time.sleep(0.5)  # and still running: its script is there
            again = client.get(f"/api/v1/sandboxes/{sandbox_id}/processes").json()["processes"]
            if again[0]["state"] == "running" and again[0]["generation"] == listed[0]["generation"]:
                return
        if time.monotonic() > deadline:
            output = client.get(f"/api/v1/sandboxes/{sandbox_id}/processes/{ADDER}/output")
            raise RuntimeError(f"the adder does not run: {listed} {output.text[:2000]}")
        time.sleep(0.2)


def direct_call(client: Any, sandbox_id: str) -> Callable[[], float]:
    """`tools/call add` written to the process's stdin and read back from its output."""
    base = f"/api/v1/sandboxes/{sandbox_id}/processes/{ADDER}"
    ids = itertools.count(1)
    state = {"seq": 0, "generation": 0}

    def call() -> float:
        request_id = f"direct-{next(ids)}"
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                           "params": {"name": "add", "arguments": {"a": 2, "b": 3}}})  # fmt: skip
        started = time.perf_counter()
        written = client.post(f"{base}/stdin", json={"text": line + "\n"})
        if written.status_code != 200:
            raise RuntimeError(f"stdin: {written.status_code} {written.text}")
        if written.json()["generation"] != state["generation"]:
            state["generation"], state["seq"] = written.json()["generation"], 0
        seen = ""
        while f'"id": "{request_id}"' not in seen:
            answer = client.get(
                f"{base}/output", params={"since_seq": state["seq"], "wait_seconds": 5}
            ).json()
            for chunk in answer["chunks"]:
                state["seq"] = chunk["seq"]
                seen += chunk["text"]
        seconds = time.perf_counter() - started
        if '"text": "5"' not in seen:
            raise RuntimeError(f"the direct call answered {seen!r}")
        return seconds

    return call


def print_table(title: str, stats: dict[str, Stats], base: str) -> None:
    reference = stats[base].percentiles()[0]
    print(title)
    print(f"  {'variant':<16} {'n':>4} {'p50 ms':>8} {'p90 ms':>8} {'p50 / ' + base:>18}")
    for name, figures in stats.items():
        p50, p90, _ = figures.percentiles()
        print(f"  {name:<16} {figures.n:>4} {p50:>8.2f} {p90:>8.2f} {p50 / reference:>17.2f}x")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=PYTHON_IMAGE, help="an image with python3")
    parser.add_argument("--n", type=int, default=100, help="measured rounds")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    import httpx

    with throwaway("boxyard-bench-mcp-") as (deployment, data_dir):
        env, token, _raw, _env = prepare(
            args.image, deployment, data_dir, "Boxyard MCP benchmark: MCP against REST"
        )
        declare_adder()
        loop = Loop()
        with (
            served(env, data_dir) as server,
            httpx.Client(
                base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=120
            ) as client,
        ):
            opened = client.post(
                "/api/v1/sandboxes/open", json={"pipeline": PIPELINE, "variables": CHAT}
            )
            if opened.status_code != 200:
                raise RuntimeError(f"open failed: {opened.status_code} {opened.text}")
            sandbox_id = opened.json()["sandbox_id"]
            client.put(
                f"/api/v1/sandboxes/{sandbox_id}/files",
                json={"path": "adder.py", "contents": ADDER_SCRIPT},
            ).raise_for_status()
            client.post(
                f"/api/v1/sandboxes/{sandbox_id}/processes/{ADDER}/restart", json={}
            ).raise_for_status()
            wait_running(client, sandbox_id)
            query = "launcher_type=bench&launcher_id=1"
            mcp_url = f"{server.base_url}/mcp?{query}"
            gateway_url = f"{server.base_url}/mcp/servers/{ADDER}?{query}"
            clients = Clients(
                loop,
                {
                    "auto": (mcp_url, "auto"),
                    "legacy": (mcp_url, "legacy"),
                    "gateway auto": (gateway_url, "auto"),
                    "gateway legacy": (gateway_url, "legacy"),
                },
                token,
            )
            try:
                exec_stats, gateway_stats = measure(args, client, clients, sandbox_id, token)
            finally:
                clients.close()
                loop.close()
    print_table("exec true: MCP against REST", exec_stats, "rest")
    print_table("a tool call of a stdio MCP server", gateway_stats, "stdin+output")
    rest = exec_stats["rest"].percentiles()[0]
    for name in ("mcp auto", "mcp auto id", "mcp legacy", "mcp legacy id", "mcp raw"):
        ratio = exec_stats[name].percentiles()[0] / rest
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(f"{verdict}  {name}: p50 {ratio:.2f}x REST (target <= {TARGET}x)")
    return 0


def measure(
    args: argparse.Namespace, client: Any, clients: Clients, sandbox_id: str, token: str
) -> tuple[dict[str, Stats], dict[str, Stats]]:
    import httpx

    true = {"cmd": ["true"]}
    with_id = {**true, "sandbox_id": sandbox_id}

    def exited(result: Any) -> bool:
        return bool(result.structured_content["exit_code"] == 0)

    def rest() -> float:
        seconds, response = timed(
            lambda: client.post(f"/api/v1/sandboxes/{sandbox_id}/exec", json=true)
        )
        if response.status_code != 200 or response.json()["exit_code"] != 0:
            raise RuntimeError(f"rest exec failed: {response.text}")
        return seconds

    raw_http = httpx.Client(
        base_url=client.base_url,
        timeout=120,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "sandbox_exec",
        },
    )
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    ids = itertools.count(1)

    def raw() -> float:
        body = {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call",
                "params": {"name": "sandbox_exec", "arguments": true, "_meta": meta}}  # fmt: skip
        seconds, response = timed(
            lambda: raw_http.post("/mcp?launcher_type=bench&launcher_id=1", json=body)
        )
        if response.status_code != 200 or response.json()["result"].get("isError"):
            raise RuntimeError(f"raw MCP exec failed: {response.text}")
        return seconds

    def mcp(name: str, arguments: dict[str, Any]) -> Callable[[], float]:
        return lambda: clients.call(name, "sandbox_exec", arguments, exited)

    def gateway(name: str) -> Callable[[], float]:
        return lambda: clients.call(
            name, "add", {"a": 2, "b": 3}, lambda result: result.content[0].text == "5"
        )

    try:
        exec_stats = run_interleaved(
            {
                "rest": rest,
                "mcp auto": mcp("auto", true),
                "mcp auto id": mcp("auto", with_id),
                "mcp legacy": mcp("legacy", true),
                "mcp legacy id": mcp("legacy", with_id),
                "mcp raw": raw,
            },
            args.n,
            args.warmup,
            random.Random(args.seed),
            "exec true",
        )
        gateway_stats = run_interleaved(
            {
                "stdin+output": direct_call(client, sandbox_id),
                "gateway auto": gateway("gateway auto"),
                "gateway legacy": gateway("gateway legacy"),
            },
            args.n,
            args.warmup,
            random.Random(args.seed),
            "gateway",
        )
    finally:
        raw_http.close()
    return exec_stats, gateway_stats


if __name__ == "__main__":
    raise SystemExit(main())
