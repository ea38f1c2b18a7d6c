"""The bot API's pipeline routes."""

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema

from pipelines import selectors, tools
from sandboxes.api.common import ANY, principal, responds

router = Router(tags=["pipelines"])


class ToolsOut(Schema):
    pipeline: str
    system_prompt: str
    openai: list[dict[str, Any]]
    anthropic: list[dict[str, Any]]
    calls: list[dict[str, Any]]


@router.get(
    "/pipelines/{slug}/tools",
    response=responds(ToolsOut, ANY),
    summary="Tool definitions and system prompt for an LLM",
)
def pipeline_tools(request: HttpRequest, slug: str) -> dict[str, Any]:
    pipeline = selectors.pipeline_for(principal(request), slug)
    return tools.tools_document(pipeline)
