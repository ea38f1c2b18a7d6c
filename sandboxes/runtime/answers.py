"""Reading what a sandbox's agent answers.

The agent runs inside the sandbox, where the sandbox's own code could tamper with what it
says: every value is checked before use, and anything odd reads as empty (a count as 0, data
as no bytes, a chunk's stream as stdout).
"""

import base64
from typing import Any


def count(value: object) -> int:
    """A non-negative integer, or 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def optional_int(value: object) -> int | None:
    """An integer (an exit code may be negative), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def data(value: object) -> bytes:
    """Bytes the agent sent as base64, or none."""
    if not isinstance(value, str) or not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return b""


def text(value: object) -> str:
    """What `data` gives, as text (invalid UTF-8 replaced)."""
    return data(value).decode("utf-8", errors="replace")


def chunks(value: object) -> list[dict[str, Any]]:
    """Output chunks as the API shows them: {seq, stream, text}."""
    if not isinstance(value, list):
        return []
    return [
        {
            "seq": count(chunk.get("seq")),
            "stream": "stderr" if chunk.get("stream") == "stderr" else "stdout",
            "text": text(chunk.get("data")),
        }
        for chunk in value
        if isinstance(chunk, dict)
    ]
