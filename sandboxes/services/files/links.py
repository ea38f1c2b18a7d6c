"""Signed links: a URL that downloads (GET) or uploads (PUT) one file of one sandbox without
the pipeline's token, until it expires, so a bot can hand a chat user a file or a place to
put one.

A link is the sandbox, its generation, the path, the method, the lease it was made under
and its expiry, sealed (`boxyard.sealed`: encrypted and authenticated with a key derived from
SECRET_KEY, which only the server holds), so that its holder learns nothing from it, not even
the sandbox or the path. Nothing is stored: a changed byte breaks the seal (403), a link past
its expiry is refused (403), a link of a sandbox destroyed since is 404, and one whose sandbox
was closed since (stopped, or started again as a new generation) is 403. An upload link acts
under the lease it was made under, so a takeover fences it off like any other writer, and its
use is an event. A download (GET or HEAD) writes no row and is not the bot's activity (anyone
holding the link may repeat it at will): it is counted, per pipeline, in the metric
`boxyard_link_reads_total`.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from boxyard.actors import Actor
from boxyard.errors import N_, InvalidInput, LinkRefused, NotFound
from boxyard.sealed import Unsealable, seal, unseal
from sandboxes import events, metrics
from sandboxes.guard import acting_on, require_running
from sandboxes.models import Sandbox, State
from sandboxes.services.files.paths import workspace_path

_PURPOSE = "boxyard.files.link"
# A download link, or an upload link.
LinkMethod = Literal["GET", "PUT"]


@dataclass(frozen=True)
class Link:
    token: str
    path: str
    method: str
    expires_at: datetime


@dataclass(frozen=True)
class UsedLink:
    """A link that holds: its sandbox (running, the link's generation), path and method, and
    the holder and epoch an upload acts under."""

    sandbox: Sandbox
    path: str
    method: str
    holder: str
    epoch: int
    actor: Actor


def create_link(
    sandbox: Sandbox,
    path: str,
    actor: Actor,
    *,
    method: LinkMethod = "GET",
    expires_in_seconds: int | None = None,
    holder: str | None = None,
    epoch: int | None = None,
) -> Link:
    """A link to `path` for `method`; an upload link needs the lease, as an upload does."""
    target, seconds = clean_link(path, expires_in_seconds)
    with acting_on(
        sandbox, actor, N_("make a link"), holder=holder, epoch=epoch, hold_lease=method == "PUT"
    ) as acting:
        sandbox = acting.sandbox
        holder_now = acting.holder
        epoch_now = acting.lease.epoch if acting.lease is not None else 0
    expires_at = timezone.now() + timedelta(seconds=seconds)
    token = seal(
        {
            "s": str(sandbox.pk),
            "g": sandbox.generation,
            "p": target,
            "m": method,
            "h": holder_now,
            "e": epoch_now,
            "x": int(expires_at.timestamp()),
        },
        _PURPOSE,
    )
    with transaction.atomic():
        events.record(
            actor,
            "file.link_created",
            sandbox=sandbox,
            path=target,
            method=method,
            expires_at=expires_at.isoformat(),
        )
    return Link(token=token, path=target, method=method, expires_at=expires_at)


def link_methods(token: str) -> tuple[str, ...]:
    """The HTTP methods a link takes (a download link's GET and HEAD, an upload link's PUT);
    all three when the token is not one of Boxyard's links, which its use then refuses."""
    try:
        claims: dict[str, Any] = unseal(token, _PURPOSE)
    except Unsealable:
        return ("GET", "HEAD", "PUT")
    return ("PUT",) if claims.get("m") == "PUT" else ("GET", "HEAD")


def use_link(token: str, method: str) -> UsedLink:
    """The link's sandbox and path if the link holds for `method` (HEAD goes with GET); an
    upload is an event, a download is counted."""
    try:
        claims: dict[str, Any] = unseal(token, _PURPOSE)
    except Unsealable:
        raise LinkRefused(
            N_("this link is not valid (it was changed or is not Boxyard's)")
        ) from None
    wanted = "GET" if method == "HEAD" else method
    if claims.get("m") != wanted:
        raise LinkRefused(
            N_("this link is for %(wanted)s, not %(method)s", wanted=claims.get("m"), method=method)
        )
    expires_at = datetime.fromtimestamp(int(claims["x"]), tz=UTC)
    if timezone.now() >= expires_at:
        raise LinkRefused(N_("this link expired at %(when)s", when=expires_at.isoformat()))
    sandbox = Sandbox.objects.select_related("pipeline").filter(pk=claims["s"]).first()
    if sandbox is None or sandbox.state == State.DESTROYED:
        raise NotFound(N_("the sandbox of this link no longer exists"))
    if sandbox.generation != claims["g"] or sandbox.state != State.RUNNING:
        raise LinkRefused(N_("the sandbox of this link has been closed since it was made"))
    require_running(sandbox, N_("use a link"))
    actor = Actor("bot", f"link:{claims['h']}")
    if wanted == "GET":
        metrics.count("boxyard_link_reads_total", sandbox.pipeline.slug)
    else:
        with transaction.atomic():
            events.record(actor, "file.link_used", sandbox=sandbox, path=claims["p"], method=method)
    return UsedLink(
        sandbox=sandbox,
        path=claims["p"],
        method=wanted,
        holder=claims["h"],
        epoch=int(claims["e"]),
        actor=actor,
    )


def clean_link(path: str, expires_in_seconds: int | None) -> tuple[str, int]:
    """A link's path and lifetime in seconds, or InvalidInput naming what is wrong (nothing
    of the sandbox is needed to tell)."""
    return workspace_path(path), _clean_expiry(expires_in_seconds)


def _clean_expiry(value: int | None) -> int:
    """The operator's ceiling, BOXYARD_FILE_LINK_MAX_SECONDS, holds for every caller."""
    ceiling = settings.BOXYARD_FILE_LINK_MAX_SECONDS
    if value is None:
        return min(3600, ceiling)
    if value < 1:
        raise InvalidInput("expires_in_seconds", N_("must be a positive whole number of seconds"))
    if value > ceiling:
        raise InvalidInput(
            "expires_in_seconds",
            N_("must be at most %(most)s (BOXYARD_FILE_LINK_MAX_SECONDS)", most=ceiling),
        )
    return value
