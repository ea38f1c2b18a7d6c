"""Every error Boxyard raises on purpose, and what each means over HTTP.

One tree for the whole project: the services, the runtime and the agent's client raise these,
and every entry point shows them the same way. Each class carries a stable `code` and an HTTP
`status`; `problem()` turns an error into the status, the JSON body `{code, message, ...}` and
the headers a response carries. The bot API answers with it, the dashboard shows its message
(and its status, for a page of its own), the websocket consumers send its message. Nothing a
caller sent may surface as anything but one of these.

A message is English for the API, whatever language the caller's headers ask for (a bot reads
the same words everywhere), and in the admin's language on the dashboard: build it with
`N_(template, **values)`, and show `error.localized()` to a person, `error.message` to a program.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Choices
from django.utils import translation
from django.utils.functional import Promise, lazy


class Message:
    """An error's words: an English template with `%(name)s` placeholders, and their values.

    `str()` is the English text, the one the API, the logs and the rows keep; `localized()` is
    the text in the active language, from the catalogs, for a person reading the dashboard. A
    value that is words itself follows the language: another Message or error, a choice (its
    label: "Running" for `running`) or a lazy text; data (keys, holders, paths, numbers) stays
    as it is. Write one with `N_()`, so the template lands in the catalogs.
    """

    __slots__ = ("params", "template")

    def __init__(self, template: str, /, **params: object) -> None:
        self.template = template
        self.params = params

    def __str__(self) -> str:
        return self.template % {name: _english(value) for name, value in self.params.items()}

    def __repr__(self) -> str:
        return f"Message({self.template!r}, **{self.params!r})"

    def localized(self) -> str:
        """The text in the active language; the English one where the catalog has none (or
        a translation that does not fit its values: a slip there never hides the error)."""
        template = translation.gettext(self.template)
        # A choice is shown by its label only inside a translated sentence: in English (or
        # where the catalog has no translation) the sentence stays as the API says it.
        labels = template != self.template
        values = {name: _localized(value, labels) for name, value in self.params.items()}
        try:
            return template % values
        except (KeyError, TypeError, ValueError):
            return str(self)

    def lazy(self) -> str:
        """The localized text when it is shown, in the language active then (a form's error)."""
        return _lazy_localized(self)


def N_(template: str, /, **params: object) -> Message:
    """An error's message, its template marked for translation: the project's `makemessages`
    (sandboxes/management/commands) extracts the first argument of `N_(...)` as a msgid. Write
    the template as a literal, with `%(name)s` where an f-string had `{name}`."""
    return Message(template, **params)


def _english(value: object) -> object:
    if isinstance(value, BoxyardError):
        return value.message
    if isinstance(value, Promise):
        with translation.override(None):  # the msgid as written: the English
            return str(value)
    return value  # a Message or a choice gives its English through str() already


def _localized(value: object, labels: bool) -> object:
    if isinstance(value, Message | BoxyardError):
        return value.localized()
    if isinstance(value, Choices) and labels:
        return str(value.label)
    if isinstance(value, Promise):
        return str(value)
    return value


_lazy_localized = lazy(Message.localized, str)


class BoxyardError(Exception):
    """`message` is the English text (the API's); `localized()` the text in the active language
    (the dashboard's). Build one from a plain str, or from `N_(template, **values)` to have it
    translated."""

    code = "error"
    status = 400

    def __init__(self, message: str | Message, **extra: Any) -> None:
        text = str(message)
        super().__init__(text)
        self.message = text
        self.words = message
        self.extra = extra

    def localized(self) -> str:
        return self.words.localized() if isinstance(self.words, Message) else self.message

    def as_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"code": self.code, "message": self.message}
        for key, value in self.extra.items():
            payload[key] = value.isoformat() if isinstance(value, datetime) else value
        return payload


# --- the caller's request -----------------------------------------------------------------------


class InvalidInput(BoxyardError):
    """Bad input; `field` names what was wrong."""

    code = "invalid_input"
    status = 400

    def __init__(self, field: str, message: str | Message, **extra: Any) -> None:
        # The field's name is data: the same in every language, like the key of a JSON body.
        said = Message("%(field)s: %(message)s", field=field, message=message)
        super().__init__(said, field=field, **extra)
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


class Throttled(QuotaExceeded):
    """Too many of the caller's requests at once, or too often: try again after `retry_after`
    seconds (the `Retry-After` header)."""

    code = "too_many_requests"

    def __init__(self, message: str | Message, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(message, retry_after=retry_after, **extra)


class RateLimited(Throttled):
    """More requests than the operator's rate limit allows (BOXYARD_RATE_LIMIT)."""

    code = "rate_limited"


class TooLarge(BoxyardError):
    """A request body larger than the route takes."""

    code = "too_large"
    status = 413


class RequestTimeout(BoxyardError):
    """A client that stopped sending its request's body."""

    code = "request_timeout"
    status = 408


class LengthRequired(BoxyardError):
    """An upload must say its size (Content-Length) before its first byte."""

    code = "length_required"
    status = 411


class RangeNotSatisfiable(BoxyardError):
    """A Range that starts past the end of the file; `size` is the file's."""

    code = "range_not_satisfiable"
    status = 416


class LinkRefused(BoxyardError):
    """A signed link that is not (or no longer) good: changed, expired, or of a sandbox
    closed since it was made."""

    code = "link_refused"
    status = 403


class UploadIncomplete(BoxyardError):
    """The body ended before its Content-Length: nothing was written."""

    code = "upload_incomplete"
    status = 400


class WorkspaceFull(BoxyardError):
    """A write needs more room than the workspace's disk has left."""

    code = "workspace_full"
    status = 507


# --- what the caller should try again --------------------------------------------------------------


class Unavailable(BoxyardError):
    """Something needed is not there now; the caller should try again after `retry_after`."""

    code = "unavailable"
    status = 503

    def __init__(self, message: str | Message, retry_after: int = 5, **extra: Any) -> None:
        super().__init__(message, retry_after=retry_after, **extra)
        self.retry_after = retry_after


class RuntimeUnavailable(Unavailable):
    """The Docker Engine cannot be reached; try again later."""

    code = "runtime_unavailable"


class HostUnavailable(RuntimeUnavailable):
    """The Docker host of the sandbox does not answer (or is marked down): its sandboxes wait
    for it to come back; new ones go elsewhere."""

    code = "host_unavailable"


class NoRoom(Unavailable):
    """No active Docker host can take a new sandbox (full, draining, down, or without the
    labels the pipeline requires)."""

    code = "no_room"


class PoolExhausted(Unavailable):
    """The pipeline's warm pool has no ready sandbox and its policy is not to create one cold."""

    code = "pool_exhausted"


# --- the engine and the sandbox's agent -----------------------------------------------------------


class RuntimeFailure(BoxyardError):
    """The engine refused or failed an operation for a reason that is not the caller's input."""

    code = "runtime_error"
    status = 502


class ContainerGone(RuntimeFailure):
    """The container is not there (removed from outside, or never created)."""

    code = "container_gone"
    status = 409


class ImageMissing(RuntimeFailure):
    code = "image_missing"
    status = 400


class ExecDeadlineExceeded(RuntimeFailure):
    """The engine kept an exec's stream open past the deadline we allowed it."""

    code = "exec_deadline"
    status = 504


class AgentGone(RuntimeFailure):
    """The channel to a sandbox's agent broke (the container stopped, or the agent died)."""

    code = "agent_unavailable"
    status = 502


class AgentTimeout(RuntimeFailure):
    code = "agent_timeout"
    status = 504


# --- over HTTP ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """An error as an HTTP answer: its status, its JSON body and its headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def problem(error: BoxyardError) -> Problem:
    """The one mapping of an error to HTTP: `{"error": {code, message, ...}}` with its status,
    `Retry-After` for what is worth trying again, and the file's size for a Range past it."""
    headers: dict[str, str] = {}
    retry_after = error.extra.get("retry_after")
    if isinstance(error, (Unavailable, Throttled)) and isinstance(retry_after, int):
        headers["Retry-After"] = str(retry_after)
    if isinstance(error, RangeNotSatisfiable):
        headers["Content-Range"] = f"bytes */{error.extra['size']}"
    return Problem(status=error.status, body={"error": error.as_dict()}, headers=headers)
