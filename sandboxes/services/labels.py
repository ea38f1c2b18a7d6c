"""What a caller says of its sandbox besides its chat: labels to find it again by (metadata)
and the environment of its containers. Each is a change under the guard, and an event. How
long it may live is `lifetimes`."""

import re
from collections.abc import Mapping

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput
from sandboxes import events
from sandboxes.guard import LIVE, acting_on
from sandboxes.models import Sandbox

MAX_LABELS = 64
MAX_LABEL_LENGTH = 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def clean_labels(values: object, field: str) -> dict[str, str]:
    """Text names to text values, at most `MAX_LABELS` of them; InvalidInput naming `field`."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise InvalidInput(field, N_("must be an object of text values"))
    if len(values) > MAX_LABELS:
        raise InvalidInput(field, N_("at most %(count)s entries", count=MAX_LABELS))
    cleaned: dict[str, str] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidInput(f"{field}.{name}", N_("must be a string"))
        if not name or len(name) > MAX_LABEL_LENGTH or len(value) > MAX_LABEL_LENGTH:
            raise InvalidInput(
                f"{field}.{name}",
                N_("names and values are 1 to %(count)s characters", count=MAX_LABEL_LENGTH),
            )
        if "\x00" in name or "\x00" in value:
            raise InvalidInput(f"{field}.{name}", N_("must not contain NUL characters"))
        cleaned[name] = value
    return cleaned


def clean_environment(values: object, field: str) -> dict[str, str]:
    cleaned = clean_labels(values, field)
    for name in cleaned:
        if not _ENV_NAME.fullmatch(name):
            raise InvalidInput(
                f"{field}.{name}", N_("is not a variable name (letters, digits and _)")
            )
    return cleaned


def label_sandbox(
    sandbox: Sandbox,
    actor: Actor,
    *,
    metadata: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    holder: str | None = None,
    epoch: int | None = None,
) -> Sandbox:
    """Add these labels (`metadata`) and environment to the sandbox's own (a name given again
    takes the new value). The environment is its containers': the next one made for it (a
    new sandbox's first, or a stopped one's when it starts again) has it. Nothing given,
    nothing changes (no lease taken, no event)."""
    labels = clean_labels(metadata, "metadata")
    environment = clean_environment(env, "env")
    if not labels and not environment:
        return sandbox
    with acting_on(
        sandbox, actor, N_("label the sandbox"), holder=holder, epoch=epoch, states=LIVE
    ) as acting:
        locked = acting.sandbox
        new_labels = {**(locked.metadata or {}), **labels}
        new_env = {**(locked.env or {}), **environment}
        if new_labels == locked.metadata and new_env == locked.env:
            return locked
        locked.metadata, locked.env = new_labels, new_env
        locked.save(update_fields=["metadata", "env", "updated_at"])
        # The environment's values may be secrets: the history names them only.
        events.record(
            actor, "sandbox.labelled", sandbox=locked, metadata=labels, env=sorted(environment)
        )
    return locked
