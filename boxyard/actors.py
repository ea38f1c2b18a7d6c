from dataclasses import dataclass
from typing import Literal, Protocol, cast


class _User(Protocol):
    def get_username(self) -> str: ...


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
    def admin(cls, user: "_User | str") -> "Actor":
        """An administrator (a staff user, or their username): the one way an admin is named,
        so that a lease an admin holds is recognised as theirs wherever they act."""
        return cls("admin", user if isinstance(user, str) else user.get_username())

    @classmethod
    def parse(cls, text: str) -> "Actor":
        """The actor `str(actor)` gave (how tasks carry who asked for them)."""
        kind, _, name = text.partition(":")
        if kind not in _KINDS or not name:
            raise ValueError(f"not an actor: {text!r}")
        return cls(cast(Kind, kind), name)


SYSTEM = Actor("system", "boxyard")
