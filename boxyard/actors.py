from dataclasses import dataclass
from typing import Literal, cast

Kind = Literal["bot", "admin", "system", "command"]
_KINDS = ("bot", "admin", "system", "command")


@dataclass(frozen=True)
class Actor:
    """Who asked for an operation, as events and exec history record it: a bot's token, an
    admin (in the dashboard or the admin site), Boxyard itself, or a management command."""

    kind: Kind
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "Actor":
        """The actor `str(actor)` gave (how tasks carry who asked for them)."""
        kind, _, name = text.partition(":")
        if kind not in _KINDS or not name:
            raise ValueError(f"not an actor: {text!r}")
        return cls(cast(Kind, kind), name)


SYSTEM = Actor("system", "boxyard")
