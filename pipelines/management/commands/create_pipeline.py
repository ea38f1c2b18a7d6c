from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from pipelines import services
from pipelines.models import DEFAULT_SCOPE, Pipeline

ACTOR = Actor("command", "create_pipeline")


class Command(BaseCommand):
    help = "Create a pipeline (or update its scope/image) and optionally print a new API token."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument(
            "--scope", default=None, help=f"scope template (default {DEFAULT_SCOPE})"
        )
        parser.add_argument(
            "--image", default=None, help="sandbox image (default: the default image)"
        )
        parser.add_argument("--name", default="")
        parser.add_argument(
            "--print-token", action="store_true", help="issue an API token and print it once"
        )
        parser.add_argument(
            "--e2b-key",
            action="store_true",
            help="issue an API key shaped for E2B's SDKs (e2b_<40 hex>, for E2B_API_KEY) and "
            "print it once",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        values = {
            field: options[option]
            for field, option in (("scope_template", "scope"), ("image", "image"))
            if options[option] is not None
        }
        pipeline = Pipeline.objects.filter(slug=options["slug"]).first()
        try:
            if pipeline is None:
                name = options["name"] or options["slug"]
                pipeline = services.create_pipeline(
                    Pipeline(slug=options["slug"], name=name, **values), ACTOR
                )
                verb = "Created"
            else:
                pipeline = services.update_pipeline(pipeline, ACTOR, values)
                verb = "Updated"
            token = None
            if options["print_token"] or options["e2b_key"]:
                shape = "e2b" if options["e2b_key"] else "boxyard"
                _, token = services.issue_token(
                    pipeline, ACTOR, name="create_pipeline", shape=shape
                )
        except BoxyardError as error:
            raise CommandError(error.message) from None
        self.stderr.write(
            f"{verb} pipeline {pipeline.slug}: scope {pipeline.scope_template}, "
            f"image {pipeline.effective_image}"
        )
        if token is not None:
            self.stderr.write("Its API token (shown once; only its hash is stored):")
            self.stdout.write(token)
