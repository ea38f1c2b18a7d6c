"""Function-calling tool definitions for the bot API, ready for an LLM runtime.

The tools themselves (what each does, its call, its input and output schemas) are
`sandboxes.schemas.tools`, shared with the MCP server; here they are rendered in OpenAI's and
Anthropic's shapes, with the pipeline's system prompt. `calls` says which API call each tool
is (method, path template, which arguments go in the JSON body and which in the query string,
and the schema of the answer), so a runtime can dispatch a tool call without knowing the API.
Path placeholders (`{sandbox_id}`, `{exec_id}`) are filled from the tool's arguments of the
same name.

The runtime adds what the model never gives: the pipeline slug and the chat variables of
`sandbox_open` and `sandbox_run`, and, if it manages leases itself, `holder` and `epoch` on
changing calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandboxes.schemas.tools import ToolSpec, tool_specs

if TYPE_CHECKING:
    from pipelines.models import Pipeline

__all__ = ["ToolSpec", "anthropic_tools", "openai_tools", "system_prompt", "tool_specs"]


def openai_tools() -> list[dict[str, Any]]:
    """Chat Completions `tools`."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in tool_specs()
    ]


def anthropic_tools() -> list[dict[str, Any]]:
    """Messages API `tools`."""
    return [
        {
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.parameters,
        }
        for spec in tool_specs()
    ]


def _kib(size: int) -> str:
    if size >= 1024 * 1024 and size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MiB"
    if size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size / 1024:.1f} KiB"


def _duration(seconds: int) -> str:
    for unit, length in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= length and seconds % length == 0:
            count = seconds // length
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def system_prompt(pipeline: Pipeline) -> str:
    """The pipeline's prompt (or the default one), then the facts of its sandbox profile."""
    from pipelines.models import DEFAULT_SYSTEM_PROMPT, Retention

    base = (pipeline.system_prompt or "").strip() or DEFAULT_SYSTEM_PROMPT
    facts = ["", "Sandbox facts for this bot:"]
    if pipeline.network_enabled:
        facts.append("- Network: enabled; commands can reach the internet.")
    else:
        facts.append("- Network: disabled; downloads and package installs from the internet fail.")
    facts.append(
        f"- Commands time out after {pipeline.exec_timeout_seconds} s by default "
        "(set timeout_seconds for longer ones)."
    )
    facts.append(
        f"- Output beyond {_kib(pipeline.output_limit_bytes)} per stream is truncated; "
        "write large output to a file and read parts of it."
    )
    if pipeline.retention == Retention.PERSISTENT:
        facts.append(
            "- Files in /workspace are kept: after a pause the sandbox is restarted with the "
            "same files."
        )
    else:
        facts.append(
            "- Files in /workspace are kept while this chat is active; the sandbox and its files "
            f"are removed after {_duration(pipeline.idle_timeout_seconds)} without activity."
        )
    skills = list(pipeline.skills.all())
    if skills:
        facts.append("- Skills (read each one's README first):")
        for skill in skills:
            about = _first_line(skill.description)
            facts.append(f"  - /workspace/.skills/{skill.name}/" + (f" - {about}" if about else ""))
    else:
        facts.append("- No skills are installed for this bot.")
    return base + "\n" + "\n".join(facts)


def tools_document(pipeline: Pipeline) -> dict[str, Any]:
    """What `GET /pipelines/{slug}/tools` returns."""
    return {
        "pipeline": pipeline.slug,
        "system_prompt": system_prompt(pipeline),
        "openai": openai_tools(),
        "anthropic": anthropic_tools(),
        "calls": [spec.call() for spec in tool_specs()],
    }
