"""Settings come from the environment; production variables give a clean deploy check."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_variables() -> None:
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        BOXYARD_SECRET_KEY=secrets.token_urlsafe(60),
        BOXYARD_HTTPS="true",
        BOXYARD_ALLOWED_HOSTS="boxyard.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_deploy_complains_without_them() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", BOXYARD_HTTPS="false")
    assert result.returncode != 0
    assert "SECURE_SSL_REDIRECT" in result.stderr or "security.W008" in result.stderr


def test_junk_in_a_boolean_variable_stops_start_up() -> None:
    result = manage("check", BOXYARD_ALLOW_NETWORK="maybe")
    assert result.returncode != 0
    assert "BOXYARD_ALLOW_NETWORK='maybe' is not a boolean" in result.stderr


def test_the_e2b_domain_admits_its_control_planes_name_only_when_set() -> None:
    show = "from django.conf import settings; print(settings.ALLOWED_HOSTS)"
    unset = manage("shell", "-c", show, BOXYARD_ALLOWED_HOSTS="boxyard.example.com")
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip().splitlines()[-1] == "['boxyard.example.com']"
    named = manage(
        "shell",
        "-c",
        show,
        BOXYARD_ALLOWED_HOSTS="boxyard.example.com",
        BOXYARD_E2B_DOMAIN="E2B.Boxyard.example.com.",
    )
    assert named.returncode == 0, named.stderr
    assert (
        named.stdout.strip().splitlines()[-1]
        == "['boxyard.example.com', 'api.e2b.boxyard.example.com']"
    )


def test_an_e2b_domain_with_a_scheme_or_port_stops_start_up() -> None:
    for junk in ("https://boxyard.example.com", "boxyard.example.com:443", "localhost", "a..b"):
        result = manage("check", BOXYARD_E2B_DOMAIN=junk)
        assert result.returncode != 0, junk
        assert "is not a domain name such as boxyard.example.com" in result.stderr, junk
