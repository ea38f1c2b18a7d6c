"""Sandbox scope templates: which chat variables decide who shares a sandbox.

A template is literal text with placeholders. `{launcher_type}_{launcher_id}` gives one
sandbox per chat; `{user_id}:{task_id|conversation_id|uuid}` takes the first variable of
the chain that the request carries, and `uuid` (only last in a chain) makes a fresh key.

Resolution never invents a value: a missing variable is an error naming it, because a
silent placeholder such as "unknown" would put strangers in one sandbox.
"""

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from boxyard.errors import N_, InvalidInput, Message

VARIABLES: tuple[str, ...] = (
    "launcher_type",
    "launcher_id",
    "sender_id",
    "conversation_id",
    "query_id",
    "user_id",
    "task_id",
    "workflow_run_id",
    "session_key",
)
GENERATED = "uuid"
MAX_TEMPLATE_LENGTH = 200
MAX_VALUE_LENGTH = 200
MAX_KEY_LENGTH = 512

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


class TemplateError(ValueError):
    """A template that cannot be saved; `message` names the problem (`str()`: in English)."""

    def __init__(self, message: Message) -> None:
        super().__init__(str(message))
        self.message = message


@dataclass(frozen=True)
class _Literal:
    text: str


@dataclass(frozen=True)
class _Chain:
    names: tuple[str, ...]  # first present wins; may end with GENERATED


def parse(template: str) -> tuple[_Literal | _Chain, ...]:
    """Split a template into literals and placeholder chains, or raise TemplateError."""
    if not template or not template.strip():
        raise TemplateError(N_("the template is empty"))
    if len(template) > MAX_TEMPLATE_LENGTH:
        raise TemplateError(
            N_("the template is longer than %(count)s characters", count=MAX_TEMPLATE_LENGTH)
        )
    parts: list[_Literal | _Chain] = []
    position = 0
    for match in _PLACEHOLDER.finditer(template):
        _literal(template[position : match.start()], parts)
        parts.append(_chain(match.group(1)))
        position = match.end()
    _literal(template[position:], parts)
    if not any(isinstance(part, _Chain) for part in parts):
        raise TemplateError(
            N_(
                "the template names no variable, so every chat would share one sandbox; "
                "use at least one of %(names)s",
                names=", ".join(f"{{{name}}}" for name in VARIABLES),
            )
        )
    return tuple(parts)


def _literal(text: str, parts: list[_Literal | _Chain]) -> None:
    if "{" in text or "}" in text:
        raise TemplateError(N_("unbalanced brace in %(text)r", text=text))
    if text:
        parts.append(_Literal(text))


def _chain(body: str) -> _Chain:
    names = tuple(name.strip() for name in body.split("|"))
    chain = f"{{{body}}}"
    if not all(names):
        raise TemplateError(N_("empty variable name in %(chain)s", chain=chain))
    for index, name in enumerate(names):
        if name == GENERATED:
            if index != len(names) - 1:
                raise TemplateError(
                    N_(
                        "'%(generated)s' must come last in %(chain)s",
                        generated=GENERATED,
                        chain=chain,
                    )
                )
        elif name not in VARIABLES:
            raise TemplateError(
                N_(
                    "unknown variable '%(name)s'; known variables are %(known)s and "
                    "'%(generated)s' at the end of a chain",
                    name=name,
                    known=", ".join(VARIABLES),
                    generated=GENERATED,
                )
            )
    if len(set(names)) != len(names):
        raise TemplateError(N_("a variable repeats in %(chain)s", chain=chain))
    return _Chain(names)


def validate(template: str) -> None:
    parse(template)


def variables_used(template: str) -> set[str]:
    return set(variables_in_order(template))


# The chat variables a caller sends, name to value as JSON has it (a string or an integer;
# `clean_variables` refuses anything else).
Variables = Mapping[str, object]


def variables_in_order(template: str) -> list[str]:
    """The variables a chat may give the template, in its order (not the generated id)."""
    names: list[str] = []
    for part in parse(template):
        if isinstance(part, _Chain):
            names += [name for name in part.names if name != GENERATED and name not in names]
    return names


def clean_variables(variables: Variables | None) -> dict[str, str]:
    """Check the variables a caller sent; keep the known ones as strings.

    Unknown names are ignored (bots send what they have), but a known name with a value
    that is not a string or an integer is refused rather than guessed at: the one check of
    the values, whichever entry point they came through.
    """
    if variables is None:
        return {}
    cleaned: dict[str, str] = {}
    for name in VARIABLES:
        value = variables.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InvalidInput(f"variables.{name}", N_("must be a string or an integer"))
        text = str(value)
        if len(text) > MAX_VALUE_LENGTH:
            raise InvalidInput(
                f"variables.{name}",
                N_("is longer than %(count)s characters", count=MAX_VALUE_LENGTH),
            )
        if text.strip() and not any(ch in text for ch in "\x00\r\n"):
            cleaned[name] = text
        elif text.strip():
            raise InvalidInput(f"variables.{name}", N_("must not contain NUL or line breaks"))
    return cleaned


@dataclass(frozen=True)
class Scope:
    """A request's scope: its key, and the variables it sent (the known ones, cleaned)."""

    key: str
    variables: dict[str, str]


def scope_of(template: str, variables: Variables | None) -> Scope:
    """The key and the cleaned variables of a request, or InvalidInput naming the field."""
    return Scope(key=resolve(template, variables), variables=clean_variables(variables))


def generates(template: str, variables: Variables | None) -> bool:
    """Whether these variables give a new key each time (a part of the template falls back
    to a generated id): each open then makes a sandbox of its own."""
    values = clean_variables(variables)
    for part in parse(template):
        if isinstance(part, _Chain):
            for name in part.names:
                if name == GENERATED:
                    return True
                if name in values:
                    break
    return False


def resolve(template: str, variables: Variables | None) -> str:
    """The scope key for these variables, or InvalidInput naming the missing variable."""
    try:
        parts = parse(template)
    except TemplateError as error:
        raise InvalidInput("scope_template", error.message) from None
    values = clean_variables(variables)
    pieces: list[str] = []
    for part in parts:
        if isinstance(part, _Literal):
            pieces.append(part.text)
            continue
        for name in part.names:
            if name == GENERATED:
                pieces.append(uuid.uuid4().hex)
                break
            if name in values:
                pieces.append(values[name])
                break
        else:
            raise InvalidInput(
                f"variables.{part.names[0]}",
                N_(
                    "the pipeline's sandbox scope needs %(wanted)s, and the request has none",
                    wanted=_either(part.names),
                ),
                missing=list(part.names),
            )
    key = "".join(pieces)
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(
            "variables", N_("the scope key would be longer than %(count)s", count=MAX_KEY_LENGTH)
        )
    return key


def _either(names: tuple[str, ...]) -> str | Message:
    """The names as "a or b or c", the "or" in the reader's language."""
    said: str | Message = names[-1]
    for name in reversed(names[:-1]):
        said = N_("%(name)s or %(rest)s", name=name, rest=said)
    return said
