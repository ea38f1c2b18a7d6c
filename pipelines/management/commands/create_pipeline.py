from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from pipelines.models import DEFAULT_SCOPE, Pipeline, PipelineToken


class Command(BaseCommand):
    help = "Create a pipeline (or update its scope/image) and optionally print a new API token."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--scope", default=None, help=f"scope template (default {DEFAULT_SCOPE})")
        parser.add_argument("--image", default=None, help="sandbox image (default: the default image)")
        parser.add_argument("--name", default="")
        parser.add_argument(
            "--print-token", action="store_true", help="issue an API token and print it once"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            pipeline = Pipeline.objects.filter(slug=options["slug"]).first()
            created = pipeline is None
            if pipeline is None:
                pipeline = Pipeline(slug=options["slug"], name=options["name"] or options["slug"])
            if options["scope"] is not None:
                pipeline.scope_template = options["scope"]
            if options["image"] is not None:
                pipeline.image = options["image"]
            try:
                pipeline.full_clean()
            except ValidationError as error:
                raise CommandError(
                    "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in error.message_dict.items())
                ) from None
            pipeline.save()
            token = None
            if options["print_token"]:
                _, token = PipelineToken.issue(pipeline, name="create_pipeline")
        verb = "Created" if created else "Updated"
        self.stderr.write(
            f"{verb} pipeline {pipeline.slug}: scope {pipeline.scope_template}, "
            f"image {pipeline.effective_image}"
        )
        if token is not None:
            self.stderr.write("Its API token (shown once; only its hash is stored):")
            self.stdout.write(token)
