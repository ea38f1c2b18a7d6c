"""`manage.py prune`: one retention pass now, as the periodic job runs it (the settings
BOXYARD_OUTPUT_RETENTION_DAYS, BOXYARD_OUTPUT_KEEP_MB and BOXYARD_HISTORY_RETENTION_DAYS say
what goes), and what the database keeps after it."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.template.defaultfilters import filesizeformat

from sandboxes.services.jobs import run_exclusive
from sandboxes.services.pruning import JOB, prune


class Command(BaseCommand):
    help = "Clear old commands' output and delete old history now, as retention does."

    def handle(self, *args: Any, **options: Any) -> None:
        pruned = run_exclusive(JOB, prune)
        if pruned is None:
            raise CommandError("a retention pass is running already; try again in a minute")
        self.stdout.write(
            f"Output cleared: {pruned.outputs_expired} commands past their retention, "
            f"{pruned.outputs_over_budget} over the budget "
            f"({filesizeformat(pruned.output_bytes_freed)} freed)."
        )
        self.stdout.write(
            f"Deleted: {pruned.events} events, {pruned.execs} commands, "
            f"{pruned.sandboxes} destroyed sandboxes, {pruned.logins} login records."
        )
        self.stdout.write(
            f"Stored now: {filesizeformat(pruned.stored_output_bytes)} of output, "
            f"{pruned.stored_events} events."
        )
