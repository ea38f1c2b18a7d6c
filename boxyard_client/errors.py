"""Typed errors for the bot API's `{"error": {"code", "message", ...}}` answers.

`error_from_response` is the one place that maps a status and code to a class; both clients
raise what it returns. Transport failures (refused connection, time-out) stay httpx's own
exceptions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx


class BoxyardAPIError(Exception):
    """Any error answer: `status` (HTTP), `code` (stable), `message`, and the extra `details`."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


class BadRequest(BoxyardAPIError):
    """400: the input was refused; `field` names what was wrong (e.g. "variables.launcher_id")."""

    @property
    def field(self) -> str | None:
        return self.details.get("field")


class Unauthorized(BoxyardAPIError):
    """401: no token, or not a valid one."""


class NotFound(BoxyardAPIError):
    """404: unknown, or another pipeline's."""


class Conflict(BoxyardAPIError):
    """409: the call does not fit the sandbox's current state."""


class InvalidState(Conflict):
    """409 invalid_state: e.g. the sandbox is destroyed."""


class _HeldByOther:
    """Mixed into errors that say who holds the lease now."""

    details: dict[str, Any]

    @property
    def holder(self) -> str | None:
        return self.details.get("holder")

    @property
    def expires_at(self) -> datetime | None:
        value = self.details.get("expires_at")
        return datetime.fromisoformat(value) if value else None


class LeaseBusy(_HeldByOther, Conflict):
    """409 lease_busy: another holder has a live lease (`holder`, until `expires_at`)."""


class StaleEpoch(Conflict):
    """409 stale_epoch: the lease moved on since the epoch given; open the sandbox again."""


class PayloadTooLarge(BoxyardAPIError):
    """413: the request or a file is larger than allowed."""


class TakenOver(_HeldByOther, BoxyardAPIError):
    """423: the caller's lease was taken over by `holder`; wait until it is released."""


class QuotaExceeded(BoxyardAPIError):
    """429: too many live sandboxes."""


class WorkspaceFull(BoxyardAPIError):
    """507 workspace_full: the write does not fit in the workspace's disk."""


class ServiceUnavailable(BoxyardAPIError):
    """503: the Docker Engine is unreachable; try again after `retry_after` seconds."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


_BY_STATUS: dict[int, type[BoxyardAPIError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    423: TakenOver,
    429: QuotaExceeded,
    503: ServiceUnavailable,
    507: WorkspaceFull,
}
_BY_CODE: dict[tuple[int, str], type[BoxyardAPIError]] = {
    (409, "lease_busy"): LeaseBusy,
    (409, "stale_epoch"): StaleEpoch,
    (409, "invalid_state"): InvalidState,
}


def error_from_response(response: httpx.Response) -> BoxyardAPIError:
    """The typed error for an answer whose status is 400 or more."""
    status = response.status_code
    try:
        body = response.json()["error"]
        details = {k: v for k, v in body.items() if k not in ("code", "message")}
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):  # not our JSON: a proxy, or a crash
        code, message, details = "http_error", response.text[:500] or response.reason_phrase, {}
    cls = _BY_CODE.get((status, code)) or _BY_STATUS.get(status, BoxyardAPIError)
    if cls is ServiceUnavailable:
        return ServiceUnavailable(
            status, code, message, details, retry_after=_retry_after(response, details)
        )
    return cls(status, code, message, details)


def _retry_after(response: httpx.Response, details: dict[str, Any]) -> float | None:
    for value in (response.headers.get("Retry-After"), details.get("retry_after")):
        if value is None:
            continue
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None
