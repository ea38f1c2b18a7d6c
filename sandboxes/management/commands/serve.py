import os
import secrets
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from boxyard.errors import BoxyardError
from hosts.services import ensure_default_host


class Command(BaseCommand):
    help = (
        "Run Boxyard on this machine: migrate, build the default sandbox image if missing, "
        "create the first admin, and serve HTTP and websockets with uvicorn (with the worker "
        "and the scheduler in the same process unless REDIS_URL makes them separate)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default=os.environ.get("BOXYARD_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("BOXYARD_PORT", "8000")))
        parser.add_argument(
            "--no-build", action="store_true", help="do not build missing sandbox images"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        ensure_default_host()
        call_command("collectstatic", interactive=False, verbosity=0)
        if not options["no_build"]:
            self._images()
        self._first_admin(options["host"], options["port"])
        if settings.BOXYARD_EMBEDDED_WORKER:
            from config.embedded import start_worker_and_scheduler

            start_worker_and_scheduler()
            self.stdout.write("Worker and scheduler run in this process (embedded mode).")
        from config.serving import serve

        self.stdout.write(f"Boxyard listens on http://{options['host']}:{options['port']}/")
        serve(options["host"], options["port"])

    def _images(self) -> None:
        from sandboxes.images import ensure_image

        images = (
            settings.BOXYARD_DEFAULT_IMAGE,
            settings.BOXYARD_TEST_IMAGE,
            settings.BOXYARD_DISK_IMAGE,
        )
        for reference in dict.fromkeys(images):
            self.stdout.write(f"Sandbox image {reference}: checking")
            try:
                outcome = ensure_image(
                    reference, progress=lambda line: self.stdout.write(f"  {line}")
                )
            except BoxyardError as error:
                raise CommandError(f"{reference}: {error.message}") from None
            self.stdout.write(f"Sandbox image {reference}: {outcome}")

    def _first_admin(self, host: str, port: int) -> None:
        User = get_user_model()
        password_file = settings.DATA_DIR / "admin-password"
        url = f"http://{host}:{port}/"
        if User.objects.filter(is_superuser=True).exists():
            hint = f" (its first password is in {password_file})" if password_file.exists() else ""
            self.stdout.write(f"Log in at {url} with your admin account{hint}.")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        password_file.touch(mode=0o600)
        password_file.write_text(password + "\n")
        self.stdout.write(
            f"Created the first admin. Log in at {url} as admin / {password}\n"
            f"(the password is also in {password_file}; change it after logging in)"
        )
