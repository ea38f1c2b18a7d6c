"""The one exception tree every service raises.

Each error carries a stable `code`, an HTTP `status` and extra fields for the caller; the
API maps them to `{"error": {code, message, ...}}` in one place, the dashboard shows the
message. Nothing a caller sent may surface as anything but one of these.
"""

from datetime import datetime
from typing import Any


class BoxyardError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def as_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"code": self.code, "message": self.message}
        for key, value in self.extra.items():
            payload[key] = value.isoformat() if isinstance(value, datetime) else value
        return payload


class InvalidInput(BoxyardError):
    """Bad input; `field` names what was wrong."""

    code = "invalid_input"
    status = 400

    def __init__(self, field: str, message: str, **extra: Any) -> None:
        super().__init__(f"{field}: {message}", field=field, **extra)
        self.field = field


class ImageNotAllowed(InvalidInput):
    code = "image_not_allowed"


class NotFound(BoxyardError):
    code = "not_found"
    status = 404


class Conflict(BoxyardError):
    code = "conflict"
    status = 409


class InvalidState(Conflict):
    """The operation makes no sense in the sandbox's current state."""

    code = "invalid_state"


class LeaseBusy(Conflict):
    """Another holder has a live lease; carries `holder` and `expires_at`."""

    code = "lease_busy"


class StaleEpoch(Conflict):
    code = "stale_epoch"


class TakenOver(BoxyardError):
    """The caller's lease was taken over; it may not act until the new holder releases."""

    code = "taken_over"
    status = 423


class QuotaExceeded(BoxyardError):
    code = "quota_exceeded"
    status = 429


class Unavailable(BoxyardError):
    """Something needed is not there now; the caller should try again after `retry_after`."""

    code = "unavailable"
    status = 503

    def __init__(self, message: str, retry_after: int = 5, **extra: Any) -> None:
        super().__init__(message, retry_after=retry_after, **extra)
        self.retry_after = retry_after


class RuntimeUnavailable(Unavailable):
    """The Docker Engine cannot be reached; try again later."""

    code = "runtime_unavailable"


class PoolExhausted(Unavailable):
    """The pipeline's warm pool has no ready sandbox and its policy is not to create one cold."""

    code = "pool_exhausted"


class RuntimeFailure(BoxyardError):
    """The engine refused or failed an operation for a reason that is not the caller's input."""

    code = "runtime_error"
    status = 502
