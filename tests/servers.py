"""A served Boxyard for the tests that need the real server: `manage.py serve`, as `bin/run`
starts it, on a free port of 127.0.0.1, sharing the test database and deployment label."""

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings

from tests.conftest import DEPLOYMENT, database_url, wait_for

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


@contextmanager
def served(tmp_path: Path, **environment: str) -> Iterator[Server]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        BOXYARD_DEPLOYMENT=DEPLOYMENT,
        BOXYARD_DATA_DIR=str(tmp_path / "data"),
        BOXYARD_ALLOWED_HOSTS="127.0.0.1",
        BOXYARD_IMAGE_ALLOWLIST=settings.BOXYARD_TEST_IMAGE,
        BOXYARD_DEFAULT_IMAGE=settings.BOXYARD_TEST_IMAGE,
        # The disks' keeper needs flock and mkfs (the default image), whichever starts it.
        BOXYARD_DISK_IMAGE=settings.BOXYARD_DISK_IMAGE,
        PYTHONUNBUFFERED="1",
        # Tests of everything but the rate limit make calls as fast as they can.
        BOXYARD_RATE_LIMIT="off",
    )
    env.update(environment)  # a test's own settings win
    log = tmp_path / "server.log"
    command = [sys.executable, "manage.py", "serve", "--no-build", "--host", "127.0.0.1"]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = Server(f"http://127.0.0.1:{port}", process, log)

    def answers() -> bool:
        try:
            return httpx.get(f"{running.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return process.poll() is not None  # stop waiting: it died

    try:
        wait_for(answers, 60, running.tail)
        assert process.poll() is None, running.tail()
        yield running
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
