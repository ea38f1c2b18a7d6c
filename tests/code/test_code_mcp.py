"""The code interpreter as an MCP tool: the official `mcp` client calls `sandbox_run_code` on a
served Boxyard, and a chart the code draws comes back as an image the model can see, beside
the answer's JSON."""

import base64
import json
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.code.conftest import Coder
from tests.code.test_code_api import png_size
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

CHART = (
    "import matplotlib.pyplot as plt\n"
    "fig = plt.figure(figsize=(4, 3), dpi=100)\n"
    "plt.plot([1, 2, 3], [4, 5, 6])\nplt.title('Sales');"
)


async def call(coder: Coder, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    http = httpx2.AsyncClient(headers=coder.headers, timeout=httpx2.Timeout(30, read=300))
    url = f"{coder.url}/mcp?{urlencode(CHAT)}"
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        return await client.call_tool(name, arguments)


def test_a_chart_comes_back_as_an_image_beside_the_json(coder: Coder) -> None:
    result = anyio.run(call, coder, "sandbox_run_code", {"code": CHART})
    assert not result.is_error, result.content
    text, *images = result.content
    assert isinstance(text, types.TextContent)
    answer = json.loads(text.text)
    assert answer == result.structured_content and answer["ok"] is True
    [image] = images
    assert isinstance(image, types.ImageContent) and image.mime_type == "image/png"
    assert png_size(image.data) == (400, 300)
    [figure] = [r for r in answer["results"] if r["type"] == "result"]
    # The same picture the JSON holds, as strict base64 (no line breaks).
    assert base64.b64decode(image.data, validate=True) == base64.b64decode(figure["png"])


def test_a_run_without_an_image_is_its_json_alone(coder: Coder) -> None:
    result = anyio.run(call, coder, "sandbox_run_code", {"code": "print('no chart')\n6 * 7"})
    assert not result.is_error, result.content
    [text] = result.content
    assert isinstance(text, types.TextContent) and json.loads(text.text)["text"] == "42"
