"""What every part of the Docker runtime shares: docker-py's errors as Boxyard's, and the
engine's description of a container as a `ContainerInfo`."""

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

import docker.errors
import requests.exceptions

from boxyard.errors import (
    N_,
    ContainerGone,
    HostUnavailable,
    ImageMissing,
    RuntimeFailure,
    RuntimeUnavailable,
)
from boxyard.threads import waiting
from sandboxes.runtime import ContainerInfo

P = ParamSpec("P")
T = TypeVar("T")


def translate(method: Callable[P, T]) -> Callable[P, T]:
    """Map docker-py and transport errors onto Boxyard's exception tree; the engine is
    waited for with the caller's turn to run let go (`boxyard.threads.waiting`)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            with waiting():
                return method(*args, **kwargs)
        except (RuntimeFailure, RuntimeUnavailable):
            raise
        except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as error:
            raise unreachable(args[0], error) from error
        except requests.exceptions.Timeout as error:
            raise unreachable(args[0], error, timed_out=True) from error
        except docker.errors.ImageNotFound as error:
            raise ImageMissing(
                N_("image not found: %(error)s", error=error.explanation or error)
            ) from error
        except docker.errors.NotFound as error:
            raise ContainerGone(
                N_("not found: %(error)s", error=error.explanation or error)
            ) from error
        except docker.errors.APIError as error:
            raise RuntimeFailure(
                N_("the Docker Engine refused: %(error)s", error=error.explanation or error)
            ) from error
        except docker.errors.DockerException as error:
            raise unreachable(args[0], error) from error

    return wrapper


def unreachable(
    runtime: object, error: BaseException, timed_out: bool = False
) -> RuntimeUnavailable:
    """The engine did not answer: on a host Boxyard places sandboxes on, the host is named
    (`host_unavailable`), else it is this machine's engine."""
    host = getattr(runtime, "host_name", "")
    if host:
        return HostUnavailable(
            N_("the Docker host %(host)s does not answer: %(error)s", host=host, error=error),
            host=host,
        )
    if timed_out:
        return RuntimeUnavailable(
            N_("the Docker Engine did not answer in time: %(error)s", error=error)
        )
    return RuntimeUnavailable(N_("the Docker Engine is unreachable: %(error)s", error=error))


def container_info(data: dict[str, Any]) -> ContainerInfo:
    state = data.get("State") or {}
    config = data.get("Config") or {}
    created = data.get("Created")
    return ContainerInfo(
        id=data["Id"],
        name=data.get("Name", "").lstrip("/"),
        status=state.get("Status", "unknown"),
        labels=config.get("Labels") or {},
        image=config.get("Image", ""),
        created_at=parse_time(created) if isinstance(created, str) else None,
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
        user=config.get("User") or "",
    )


def parse_time(value: str) -> datetime | None:
    # Docker gives nanoseconds ("2026-11-22T04:03:01.123456789Z"); Python takes microseconds.
    head, _, fraction = value.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")
    except ValueError:
        return None
