"""Typed readers for settings that come from the environment.

Each reader fails loudly on a value it cannot understand: a typo in a deployment
must stop the process at start-up, not quietly fall back to a default.
"""

import os
from collections.abc import Callable
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    """The variable's value, or the contents of the file named by NAME_FILE (for secrets)."""
    if (file_name := os.environ.get(f"{name}_FILE")) is not None:
        return Path(file_name).read_text().strip()
    return os.environ.get(name)


def env_str(name: str, default: str) -> str:
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false)")


def _number(
    name: str, default: float, cast: Callable[[str], float], minimum: float | None
) -> float:
    value = _raw(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = cast(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a {cast.__name__}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at least {minimum}")
    return number


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return int(_number(name, default, int, minimum))


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _number(name, default, float, minimum)


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks are dropped."""
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]
