"""The pipeline's page tells an admin how to connect an MCP client: the URL with the chat's
variables as placeholders, and configurations ready to paste that the clients really read."""

import html
import json
import re
from typing import Any

import pytest
from django.test import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.mcp_config import MCPConfig, RemoteMCPServer

from pipelines.mcp_config import mcp_connection
from pipelines.models import Pipeline

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


def block(page: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}"><code>(.*?)</code>', page, re.S)
    assert found, testid
    return html.unescape(found[1])


@pytest.mark.parametrize(
    ("template", "query"),
    [
        (
            "{launcher_type}_{launcher_id}",
            "?launcher_type={launcher_type}&launcher_id={launcher_id}",
        ),
        (
            "{conversation_id|sender_id|uuid}",
            "?conversation_id={conversation_id}&sender_id={sender_id}",
        ),
        ("msg_{uuid}", ""),
    ],
)
def test_the_page_shows_the_url_with_the_scopes_own_variables(
    admin_client: Client, make_pipeline: Any, template: str, query: str
) -> None:
    make_pipeline(slug="support", scope_template=template)
    page = admin_client.get("/pipelines/support/").content.decode()
    url = f"http://testserver/mcp{query}"
    assert f'data-testid="mcp-url">{html.escape(url)}</code>' in page
    servers = json.loads(block(page, "mcp-json"))["mcpServers"]
    assert servers == {
        "boxyard-support": {
            "type": "http",
            "url": url,
            "headers": {"Authorization": "Bearer <token>"},
        }
    }


def test_the_blocks_are_what_each_client_reads(admin_client: Client, make_pipeline: Any) -> None:
    make_pipeline(
        slug="support",
        exec_timeout_seconds=120,
        processes=[{"name": "notes", "cmd": ["python3", "notes.py"]}],
    )
    page = admin_client.get("/pipelines/support/").content.decode()
    config = MCPConfig.model_validate(json.loads(block(page, "mcp-json")))
    # fastmcp reads `type` as nothing of its own; it must still take each URL as Streamable HTTP.
    urls = {
        name: server.url
        for name, server in config.mcpServers.items()
        if isinstance(server, RemoteMCPServer)
        and isinstance(server.to_transport(), StreamableHttpTransport)
    }
    query = "?launcher_type={launcher_type}&launcher_id={launcher_id}"
    assert urls == {
        "boxyard-support": f"http://testserver/mcp{query}",
        "boxyard-support-notes": f"http://testserver/mcp/servers/notes{query}",
    }
    # LangBot's MCP server as its web UI saves it; mode http is Streamable HTTP.
    langbot = json.loads(block(page, "mcp-langbot"))
    assert langbot == {
        "name": "boxyard-support",
        "mode": "http",
        "enable": True,
        "extra_args": {
            "url": urls["boxyard-support"],
            "headers": {"Authorization": "Bearer <token>"},
            "timeout": 180,
        },
    }
    # AstrBot's dashboard takes the server's configuration alone, its name in a field of its
    # own: with no `url` at the top it would start a stdio server, and any transport but
    # streamable_http is SSE to it.
    astrbot = json.loads(block(page, "mcp-astrbot"))
    assert astrbot["transport"] == "streamable_http"
    assert astrbot["url"] == urls["boxyard-support"]
    assert astrbot["headers"] == {"Authorization": "Bearer <token>"}
    assert astrbot["session_read_timeout"] == astrbot["sse_read_timeout"] == 180
    assert "named <code>boxyard-support</code>" in page
    # What AstrBot does when its session ends: it does not reconnect.
    note = re.search(r'data-testid="mcp-astrbot-sessions">(.*?)</p>', page, re.S)
    assert note and "AstrBot does not reconnect when its MCP session ends" in note[1]
    assert "<code>BOXYARD_MCP_SESSION_IDLE_SECONDS</code>" in note[1]


def test_a_new_token_comes_with_its_configuration(admin_client: Client, make_pipeline: Any) -> None:
    make_pipeline(slug="support")
    page = admin_client.post("/pipelines/support/tokens", {"name": "bot"}).content.decode()
    token = re.search(r'data-testid="new-token">([^<]+)<', page)
    assert token
    servers = json.loads(block(page, "mcp-json"))["mcpServers"]
    assert servers["boxyard-support"]["headers"] == {"Authorization": f"Bearer {token[1]}"}


def test_the_section_speaks_the_admins_language(admin_client: Client, make_pipeline: Any) -> None:
    make_pipeline(slug="support")
    admin_client.post("/i18n/setlang/", {"language": "fr", "next": "/"})
    page = admin_client.get("/pipelines/support/").content.decode()
    assert "Connecter un client MCP" in page
    assert "Dans la gestion MCP de LangBot" in page
    assert "ajoutez-en un nommé <code>boxyard-support</code>" in page
    assert "Copier" in page


def test_the_configuration_names_a_url_of_the_servers_own(make_pipeline: Any) -> None:
    pipeline: Pipeline = make_pipeline(slug="support")
    shown = mcp_connection(pipeline, "https://boxyard.example/", "byd_x")
    assert shown.url.startswith("https://boxyard.example/mcp?")
    assert json.loads(shown.mcp_json)["mcpServers"]["boxyard-support"]["headers"] == {
        "Authorization": "Bearer byd_x"
    }
