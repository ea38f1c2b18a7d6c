"""Fixtures for Docker hosts: each test starts with no engine of a host known to this process
(a host's id may come back in another test, on another engine)."""

from collections.abc import Iterator
from typing import Any

import pytest

from hosts.engines import forget_all
from hosts.models import DockerHost


@pytest.fixture(autouse=True)
def _no_engines_known() -> Iterator[None]:
    forget_all()
    yield
    forget_all()


@pytest.fixture
def make_host(db: None) -> Any:
    """A host row (seen by a health check a moment ago, holding the test image, unless told)."""
    from django.conf import settings
    from django.utils import timezone

    def make(name: str, **fields: Any) -> DockerHost:
        fields.setdefault("url", f"tcp://{name}.invalid:2376")
        fields.setdefault("last_seen_at", timezone.now())
        fields.setdefault("images", [settings.BOXYARD_TEST_IMAGE])
        return DockerHost.objects.create(name=name, **fields)

    return make
