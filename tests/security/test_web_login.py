"""Log-in throttling (django-axes): wrong passwords lock the account out from that address.

After BOXYARD_LOGIN_FAILURE_LIMIT wrong passwords for one user name from one address, every
log-in of that name from there, the right password included, gets 429 and a page saying so
and for how long, for BOXYARD_LOGIN_LOCKOUT_MINUTES. The lockout is recorded (axes' access
attempts and failure log, in the database, and a warning in the log); an operator lifts it at
once with `manage.py axes_reset_username NAME`. The pair (name, address) is what is locked, so
someone guessing from elsewhere cannot lock an admin out of their own address.
"""

import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

PASSWORD = "the-right-password"


@pytest.fixture(autouse=True)
def _hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]


@pytest.fixture
def alice_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD, is_staff=True)


def log_in(
    password: str, *, address: str = "127.0.0.1", username: str = "alice", **headers: str
) -> Any:
    return Client(REMOTE_ADDR=address, **headers).post(
        "/login/", {"username": username, "password": password}
    )


def _locked_out_page(response: Any) -> str:
    assert response.status_code == 429, (response.status_code, response.content[:300])
    text = response.content.decode()
    assert 'role="alert"' in text and "Too many failed log-ins" in text, text[:1500]
    return text


@pytest.mark.django_db
def test_seventeen_wrong_passwords_in_a_row_lock_the_account_out(
    alice_user: Any, settings: Any, caplog: Any
) -> None:
    limit = settings.AXES_FAILURE_LIMIT
    assert limit == 5  # the default of BOXYARD_LOGIN_FAILURE_LIMIT
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="axes"):
        answers = [log_in(f"guess-{n}") for n in range(17)]
    took = time.monotonic() - started
    statuses = [answer.status_code for answer in answers]
    # The form says "did not match" until the limit; from the limit on, the lockout page.
    assert statuses == [200] * (limit - 1) + [429] * (17 - limit + 1), statuses
    assert b"did not match" in answers[0].content
    text = _locked_out_page(answers[-1])
    assert "alice" in text and "Try again in 15\xa0minutes." in text, text[:1500]
    assert "manage.py axes_reset_username alice" in text

    # The right password does not get through either, and says why.
    _locked_out_page(log_in(PASSWORD))
    assert "_auth_user_id" not in Client().session

    # Recorded: the attempts and each failure, and a warning in the log.
    from axes.models import AccessAttempt, AccessFailureLog

    attempt = AccessAttempt.objects.get(username="alice", ip_address="127.0.0.1")
    assert attempt.failures_since_start >= limit
    assert (
        AccessFailureLog.objects.filter(username="alice", ip_address="127.0.0.1").count() >= limit
    )
    assert any("Locking out" in record.getMessage() for record in caplog.records), caplog.text
    assert took < 30, f"17 attempts took {took:.1f} s"


@pytest.mark.django_db
def test_an_operator_unlocks_with_the_management_command(alice_user: Any, settings: Any) -> None:
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(f"guess-{n}")
    _locked_out_page(log_in(PASSWORD))
    call_command("axes_reset_username", "alice", verbosity=0)
    welcomed = log_in(PASSWORD)
    assert welcomed.status_code == 302 and welcomed.url == "/", welcomed.status_code


@pytest.mark.django_db
def test_the_lockout_ends_by_itself_after_the_cool_off(alice_user: Any, settings: Any) -> None:
    # Locked out first under a long cool-off: five slow log-ins (a second each on a busy
    # machine, hashing) must not outlast it; then a cool-off of one second is waited out.
    settings.AXES_COOLOFF_TIME = timedelta(seconds=60)
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(f"guess-{n}")
    _locked_out_page(log_in(PASSWORD))
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    time.sleep(1.2)
    assert log_in(PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_lock_is_on_the_name_from_that_address(alice_user: Any, settings: Any) -> None:
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(f"guess-{n}", address="203.0.113.7")
    _locked_out_page(log_in(PASSWORD, address="203.0.113.7"))
    assert log_in(PASSWORD, address="198.51.100.2").status_code == 302  # alice, elsewhere


@pytest.mark.django_db
def test_a_good_log_in_starts_the_count_again(alice_user: Any, settings: Any) -> None:
    for _ in range(2):
        for n in range(settings.AXES_FAILURE_LIMIT - 1):
            assert log_in(f"guess-{n}").status_code == 200
        assert log_in(PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_admin_sites_log_in_is_throttled_too(alice_user: Any, settings: Any) -> None:
    for n in range(settings.AXES_FAILURE_LIMIT):
        Client().post("/admin/login/", {"username": "alice", "password": f"guess-{n}"})
    assert (
        Client().post("/admin/login/", {"username": "alice", "password": PASSWORD}).status_code
        == 429
    )


@pytest.mark.django_db
def test_behind_a_proxy_the_address_is_the_one_the_proxy_saw(
    alice_user: Any, settings: Any
) -> None:
    """With BOXYARD_BEHIND_PROXY every request comes from the proxy: the client is the last
    address of X-Forwarded-For (the one the proxy added; earlier ones the client may forge)."""
    settings.BOXYARD_BEHIND_PROXY = True
    proxy = {"address": "10.0.0.2"}
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(f"guess-{n}", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.7", **proxy)
    _locked_out_page(log_in(PASSWORD, HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.7", **proxy))
    assert log_in(PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.8", **proxy).status_code == 302
    from axes.models import AccessAttempt

    assert AccessAttempt.objects.filter(ip_address="203.0.113.7").exists()
