"""Pipelines: create, change and delete them, issue and revoke their API tokens, add, change
and remove their skills. One function per operation, used by the dashboard, the Django admin
and the `create_pipeline` command alike; each change is checked by the model's own rules
(operator maximums, the image allowlist, skill roots) and recorded as an event with its actor
and what changed, which the pipeline's page shows as its history.
"""

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Model
from django.utils import translation
from django.utils.functional import lazy

from boxyard.actors import Actor
from boxyard.errors import N_, Conflict, InvalidInput, Message
from pipelines.models import TOKEN_SHAPES, Pipeline, PipelineToken, Skill
from sandboxes import events
from sandboxes.models import Sandbox, State, StopReason
from sandboxes.services import close_sandbox
from sandboxes.services.pool import refill_later


def create_pipeline(pipeline: Pipeline, actor: Actor, *, via: str = "") -> Pipeline:
    """Save a new pipeline (an unsaved instance with the fields given)."""
    _check(pipeline)
    with transaction.atomic():
        pipeline.save()
        _record(actor, "pipeline.created", pipeline, via, slug=pipeline.slug)
        refill_later()
    return pipeline


def update_pipeline(
    pipeline: Pipeline, actor: Actor, values: Mapping[str, Any], *, via: str = ""
) -> Pipeline:
    """Change these fields of the pipeline; what changed (before and after) is the event's
    detail. Its warm pool is refilled at once: pooled sandboxes of the old profile go."""
    with transaction.atomic():
        current = Pipeline.objects.select_for_update().get(pk=pipeline.pk)
        changes = _apply(current, values)
        _check(current)
        if not changes:
            return current
        current.save()
        _record(actor, "pipeline.changed", current, via, changes=changes)
        refill_later()
    return current


def delete_pipeline(
    pipeline: Pipeline, actor: Actor, *, close_sandboxes: bool = False, via: str = ""
) -> int:
    """Delete the pipeline with its tokens, skills and the rows of its destroyed sandboxes;
    returns how many live sandboxes were closed (destroyed, workspaces deleted) first.

    Refused (Conflict, with how many) while it has live sandboxes, unless `close_sandboxes`."""
    live = list(
        Sandbox.objects.select_related("pipeline")
        .filter(pipeline=pipeline)
        .exclude(state=State.DESTROYED)
    )
    if live and not close_sandboxes:
        raise Conflict(
            N_(
                "pipeline %(pipeline)s has %(count)s live sandboxes; close them first, or "
                "delete it with its sandboxes",
                pipeline=pipeline.slug,
                count=len(live),
            ),
            sandboxes=len(live),
        )
    for sandbox in live:
        close_sandbox(sandbox, actor, delete_workspace=True, reason=StopReason.ADMIN, force=True)
    with transaction.atomic():
        _record(actor, "pipeline.deleted", None, via, slug=pipeline.slug, closed=len(live))
        Sandbox.objects.filter(pipeline=pipeline).delete()
        pipeline.delete()
        refill_later()
    return len(live)


# --- tokens ---------------------------------------------------------------------------------------


def issue_token(
    pipeline: Pipeline, actor: Actor, name: str = "", *, shape: str = "boxyard", via: str = ""
) -> tuple[PipelineToken, str]:
    """A new API token; returns its row and its plaintext, shown once and never stored.
    `shape` spells it as Boxyard's (`byd_…`) or as an E2B API key (`e2b_<40 hex>`)."""
    if not isinstance(name, str) or len(name) > 100:
        raise InvalidInput("name", N_("must be at most %(count)s characters", count=100))
    if shape not in TOKEN_SHAPES:
        raise InvalidInput(
            "shape", N_("must be one of %(choices)s", choices=", ".join(TOKEN_SHAPES))
        )
    with transaction.atomic():
        token, plaintext = PipelineToken.issue(pipeline, name=name, shape=shape)
        _record(
            actor, "token.issued", pipeline, via, token=token.pk, prefix=token.prefix, name=name,
            shape=shape,
        )  # fmt: skip
    return token, plaintext


def revoke_token(token: PipelineToken, actor: Actor, *, via: str = "") -> None:
    """The token stops working at once (in every process within a few seconds); revoking it
    again changes nothing."""
    with transaction.atomic():
        current = PipelineToken.objects.select_for_update().get(pk=token.pk)
        if current.revoked_at is not None:
            return
        current.revoke()
        _record(
            actor, "token.revoked", token.pipeline, via, token=current.pk, prefix=current.prefix
        )
    token.revoked_at = current.revoked_at


# --- skills ---------------------------------------------------------------------------------------


def add_skill(skill: Skill, actor: Actor, *, via: str = "") -> Skill:
    """Mount a host directory into every new sandbox of its pipeline (an unsaved instance)."""
    pipeline = skill.pipeline
    _check(skill, constraints=False)  # one name per pipeline: the database says, below
    try:
        with transaction.atomic():
            skill.save()
            _record(
                actor, "skill.added", pipeline, via, skill=skill.name, host_path=skill.host_path,
                mode=skill.mode,
            )  # fmt: skip
            refill_later()
    except IntegrityError:
        raise Conflict(
            N_(
                "pipeline %(pipeline)s already has a skill %(name)r",
                pipeline=pipeline.slug,
                name=skill.name,
            )
        ) from None
    return skill


def change_skill(skill: Skill, actor: Actor, values: Mapping[str, Any], *, via: str = "") -> Skill:
    try:
        with transaction.atomic():
            current = Skill.objects.select_for_update().get(pk=skill.pk)
            changes = _apply(current, values)
            _check(current, constraints=False)
            if changes:
                current.save()
                _record(
                    actor, "skill.changed", current.pipeline, via, skill=current.name,
                    changes=changes,
                )  # fmt: skip
                refill_later()
    except IntegrityError:
        raise Conflict(
            N_(
                "pipeline %(pipeline)s already has a skill %(name)r",
                pipeline=skill.pipeline.slug,
                name=values.get("name"),
            )
        ) from None
    return current


def remove_skill(skill: Skill, actor: Actor, *, via: str = "") -> None:
    """New sandboxes of the pipeline no longer get it (running ones keep their mount)."""
    with transaction.atomic():
        pipeline, name = skill.pipeline, skill.name
        skill.delete()
        _record(actor, "skill.removed", pipeline, via, skill=name)
        refill_later()


# --- shared -----------------------------------------------------------------------------------------


def _apply(instance: Model, values: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Set the values on the instance; what changed, as field → [before, after]."""
    changes = {}
    for name, value in values.items():
        before = getattr(instance, name)
        if before != value:
            changes[name] = [_shown(before), _shown(value)]
            setattr(instance, name, value)
    return changes


def _shown(value: object) -> object:
    """A value as an event's detail (JSON) can hold it."""
    return (
        value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)
    )


def _check(instance: Model, *, constraints: bool = True) -> None:
    """The model's own rules; their first refusal as InvalidInput naming the field, all of
    them in `errors`. Without `constraints`, the caller relies on the database's (and says
    which name is taken). The model says them in the active language (its form shows them):
    the error's message and `errors` are the English, its localized text the reader's."""
    try:
        instance.full_clean(validate_constraints=constraints)
    except ValidationError as error:
        with translation.override(None):
            found = {name: " ".join(said) for name, said in error.message_dict.items()}
        field = next(iter(found))
        words = Message("%(words)s", words=_said_lazily(error, field))
        raise InvalidInput(field, words, errors=found) from None


def _said(error: ValidationError, field: str) -> str:
    return " ".join(error.message_dict[field])


_said_lazily = lazy(_said, str)  # in the language active when it is shown


def _record(actor: Actor, action: str, pipeline: Pipeline | None, via: str, **detail: Any) -> None:
    if via:
        detail["via"] = via
    events.record(actor, action, pipeline_id=pipeline.pk if pipeline else None, **detail)
