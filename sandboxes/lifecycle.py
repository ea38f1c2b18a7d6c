"""The states a sandbox passes through, which may follow which, and the one function that
moves a sandbox from one state to the next.

    (new)                             ──create──────────▶ creating
    creating, unknown                 ──start───────────▶ running
    creating, unknown                 ──fail────────────▶ error
    running, unknown                  ──adopt───────────▶ running (its container found again)
    running                           ──lose_container──▶ unknown
    running, unknown                  ──lose────────────▶ stopped (container gone; workspace kept)
    running, unknown, error, stopped  ──restart─────────▶ creating (a new generation)
    running, unknown, error, stopped  ──begin_move──────▶ moving (container removed, workspace carried)
    moving                            ──moved───────────▶ creating (on its new host, a new generation)
    moving                            ──cancel_move─────▶ stopped (still on its old host)
    anything but moving, destroyed    ──begin_stop──────▶ stopping
    stopping                          ──stop────────────▶ stopped
    stopping                          ──destroy─────────▶ destroyed
    stopping                          ──cancel_stop─────▶ where it was

`TRANSITIONS` is the table; `FOLLOWS` is the same table read per state; `allows` answers an
entry point that offers an action (a dashboard button) from the same table. `move` performs one
transition: in one transaction it changes the row only if it is still in a state the
transition starts from and in the generation the caller saw (a conditional update, which also
locks the row), sets the transition's fields, records the event with the actor and the reason,
and has the dashboards told once the transaction commits. A row that moved on meanwhile (another
process was first) is left as it is and `move` says so; the caller's copy is read again either
way. `create` is the entry into the table: the row of a new sandbox, with its free lease.

Services say what should happen (start this sandbox with this container); they never write a
state, a generation or a lifecycle event themselves.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Now

from boxyard.actors import Actor
from hosts.models import DockerHost
from pipelines.models import Pipeline
from sandboxes import events, metrics
from sandboxes.models import Lease, Sandbox, State, StopReason


@dataclass(frozen=True)
class Transition:
    name: str
    sources: frozenset[State]
    targets: frozenset[State]  # one state, but for cancel_stop (back where it was)
    action: str  # the event it records

    def __str__(self) -> str:
        return self.name


def _t(name: str, sources: set[State], targets: set[State], action: str) -> Transition:
    return Transition(name, frozenset(sources), frozenset(targets), action)


_LIVE: set[State] = {s for s in State if s != State.DESTROYED}
# A move carries the workspace with no lock held: nothing stops the sandbox meanwhile (its
# mover ends the move either way, the reconciler one its mover left).
_STOPPABLE = _LIVE - {State.STOPPING, State.MOVING}
_MOVABLE = {State.RUNNING, State.UNKNOWN, State.ERROR, State.STOPPED}

START = _t("start", {State.CREATING, State.UNKNOWN}, {State.RUNNING}, "sandbox.started")
FAIL = _t("fail", {State.CREATING, State.UNKNOWN}, {State.ERROR}, "sandbox.error")
RESTART = _t(
    "restart",
    {State.RUNNING, State.UNKNOWN, State.ERROR, State.STOPPED},
    {State.CREATING},
    "sandbox.restarting",
)
ADOPT = _t("adopt", {State.RUNNING, State.UNKNOWN}, {State.RUNNING}, "sandbox.adopted")
LOSE_CONTAINER = _t("lose_container", {State.RUNNING}, {State.UNKNOWN}, "sandbox.container_lost")
LOSE = _t("lose", {State.RUNNING, State.UNKNOWN}, {State.STOPPED}, "sandbox.stopped")
BEGIN_STOP = _t("begin_stop", _LIVE - {State.MOVING}, {State.STOPPING}, "sandbox.stopping")
BEGIN_MOVE = _t("begin_move", _MOVABLE, {State.MOVING}, "sandbox.moving")
MOVED = _t("moved", {State.MOVING}, {State.CREATING}, "sandbox.moved")
CANCEL_MOVE = _t("cancel_move", {State.MOVING}, {State.STOPPED}, "sandbox.move_failed")
STOP = _t("stop", {State.STOPPING}, {State.STOPPED}, "sandbox.stopped")
DESTROY = _t("destroy", {State.STOPPING}, {State.DESTROYED}, "sandbox.destroyed")
CANCEL_STOP = _t("cancel_stop", {State.STOPPING}, _STOPPABLE, "sandbox.stop_failed")

TRANSITIONS = (
    START, FAIL, RESTART, ADOPT, LOSE_CONTAINER, LOSE, BEGIN_STOP, STOP, DESTROY, CANCEL_STOP,
    BEGIN_MOVE, MOVED, CANCEL_MOVE,
)  # fmt: skip
# Which states may follow each state (what `create` makes, `creating`, follows no state).
FOLLOWS: dict[State, frozenset[State]] = {
    state: frozenset(target for t in TRANSITIONS if state in t.sources for target in t.targets)
    for state in State
}
# A stop ends here: the container is gone, the workspace kept or deleted, the lease free.
_ENDS = {STOP, DESTROY, LOSE}


def allows(sandbox: Sandbox, transition: Transition) -> bool:
    """Whether the table lets `transition` start from the state of this copy of the row: what
    an entry point may offer. Only an offer: `move` decides again, on the row as it is then."""
    return sandbox.state in transition.sources


def allowing(sandboxes: QuerySet[Sandbox], transition: Transition) -> QuerySet[Sandbox]:
    """The rows of `sandboxes` whose state the table lets `transition` start from: `allows`
    for many rows at once (what a page counts before it offers a bulk action, what the bulk
    action then takes). Only an offer too: `move` decides again for each."""
    return sandboxes.filter(state__in=transition.sources)


def move(
    sandbox: Sandbox,
    transition: Transition,
    actor: Actor,
    *,
    to: State | None = None,
    reason: str = "",
    container_id: str | None = None,
    fields: Mapping[str, Any] | None = None,
    detail: Mapping[str, Any] | None = None,
) -> bool:
    """Perform `transition` on the sandbox; True when this call made the change.

    The row changes only while it is in one of the transition's source states, in the
    sandbox's generation as the caller has it, and (with `container_id`) while that container
    is still the row's: what is known of an older container says nothing of its successor.
    `to` picks the target of a transition with several (cancel_stop). `fields` are the
    transition's own (expressions welcome); `detail` goes into the event. Safe inside the
    caller's transaction (with the row locked or not) and outside one.
    """
    target = to or next(iter(transition.targets))
    if target not in transition.targets or (to is None and len(transition.targets) > 1):
        raise ValueError(f"{transition} goes to {sorted(transition.targets)}, not {to}")
    rows = Sandbox.objects.filter(
        pk=sandbox.pk, generation=sandbox.generation, state__in=transition.sources
    )
    if container_id is not None:
        rows = rows.filter(container_id=container_id)
    values = {**_fields_of(transition, sandbox, reason), **(fields or {})}
    if transition in (RESTART, MOVED):
        detail = {
            "previous_state": sandbox.state,
            "generation": sandbox.generation + 1,
            **(detail or {}),
        }
    with transaction.atomic():
        moved = rows.update(state=target, updated_at=Now(), **values) == 1
        if moved:
            if transition in _ENDS:
                Lease.objects.filter(sandbox_id=sandbox.pk).update(
                    holder="", acquired_by="", expires_at=None, taken_over_from="", taken_over=False
                )
            sandbox.refresh_from_db()
            events.record(
                actor, transition.action, sandbox=sandbox, reason=reason, **(detail or {})
            )
    if not moved:
        try:
            sandbox.refresh_from_db()  # where the row is now, for the caller
        except Sandbox.DoesNotExist:
            pass  # deleted with its pipeline: nothing of it moves any more
    elif transition in _ENDS:
        slug = sandbox.pipeline.slug
        metrics.count("boxyard_sandboxes_cleaned_total", slug, sandbox.stop_reason)
    return moved


def _fields_of(transition: Transition, sandbox: Sandbox, reason: str) -> dict[str, Any]:
    """What a transition always sets, whoever asks for it."""
    if transition is START:
        pipeline = sandbox.pipeline
        return {
            "started_at": Now(),
            "last_activity_at": Now(),
            "idle_deadline": Now() + timedelta(seconds=pipeline.idle_timeout_seconds),
            # The time to live counts from the start of this run of the sandbox.
            "expires_at": Now() + timedelta(seconds=pipeline.ttl_seconds),
            "status_detail": "",
            "stop_reason": "",
        }
    if transition is FAIL:
        return {"status_detail": reason[:2000], "stop_reason": StopReason.ERROR}
    if transition in (RESTART, MOVED):
        generation = sandbox.generation + 1
        return {
            "generation": F("generation") + 1,
            "container_id": "",
            "container_name": container_name(sandbox, generation),
            "stop_reason": "",
            "status_detail": "",
            "stopped_at": None,
            "destroy_requested": False,
        }
    if transition in (ADOPT, LOSE_CONTAINER):
        # What went wrong with the container, or (adopted: found running again) nothing.
        return {"status_detail": reason[:2000] if transition is LOSE_CONTAINER else ""}
    if transition is BEGIN_STOP:
        return {"stop_reason": reason}
    if transition in _ENDS:
        ended = {"stopped_at": Now(), "container_id": "", "pooled": False}
        if transition is DESTROY:
            ended["destroyed_at"] = Now()
        if transition is LOSE:
            ended["stop_reason"] = StopReason.LOST
        return ended
    if transition is CANCEL_STOP:
        return {"stop_reason": "", "destroy_requested": False}
    if transition is BEGIN_MOVE:
        return {"container_id": "", "status_detail": ""}
    if transition is CANCEL_MOVE:
        return {"stopped_at": Now(), "status_detail": reason[:2000]}
    return {}


def create(
    pipeline: Pipeline,
    host: DockerHost,
    scope_key: str,
    variables: dict[str, str],
    actor: Actor,
    *,
    retention: str,
    profile: str,
    pooled: bool = False,
    detail: Mapping[str, Any] | None = None,
) -> Sandbox:
    """The row of a new sandbox (state creating) with its free lease, named for its first
    container. Call inside a transaction; raises IntegrityError when the scope key already has
    a live sandbox (after rolling back only its own savepoint)."""
    with transaction.atomic():  # a savepoint: losing the race must not spoil the outer one
        sandbox = Sandbox.objects.create(
            pipeline=pipeline,
            host=host,
            scope_key=scope_key,
            variables=variables,
            retention=retention,
            image=pipeline.effective_image,
            state=State.CREATING,
            pooled=pooled,
            profile=profile,
        )
    Sandbox.objects.filter(pk=sandbox.pk).update(
        volume_name=volume_name(sandbox),
        container_name=container_name(sandbox, sandbox.generation),
        expires_at=Now() + timedelta(seconds=pipeline.ttl_seconds),
    )
    sandbox.refresh_from_db()
    Lease.objects.create(sandbox=sandbox)
    events.record(actor, "sandbox.created", sandbox=sandbox, scope_key=scope_key, **(detail or {}))
    metrics.count("boxyard_sandboxes_created_total", pipeline.slug)
    return sandbox


# --- names -------------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def container_name(sandbox: Sandbox, generation: int) -> str:
    """`by-<pipeline>-<readable key>-<sandbox id>-g<generation>`: deterministic, so every
    concurrent opener of a sandbox converges on one container (the engine refuses a second of
    the name and the loser adopts the winner's), and a container of an older generation is
    recognisably stale. The readable parts are only for people reading `docker ps`; the id
    makes it unique whatever the key sanitizes to ("a/b" and "a_b" get different sandboxes)."""
    return f"by-{_readable(sandbox.pipeline.slug, 24)}-{_readable(sandbox.scope_key, 32)}-{sandbox.id.hex}-g{generation}"


def volume_name(sandbox: Sandbox) -> str:
    return f"{VOLUME_PREFIX}{sandbox.id.hex}"


VOLUME_PREFIX = "by-ws-"


def _readable(text: str, length: int) -> str:
    return _UNSAFE.sub("-", text).strip("-.")[:length].strip("-.") or "x"
