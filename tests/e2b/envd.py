"""The E2B SDK's own sandbox clients (commands, files, pty) built by hand as `Sandbox.__init__`
builds them (the sandbox URL of `/e2b/sandbox`, the sandbox named by its headers), for the
tests that send another token, or none, or name a sandbox the control plane never gave."""

from dataclasses import dataclass

import httpx
from e2b import ConnectionConfig
from e2b.api.client_async import get_envd_api as get_async_envd_api
from e2b.api.client_sync import get_envd_api
from e2b.sandbox_async.commands.command import Commands as AsyncCommands
from e2b.sandbox_async.filesystem.filesystem import Filesystem as AsyncFilesystem
from e2b.sandbox_sync.commands.command import Commands
from e2b.sandbox_sync.commands.pty import Pty
from e2b.sandbox_sync.filesystem.filesystem import Filesystem
from packaging.version import Version

from sandboxes.e2b.common import ENVD_VERSION, envd_token
from tests.servers import Server

API_KEY = "e2b_" + "0" * 40


@dataclass
class EnvdSandbox:
    sandbox_id: str
    api: httpx.Client  # the SDK's client of envd's HTTP routes (/files, /health)
    commands: Commands
    files: Filesystem
    pty: Pty


def envd(server: Server, sandbox_id: str, token: str | None) -> EnvdSandbox:
    """The SDK's clients of one sandbox; `token` None sends none."""
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"}
    if token is not None:
        headers["X-Access-Token"] = token
    config = ConnectionConfig(
        sandbox_url=f"{server.url}/e2b/sandbox",
        api_key=API_KEY,
        extra_sandbox_headers=headers,
        request_timeout=60,
    )
    url = config.get_sandbox_url(sandbox_id, "")
    api = get_envd_api(config, url)
    version = Version(ENVD_VERSION)
    return EnvdSandbox(
        sandbox_id,
        api,
        Commands(url, config, version, api),
        Filesystem(url, version, config, api),
        Pty(url, config, version, api),
    )


@dataclass
class AsyncEnvdSandbox:
    sandbox_id: str
    commands: AsyncCommands
    files: AsyncFilesystem


def async_envd(server: Server, sandbox_id: str) -> AsyncEnvdSandbox:
    """The async SDK's clients of one sandbox (which watch a directory by a stream)."""
    config = ConnectionConfig(
        sandbox_url=f"{server.url}/e2b/sandbox",
        api_key=API_KEY,
        extra_sandbox_headers={
            "E2b-Sandbox-Id": sandbox_id,
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": envd_token(sandbox_id),
        },
        request_timeout=60,
    )
    url = config.get_sandbox_url(sandbox_id, "")
    api = get_async_envd_api(config, url)
    version = Version(ENVD_VERSION)
    return AsyncEnvdSandbox(
        sandbox_id,
        AsyncCommands(url, config, version, api),
        AsyncFilesystem(url, version, config, api),
    )
