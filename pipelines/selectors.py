"""Who is calling, which pipelines they may touch, and what the pipeline's page reads."""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import N_, NotFound
from pipelines.models import Pipeline, PipelineToken, hash_token
from sandboxes.models import Event, Sandbox, State

# last_used_at is written at most this often per token, not on every call.
_TOKEN_TOUCH_INTERVAL = timedelta(seconds=30)
# How long a token's pipeline is kept in the process (see principal_for_token), and how many.
PRINCIPAL_CACHE_SECONDS = 2.0
_PRINCIPALS_KEPT = 1000
# token digest -> (monotonic expiry, principal); whole-value reads and writes of a dict are
# atomic, and a lost race only means one more lookup.
_principals: dict[str, tuple[float, "Principal"]] = {}


@dataclass(frozen=True)
class Principal:
    """Who is calling: a pipeline's token (one pipeline) or an admin (every pipeline)."""

    actor: Actor
    pipeline: Pipeline | None  # None: an admin, allowed on every pipeline

    @property
    def is_admin(self) -> bool:
        return self.pipeline is None


def principal_for_token(token: str) -> Principal | None:
    """The pipeline a token acts for, or None for an unknown or revoked token.

    A burst of calls with one token looks it up once: the answer is kept in the process for
    `PRINCIPAL_CACHE_SECONDS`. Saving a token (revoking it) or a pipeline in this process
    forgets every kept answer at once; another process sees the change within that time.
    """
    digest = hash_token(token)
    now = time.monotonic()
    kept = _principals.get(digest)
    if kept is not None and kept[0] > now:
        return kept[1]
    row = PipelineToken.objects.active().select_related("pipeline").filter(digest=digest).first()
    if row is None:
        _principals.pop(digest, None)
        return None
    if row.last_used_at is None or timezone.now() - row.last_used_at > _TOKEN_TOUCH_INTERVAL:
        PipelineToken.objects.filter(pk=row.pk).update(last_used_at=Now())
    # Named by the token's row, not its prefix: other holders see this name in 409s.
    principal = Principal(
        actor=Actor("bot", f"{row.pipeline.slug}/token-{row.pk}"), pipeline=row.pipeline
    )
    if len(_principals) >= _PRINCIPALS_KEPT:
        _principals.clear()
    _principals[digest] = (now + PRINCIPAL_CACHE_SECONDS, principal)
    return principal


def kept_principal(token: str) -> "Principal | None":
    """The pipeline a token acts for as this process knows it now, without a query (None:
    not known, or no longer); see `principal_for_token`."""
    kept = _principals.get(hash_token(token))
    return kept[1] if kept is not None and kept[0] > time.monotonic() else None


def forget_principals(**_: object) -> None:
    """Drop every kept token answer (a token or a pipeline changed)."""
    _principals.clear()


def principal_for_user(user: AbstractBaseUser | AnonymousUser) -> Principal | None:
    if getattr(user, "is_active", False) and getattr(user, "is_staff", False):
        return Principal(actor=Actor.admin(user), pipeline=None)
    return None


def pipeline_for(principal: Principal, slug: str) -> Pipeline:
    if principal.pipeline is not None:
        if principal.pipeline.slug != slug:
            raise NotFound(N_("no pipeline %(slug)r", slug=slug))
        return principal.pipeline
    pipeline = Pipeline.objects.filter(slug=slug).first() if "\x00" not in slug else None
    if pipeline is None:
        raise NotFound(N_("no pipeline %(slug)r", slug=slug))
    return pipeline


# A pipeline's history: its own events, not its sandboxes'.
HISTORY_ACTIONS = ("pipeline.", "token.", "skill.")


def pipeline_history(pipeline: Pipeline, limit: int = 100) -> list[Event]:
    """Who changed what of the pipeline, newest first (its tokens and skills too)."""
    changes = Q()
    for prefix in HISTORY_ACTIONS:
        changes |= Q(action__startswith=prefix)
    return list(Event.objects.filter(changes, pipeline=pipeline, sandbox=None)[:limit])


def live_sandbox_count(pipeline: Pipeline) -> int:
    return Sandbox.objects.filter(pipeline=pipeline).exclude(state=State.DESTROYED).count()
