"""The Bay API's routes, under `/bay/v1`."""

from sandboxes.bay import capabilities, sandboxes
from sandboxes.bay.api import bay

bay.add_router("/v1", sandboxes.router)
bay.add_router("/v1", capabilities.router)

__all__ = ["bay"]
