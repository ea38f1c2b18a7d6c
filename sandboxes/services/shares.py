"""What one pipeline may hold at once of what every pipeline shares."""

from django.conf import settings

from boxyard.slots import Held, Slots

# Calls that wait on a sandbox: an exec's end, a command in the foreground, an output stream.
LONG_CALLS = Slots(
    "long calls (exec waits, commands in the foreground, output streams)",
    lambda: settings.BOXYARD_LONG_CALLS_PER_PIPELINE,
    retry_after=5,
)


def long_call(pipeline_id: int) -> Held:
    """Hold one of the pipeline's long calls (Throttled past BOXYARD_LONG_CALLS_PER_PIPELINE)."""
    return LONG_CALLS.take(f"pipeline:{pipeline_id}")
