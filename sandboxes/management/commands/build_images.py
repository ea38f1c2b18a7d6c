"""`manage.py build_images`: make sure the engine has Boxyard's sandbox images."""

import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from boxyard.errors import BoxyardError
from sandboxes.images import ensure_image
from sandboxes.runtime import Runtime


class Command(BaseCommand):
    help = (
        "Build Boxyard's sandbox images locally (no registry needed): the busybox test image, "
        "the Debian default image (with the code interpreter) and the disks' keeper's image "
        "(the same Debian without it). With no flag, all of them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--test", action="store_true", help="the test image (busybox)")
        parser.add_argument(
            "--default", action="store_true", help="the default image (Debian, needs root)"
        )
        parser.add_argument(
            "--rebuild", action="store_true", help="build even when the engine has the image"
        )
        parser.add_argument(
            "--host",
            metavar="NAME",
            help="into this Docker host's engine (`manage.py hosts list`); default: this machine's",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        both = not options["test"] and not options["default"]
        references = []
        if options["test"] or both:
            references.append(settings.BOXYARD_TEST_IMAGE)
        if options["default"] or both:
            references.append(settings.BOXYARD_DEFAULT_IMAGE)
        if both:
            references.append(settings.BOXYARD_DISK_IMAGE)
        runtime = None
        if options["host"]:
            from hosts.engines import engine_of
            from hosts.services import find

            try:
                runtime = engine_of(find(options["host"]))
            except BoxyardError as error:
                raise CommandError(str(error)) from error
        for reference in dict.fromkeys(references):
            self._ensure(reference, rebuild=options["rebuild"], runtime=runtime)

    def _ensure(self, reference: str, *, rebuild: bool, runtime: Runtime | None) -> None:
        started = time.monotonic()
        try:
            outcome = ensure_image(
                reference, rebuild=rebuild, progress=self._progress, runtime=runtime
            )
        except (BoxyardError, ImproperlyConfigured) as error:
            raise CommandError(f"{reference}: {error}") from error
        elapsed = time.monotonic() - started
        self.stdout.write(self.style.SUCCESS(f"{reference}: {outcome} ({elapsed:.1f}s)"))

    def _progress(self, line: str) -> None:
        self.stdout.write(f"  {line}")
        self.stdout.flush()
