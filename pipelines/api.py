"""The bot API's pipeline routes."""

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.responses import codes_4xx, codes_5xx

from pipelines import selectors, tools
from sandboxes.api.common import principal
from sandboxes.schemas import ErrorOut

router = Router(tags=["pipelines"])


class ToolsOut(Schema):
    pipeline: str
    system_prompt: str
    openai: list[dict[str, Any]]
    anthropic: list[dict[str, Any]]
    calls: list[dict[str, Any]]


@router.get(
    "/pipelines/{slug}/tools",
    response={200: ToolsOut, codes_4xx: ErrorOut, codes_5xx: ErrorOut},
    summary="Tool definitions and system prompt for an LLM",
)
def pipeline_tools(request: HttpRequest, slug: str) -> dict[str, Any]:
    pipeline = selectors.pipeline_for(principal(request), slug)
    return tools.tools_document(pipeline)
