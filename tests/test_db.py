"""The embedded database: SQLite writers queue in the process and always let go."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from boxyard.db.sqlite3.base import _writer
from pipelines.models import Pipeline

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _sqlite_only() -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the writer queue is SQLite's (PostgreSQL locks rows, not the database)")


def test_a_failed_transaction_lets_the_next_writer_in() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        Pipeline.objects.create(slug="doomed")
        raise RuntimeError("boom")
    assert not _writer.locked()
    assert not Pipeline.objects.filter(slug="doomed").exists()


def test_concurrent_writers_all_get_through() -> None:
    def write(index: int) -> None:
        try:
            with transaction.atomic():
                Pipeline.objects.create(slug=f"burst-{index}")
                time.sleep(0.005)  # hold the write lock a moment, as a real transaction does
        finally:
            connection.close()

    with ThreadPoolExecutor(40) as pool:
        list(pool.map(write, range(80)))
    assert Pipeline.objects.filter(slug__startswith="burst-").count() == 80
    assert not _writer.locked()
