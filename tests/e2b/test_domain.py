"""E2B's APIs by host name (BOXYARD_E2B_DOMAIN): the SDK given only E2B_DOMAIN and its key
reaches the control plane at `https://api.<domain>` and a sandbox at
`https://<port>-<id>.<domain>`, through TLS in front of a served Boxyard as an operator puts it
there. The names are under `localhost`, which the SDK's resolver answers with the loopback
address, and the SDK trusts the test's authority through SSL_CERT_FILE (its TLS roots)."""

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from e2b import Sandbox

from sandboxes.e2b.common import envd_token
from sandboxes.e2b.hostnames import ByHostName
from sandboxes.models import Exec, State
from sandboxes.models import Sandbox as Row
from tests.conftest import CHAT
from tests.e2b.conftest import Bot
from tests.e2b.tls import Certificates, terminated, wildcard_certificates
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

DOMAIN = "boxyard.localhost"
CLIENT = Path(__file__).with_name("sdk_by_domain.py")


@dataclass
class Front:
    """The served Boxyard with the E2B domain set, and TLS in front of it."""

    server: Server
    certificates: Certificates
    tls_port: int

    def sdk_env(self, key: str) -> dict[str, str]:
        """A bot's environment: E2B_DOMAIN (with the TLS port) and the key, nothing else of
        E2B's, and the test's authority as the TLS roots."""
        env = {name: value for name, value in os.environ.items() if not name.startswith("E2B_")}
        env.update(
            E2B_DOMAIN=f"{DOMAIN}:{self.tls_port}",
            E2B_API_KEY=key,
            SSL_CERT_FILE=str(self.certificates.authority),
        )
        return env


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: None, engine: Any
) -> Iterator[Server]:
    """This module's Boxyard serves E2B's names under DOMAIN (the other e2b modules' serve
    none)."""
    with served(
        tmp_path_factory.mktemp("e2b-domain"),
        BOXYARD_SECRET_KEY=settings.SECRET_KEY,
        BOXYARD_E2B_DOMAIN=DOMAIN,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def front(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    certificates = wildcard_certificates(tmp_path_factory.mktemp("tls"), DOMAIN)
    upstream = urlsplit(server.url).port
    assert upstream is not None
    with terminated(certificates, upstream) as port:
        yield Front(server, certificates, port)


def by_name(server: Server, host: str, path: str, **headers: str) -> httpx.Response:
    """A GET to the served Boxyard (no TLS) with the Host the SDK would send."""
    return httpx.get(f"{server.url}{path}", headers={"Host": host, **headers}, timeout=30)


def test_the_sdk_with_only_its_domain_runs_a_chats_sandbox(front: Front, support: Bot) -> None:
    ran = subprocess.run(
        [sys.executable, str(CLIENT), json.dumps(CHAT)],
        env=front.sdk_env(support.key),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stderr[-4000:] + front.server.tail()
    seen = json.loads(ran.stdout)

    box = seen["sandbox_id"]
    assert seen["host"] == f"49983-{box}.{DOMAIN}:{front.tls_port}"  # the SDK's own address
    assert seen["stdout"] == "hello from /home/user\n"
    assert seen["read"] == seen["async_stdout"] == "kept by name"
    assert seen["async_host"] == seen["host"]
    assert box in seen["listed"]
    assert seen["killed"] is True
    row = Row.objects.get(pk=box)
    assert row.pipeline == support.pipeline  # the chat's sandbox of the key's pipeline
    commands = list(Exec.objects.filter(sandbox=row).values_list("command", flat=True))
    assert any("echo hello from" in str(command) for command in commands), commands


def test_a_sandboxs_name_still_needs_its_access_token(front: Front, support: Bot) -> None:
    box = Sandbox.create(metadata=CHAT, **support.opts(front.server))
    host = f"49983-{box.sandbox_id}.{DOMAIN}"

    assert by_name(front.server, host, "/health").status_code == 401
    wrong = by_name(front.server, host, "/health", **{"X-Access-Token": "0" * 64})
    assert wrong.status_code == 401
    # The name decides which sandbox: a header naming another one changes nothing.
    token = envd_token(box.sandbox_id)
    right = by_name(
        front.server, host, "/health", **{"X-Access-Token": token, "E2b-Sandbox-Id": "other"}
    )
    assert right.status_code == 204, right.text
    # Another port of the sandbox is not reachable this way, as by the URL settings.
    other_port = by_name(
        front.server, f"8080-{box.sandbox_id}.{DOMAIN}", "/health", **{"X-Access-Token": token}
    )
    assert other_port.status_code == 502
    assert "port is not open" in other_port.json()["message"]
    # A name under the domain that is neither of E2B's is Django's, and not allowed.
    assert by_name(front.server, f"www.{DOMAIN}", "/healthz").status_code == 400
    assert Row.objects.get(pk=box.sandbox_id).state == State.RUNNING


def test_the_control_plane_by_name_is_the_one_under_e2b(
    front: Front, support: Bot, billing: Bot
) -> None:
    box = Sandbox.create(metadata=CHAT, **support.opts(front.server))
    api = f"api.{DOMAIN}"

    mine = by_name(front.server, api, f"/sandboxes/{box.sandbox_id}", **{"X-API-KEY": support.key})
    assert mine.status_code == 200, mine.text
    assert mine.json()["sandboxID"] == box.sandbox_id
    theirs = by_name(
        front.server, api, f"/sandboxes/{box.sandbox_id}", **{"X-API-KEY": billing.key}
    )
    assert (theirs.status_code, theirs.json()["code"]) == (404, 404)
    assert by_name(front.server, api, "/sandboxes").status_code == 401  # no key
    # Boxyard's own paths are not served under E2B's name.
    assert by_name(front.server, api, "/healthz").status_code == 404


def test_without_the_setting_nothing_is_renamed(settings: Any) -> None:
    seen: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    def request(host: str) -> dict[str, Any]:
        scope = {"type": "http", "path": "/sandboxes", "headers": [(b"host", host.encode())]}
        asyncio.run(ByHostName(app)(scope, None, None))  # type: ignore[arg-type]
        return seen[-1]

    settings.BOXYARD_E2B_DOMAIN = ""
    assert request(f"api.{DOMAIN}")["path"] == "/sandboxes"
    assert request(f"49983-abc.{DOMAIN}")["path"] == "/sandboxes"
    settings.BOXYARD_E2B_DOMAIN = DOMAIN
    assert request(f"api.{DOMAIN}")["path"] == "/e2b/sandboxes"
    assert request(f"49983-abc.{DOMAIN}")["path"] == "/e2b/sandbox/sandboxes"
    # Only names one label under the domain are E2B's.
    assert request("api")["path"] == "/sandboxes"
    assert request(f"api.other.{DOMAIN}")["path"] == "/sandboxes"
    assert request(f"api.{DOMAIN}.example")["path"] == "/sandboxes"
