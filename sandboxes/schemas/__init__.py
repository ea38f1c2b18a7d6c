"""Request and response shapes of the bot API, by resource, each with its presenters: the
functions that turn rows and services' answers into those shapes."""

from sandboxes.schemas.common import ErrorBody, ErrorOut, Fencing, FencingQuery, Input

__all__ = ["ErrorBody", "ErrorOut", "Fencing", "FencingQuery", "Input"]
