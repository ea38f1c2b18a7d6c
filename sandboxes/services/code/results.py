"""A run of code's results, from the lines its interpreter wrote (agent/kernel.py): each
shaped once, here, for every door (REST, MCP, the E2B and Bay APIs, the dashboard).

Shapes: {"type": "stdout"|"stderr", "text"}; {"type": "result", "is_main_result", and each
representation by name: text, html, markdown, svg, png, jpeg, pdf, latex, json, javascript,
chart (a matplotlib figure's data), and `extra` for any other MIME type}; {"type": "error",
"name", "value", "traceback"}; {"type": "restarted", "value"} (the context's interpreter had
ended, and this run started a new one); and, last, {"type": "end", "status",
"execution_count"}."""

import json
from dataclasses import dataclass, field
from typing import Any

CHART_MIME = "application/vnd.boxyard.chart+json"
REPRESENTATIONS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    CHART_MIME: "chart",
}
# Given as base64, which Jupyter may break into lines: every door gets it in one piece.
BINARY = frozenset({"png", "jpeg", "pdf"})
Result = dict[str, Any]


def shaped(line: dict[str, Any]) -> Result | None:
    """One line of the interpreter's as a result (None: not one of ours)."""
    kind = line.get("type")
    if kind in ("stdout", "stderr"):
        return {"type": kind, "text": _text(line.get("text"))}
    if kind == "result":
        data = line.get("data")
        result: Result = {"type": "result", "is_main_result": line.get("main") is True}
        extra: dict[str, Any] = {}
        for mime, value in (data if isinstance(data, dict) else {}).items():
            name = REPRESENTATIONS.get(str(mime))
            if name is None:
                extra[str(mime)] = value
            elif name in ("json", "chart"):
                result[name] = value if isinstance(value, dict | list) else None
            elif name in BINARY:
                result[name] = _text(value).replace("\n", "")  # base64, whole
            else:
                result[name] = _text(value)
        if extra:
            result["extra"] = extra
        return result
    if kind == "error":
        return {
            "type": "error",
            "name": _text(line.get("name")),
            "value": _text(line.get("value")),
            "traceback": _text(line.get("traceback")),
        }
    if kind == "restarted":
        return {"type": "restarted", "value": _text(line.get("value"))}
    if kind == "end":
        count = line.get("count")
        return {
            "type": "end",
            "status": _text(line.get("status")),
            "execution_count": count if isinstance(count, int) else None,
        }
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


class Lines:
    """Results from an interpreter's output as it comes, in chunks that may cut a line."""

    def __init__(self) -> None:
        self._tail = ""

    def feed(self, text: str) -> list[Result]:
        lines = (self._tail + text).split("\n")
        self._tail = lines.pop()
        found = []
        for line in lines:
            if not line.strip():
                continue
            try:
                parsed = json.loads(line)
            except ValueError:
                continue  # cut off by the output's limit: nothing to show of it
            if isinstance(parsed, dict) and (result := shaped(parsed)) is not None:
                found.append(result)
        return found


@dataclass
class CodeOutcome:
    """A run's results in order, and what a caller most often wants of them."""

    results: list[Result] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.results.append(result)

    def of(self, kind: str) -> list[Result]:
        return [result for result in self.results if result["type"] == kind]

    @property
    def displayed_in_order(self) -> list[Result]:
        """Everything but the end, in the order it came: what a page shows."""
        return [result for result in self.results if result["type"] != "end"]

    @property
    def stdout(self) -> str:
        return "".join(result["text"] for result in self.of("stdout"))

    @property
    def stderr(self) -> str:
        return "".join(result["text"] for result in self.of("stderr"))

    @property
    def error(self) -> Result | None:
        errors = self.of("error")
        return errors[-1] if errors else None

    @property
    def displayed(self) -> list[Result]:
        return self.of("result")

    @property
    def main(self) -> Result | None:
        return next((r for r in self.displayed if r.get("is_main_result")), None)

    @property
    def execution_count(self) -> int | None:
        ends = self.of("end")
        return ends[-1]["execution_count"] if ends else None


def outcome_of(output: str) -> CodeOutcome:
    """A finished run's results from its whole kept output."""
    lines = Lines()
    outcome = CodeOutcome(lines.feed(output + "\n"))
    return outcome
