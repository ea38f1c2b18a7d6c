"""Shared fixtures: named actors, pipelines, and the real Docker Engine.

Behaviour tests (marked `docker`) run against the real engine with the busybox test image;
every container and volume they make carries this test session's deployment label and is
removed after each test.
"""

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from importlib import import_module
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import translation

from hosts.engines import get_runtime
from pipelines.models import Pipeline
from sandboxes import metrics
from sandboxes.runtime import LABEL_DEPLOYMENT, set_runtime
from sandboxes.services import Actor
from tests.fakes import FakeRuntime

DEPLOYMENT = f"test-{uuid.uuid4().hex[:8]}"


# The tests whose subject a database or a broker can change: the distributed mode's own
# processes, locking and concurrency on the rows (claims, leases, placement, jobs, reaping,
# reconciling), migrations, the Channels layer's pushes, Celery's queues, the rate limit's
# counter. CI runs these twice, in the embedded mode (SQLite) and in the distributed one
# (PostgreSQL and Redis); every other test (the engine, what runs in a sandbox, HTTP at the
# server's door, the API's shapes, pages in a browser, pure logic) is marked
# `same_in_every_mode` and runs once (.ci/run).
MODE_DEPENDENT = frozenset(
    {
        "tests/test_distributed.py",
        "tests/test_workers.py",
        "tests/test_db.py",
        "tests/test_migrations.py",
        "tests/test_ratelimit.py",
        "tests/test_dashboard_live.py",
        "tests/test_takeover.py",
        "tests/test_fleet.py",
        "tests/hosts/test_host_queues.py",
        "tests/hosts/test_rolling_restart.py",
        "tests/hosts/test_placement.py",
        "tests/pipelines/test_services.py",
        "tests/sandboxes/services/test_claiming.py",
        "tests/sandboxes/services/test_creating.py",
        "tests/sandboxes/services/test_jobs.py",
        "tests/sandboxes/services/test_leases.py",
        "tests/sandboxes/services/test_opening.py",
        "tests/sandboxes/services/test_pool.py",
        "tests/sandboxes/services/test_reaping.py",
        "tests/sandboxes/services/test_reconciling.py",
        "tests/sandboxes/test_guard.py",
        "tests/sandboxes/test_lifecycle.py",
        "tests/sandboxes/test_metrics.py",
        "tests/sandboxes/test_retention.py",
        "tests/sandboxes/test_selectors.py",
        "tests/sandboxes/test_tasks.py",
        "tests/security/test_engine_events.py",
    }
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "same_in_every_mode: run once by CI, not again on PostgreSQL and Redis"
    )


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist schedules tests by id: tests that share one would run once between them."""
    seen: set[str] = set()
    shared = sorted({nodeid for nodeid in ids if nodeid in seen or seen.add(nodeid)})
    if shared:
        pytest.exit(f"tests sharing an id cannot run on several workers: {shared}", returncode=4)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::")[0] not in MODE_DEPENDENT:
            item.add_marker(pytest.mark.same_in_every_mode)


@pytest.fixture(autouse=True, scope="session")
def _deployment_label() -> None:
    settings.BOXYARD_DEPLOYMENT = DEPLOYMENT


@pytest.fixture(autouse=True, scope="session")
def _static_files_without_collectstatic() -> None:
    """Pages rendered in the test's process find static files where they are (a served
    Boxyard hashes them with collectstatic first)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _seeded_rows(request: pytest.FixtureRequest) -> None:
    """The rows the migrations seed (the scope presets, the host `local`), for every test that
    uses the database: a transactional test empties the tables after it, and CI's workers run
    files in no set order, so a test may come after one that did."""
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or bool(
        marker is not None and marker.kwargs.get("transaction")
    )
    if marker is None and not {"db", "transactional_db"} & set(request.fixturenames):
        return
    request.getfixturevalue("transactional_db" if transactional else "db")
    from django.apps import apps

    from hosts.services import ensure_default_host
    from pipelines.models import SessionTemplate

    if not SessionTemplate.objects.exists():
        import_module("pipelines.migrations.0002_scope_presets").seed(apps, None)
    ensure_default_host()


@pytest.fixture(autouse=True)
def _metrics_in_the_test() -> None:
    """Counts are written when read, inside the test's own transaction, and start at zero."""
    metrics.BACKGROUND_FLUSH = False
    with metrics._lock:
        metrics._pending.clear()


@pytest.fixture(autouse=True)
def _engine_work_where_it_is_asked(settings: Any) -> None:
    """A test that calls a service in its own process sees the engine work done there (a
    pool refill starts its sandboxes, a reconcile reconciles), as with the in-memory broker,
    whichever broker the run has. The distributed mode's routing of engine work to each
    host's queue is tested with processes of its own (tests/hosts/test_host_queues.py)."""
    settings.BOXYARD_HOST_QUEUES = False


@pytest.fixture(autouse=True)
def _the_default_language() -> Iterator[None]:
    """Each test starts in the default language: a page that a test asked for in Russian
    leaves Russian active in the thread (Django's locale middleware does), for whatever runs
    next in it."""
    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(scope="session")
def engine() -> Any:
    """The real engine, with the test image built if missing. Fails loudly if unreachable."""
    from sandboxes.images import ensure_image

    runtime = get_runtime()
    runtime.ping()
    ensure_image(settings.BOXYARD_TEST_IMAGE, progress=lambda line: None)
    return runtime


def _remove_ours(runtime: Any) -> None:
    labels = {LABEL_DEPLOYMENT: DEPLOYMENT}
    for container in runtime.list_containers(labels):
        runtime.remove_container(container.id)
    for volume in runtime.list_volumes(labels):
        runtime.remove_volume(volume)


@pytest.fixture
def docker_engine(engine: Any) -> Iterator[Any]:
    """Per test: the engine, and afterwards no container or volume of this test left."""
    yield engine
    _remove_ours(engine)


@pytest.fixture
def admin_client(django_user_model: Any) -> Client:
    """Alice, an administrator, logged in to the dashboard."""
    user = django_user_model.objects.create_user("alice", password="s3cret-pass", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def fake_runtime() -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    set_runtime(fake)
    yield fake
    set_runtime(None)


@pytest.fixture
def bot() -> Actor:
    return Actor("bot", "support-bot")


@pytest.fixture
def alice_actor() -> Actor:
    """An admin."""
    return Actor("admin", "alice")


@pytest.fixture
def make_pipeline(db: None) -> Any:
    counter = iter(range(1, 10_000))

    def make(**fields: Any) -> Pipeline:
        fields.setdefault("slug", f"pipe-{next(counter)}")
        fields.setdefault("image", settings.BOXYARD_TEST_IMAGE)
        pipeline = Pipeline(**fields)
        pipeline.full_clean()
        pipeline.save()
        return pipeline

    return make


@pytest.fixture
def pipeline(make_pipeline: Any) -> Pipeline:
    return make_pipeline(slug="support")


CHAT = {"launcher_type": "group", "launcher_id": "123456", "sender_id": "789"}


def wait_for(condition: Callable[[], bool], seconds: float, why: Callable[[], str] = str) -> float:
    """Poll until `condition()` holds; the seconds it took. Fails after `seconds`, with
    `why()` (logs, say) in the message. Polls soon at first (most conditions hold within a
    moment), then every 0.1 s (a condition may ask the engine or a server)."""
    started = time.monotonic()
    pause = 0.01
    while not condition():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not done within {seconds} s\n{why()}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    return time.monotonic() - started


async def until(condition: Callable[[], bool], seconds: float = 5) -> None:
    """`wait_for` inside an event loop: poll `condition()` every 10 ms, yielding the loop;
    fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not done within {seconds} s")
        await asyncio.sleep(0.01)


def database_url() -> str:
    """The test database as a `DATABASE_URL`, for the servers and workers a test starts in
    processes of their own."""
    config = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{config['NAME']}"
    return (
        f"postgres://{config['USER']}:{config['PASSWORD']}@{config['HOST'] or 'localhost'}:"
        f"{config['PORT'] or 5432}/{config['NAME']}"
    )
