"""`Idempotency-Key`: a call made again with the same key and the same request gets the first
answer again, without running twice; the same key with another request is refused (409).

A key is kept `BOXYARD_BAY_IDEMPOTENCY_SECONDS`, and a pipeline holds at most
`BOXYARD_BAY_IDEMPOTENCY_KEYS` at once (429 past it, until the oldest lapse). Only an answer
that succeeded is kept: a refused call may be tried again with the same key. While the first
call runs, the same key is refused (409), so two retries racing each other run it once.
"""

import functools
import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from boxyard.errors import N_, Conflict, InvalidInput, QuotaExceeded
from pipelines.models import Pipeline
from sandboxes.bay.api import bay, principal
from sandboxes.bay.models import IdempotentCall

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200


def idempotent(view: Callable[..., Any]) -> Callable[..., Any]:
    """A Bay route that honours `Idempotency-Key` (the view answers a dict, or a response)."""

    @functools.wraps(view)
    def honouring(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        key = request.headers.get(HEADER)
        if key is None:
            return view(request, *args, **kwargs)
        pipeline = principal(request).pipeline
        assert pipeline is not None
        asked = _fingerprint(request)
        replayed = _claim(pipeline, _clean(key), asked)
        if replayed is not None:
            return replayed
        try:
            answer = view(request, *args, **kwargs)
        except BaseException:
            _forget(pipeline, key)
            raise
        _keep(pipeline, key, answer)
        return answer

    return honouring


def _clean(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidInput(
            HEADER, f"must be 1 to {MAX_KEY_LENGTH} printable characters (got {len(key)})"
        )
    return key


def _fingerprint(request: HttpRequest) -> str:
    digest = hashlib.sha256(f"{request.method} {request.path}\n".encode())
    digest.update(request.body)
    return digest.hexdigest()


def _claim(pipeline: Pipeline, key: str, asked: str) -> HttpResponse | None:
    """The kept answer of this key (None: the call is this one's to make, and the key is
    taken for it), or a refusal."""
    now = timezone.now()
    lapsed = now - timedelta(seconds=settings.BOXYARD_BAY_IDEMPOTENCY_SECONDS)
    with transaction.atomic():
        Pipeline.objects.select_for_update(no_key=True).filter(pk=pipeline.pk).first()
        kept = IdempotentCall.objects.filter(pipeline=pipeline, key=key).first()
        if kept is not None and kept.created_at <= lapsed:
            kept.delete()
            kept = None
        if kept is not None:
            if kept.request != asked:
                raise Conflict(
                    f"Idempotency-Key {key!r} was used for another request; use a new key",
                    field=HEADER,
                )
            if kept.status == 0:
                raise Conflict(
                    f"the request with Idempotency-Key {key!r} is still being answered; try again "
                    "in a moment",
                    field=HEADER,
                )
            return _replay(kept)
        IdempotentCall.objects.filter(pipeline=pipeline, created_at__lte=lapsed).delete()
        held = IdempotentCall.objects.filter(pipeline=pipeline).count()
        if held >= settings.BOXYARD_BAY_IDEMPOTENCY_KEYS:
            raise QuotaExceeded(
                N_(
                    "pipeline %(pipeline)s holds %(count)s idempotency keys, its maximum "
                    "(BOXYARD_BAY_IDEMPOTENCY_KEYS); they lapse after %(seconds)s s",
                    pipeline=pipeline.slug,
                    count=held,
                    seconds=settings.BOXYARD_BAY_IDEMPOTENCY_SECONDS,
                ),
                limit=settings.BOXYARD_BAY_IDEMPOTENCY_KEYS,
            )
        try:
            with transaction.atomic():
                IdempotentCall.objects.create(pipeline=pipeline, key=key, request=asked)
        except IntegrityError:  # another process took the key a moment ago
            raise Conflict(
                f"the request with Idempotency-Key {key!r} is still being answered", field=HEADER
            ) from None
    return None


def _replay(kept: IdempotentCall) -> HttpResponse:
    response = HttpResponse(
        json.dumps(kept.answer), status=kept.status, content_type="application/json"
    )
    response["Idempotent-Replayed"] = "true"
    return response


def _keep(pipeline: Pipeline, key: str, answer: Any) -> None:
    """Keep an answer that succeeded; forget the key of one that did not."""
    status, body = 200, answer
    if isinstance(answer, HttpResponse):
        status = answer.status_code
        body = json.loads(answer.content) if 200 <= status < 300 and answer.content else {}
    if not 200 <= status < 300:
        _forget(pipeline, key)
        return
    shown = json.loads(bay.renderer.render(None, body, response_status=status))  # type: ignore[arg-type]  # the renderer reads nothing of the request
    IdempotentCall.objects.filter(pipeline=pipeline, key=key).update(status=status, answer=shown)


def _forget(pipeline: Pipeline, key: str) -> None:
    IdempotentCall.objects.filter(pipeline=pipeline, key=key, status=0).delete()
