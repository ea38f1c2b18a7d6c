from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Actor:
    """Who asked for an operation, as events and exec history record it."""

    kind: Literal["bot", "admin", "system"]
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


SYSTEM = Actor("system", "boxyard")
