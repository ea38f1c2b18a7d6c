"""Periodic jobs run one at a time across processes, and a dead run does not block them."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from sandboxes.models import PeriodicJob
from sandboxes.services.jobs import run_exclusive

pytestmark = pytest.mark.django_db(transaction=True)  # the lock keeper has its own connection


def test_a_second_run_is_skipped_while_the_first_holds_the_lock() -> None:
    inside = threading.Event()
    release = threading.Event()
    outcomes: list[object] = []

    def long_run() -> str:
        inside.set()
        release.wait(10)
        return "first"

    def first() -> None:
        try:
            outcomes.append(run_exclusive("demo", long_run, lock_seconds=0.6))
        finally:
            connection.close()

    runner = threading.Thread(target=first)
    runner.start()
    assert inside.wait(10)
    time.sleep(1.0)  # longer than the lock: it is being renewed
    assert run_exclusive("demo", lambda: "second", lock_seconds=0.6) is None
    release.set()
    runner.join()
    assert outcomes == ["first"]
    job = PeriodicJob.objects.get(name="demo")
    assert job.holder == "" and job.last_result == {"result": "first"} and job.last_error == ""
    assert run_exclusive("demo", lambda: {"n": 2}) == {"n": 2}


def test_the_lock_of_a_run_that_died_lapses() -> None:
    ran_out = timezone.now() - timedelta(seconds=1)  # its holder stopped renewing it
    PeriodicJob.objects.create(name="demo", holder="dead", running_until=ran_out)
    assert run_exclusive("demo", lambda: "ran") == "ran"


def test_a_failed_run_records_why_and_gives_the_lock_back() -> None:
    def broken() -> None:
        raise RuntimeError("engine on fire")

    with pytest.raises(RuntimeError):
        run_exclusive("demo", broken)
    job = PeriodicJob.objects.get(name="demo")
    assert job.holder == "" and job.running_until is None
    assert job.last_error == "RuntimeError: engine on fire"
