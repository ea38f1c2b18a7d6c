"""Boxyard's own sandbox images, built on this machine with no registry and no builder.

Each image is a root-filesystem tar handed to `Runtime.import_image`:
- the test image (`busybox`) is a scratch filesystem around Debian's static busybox, written
  in Python;
- the default image (`debian`) is a minimal Debian bookworm tree made by debootstrap.

Both ship a `/workspace` that already belongs to the sandbox user and say so with
`LABEL_WORKSPACE_UID`. Any other image is pulled, if the engine can reach a registry. This is
host-side work (files, debootstrap, tar), above the runtime: the runtime only imports the tar.
"""

from collections.abc import Callable

from django.conf import settings

from boxyard.errors import RuntimeFailure, RuntimeUnavailable
from hosts.engines import get_runtime
from sandboxes.images import busybox, debian
from sandboxes.images.building import LABEL_RECIPE, Outcome, Progress, build_lock
from sandboxes.runtime import Runtime

__all__ = [
    "LABEL_RECIPE",
    "Outcome",
    "Progress",
    "build_default_image",
    "build_test_image",
    "ensure_image",
]


def ensure_image(
    reference: str,
    *,
    rebuild: bool = False,
    progress: Progress = print,
    runtime: Runtime | None = None,
) -> Outcome:
    """Make sure the engine (`runtime`'s, else this machine's) has `reference`: keep it,
    build it (ours) or pull it (others)."""
    runtime = runtime or get_runtime()
    recipe = _recipes().get(reference)
    if not rebuild and _is_current(runtime.image_labels(reference), recipe):
        return "present"
    if recipe is None:
        return _pull(reference, progress, runtime)
    name, build = recipe
    with build_lock():
        # Another process may have built it while we waited for the lock.
        if not rebuild and _is_current(runtime.image_labels(reference), recipe):
            return "present"
        progress(f"Building {reference} (recipe {name})")
        build(reference, progress, runtime)
    return "built"


def build_test_image(reference: str, progress: Progress = print) -> None:
    """Import a scratch image holding only static busybox, its applet links and a sandbox user."""
    with build_lock():
        busybox.build(reference, progress)


def build_default_image(reference: str, progress: Progress = print) -> None:
    """Import a minimal Debian bookworm with python3, made by debootstrap from a Debian mirror."""
    with build_lock():
        debian.build(reference, progress)


def _recipes() -> dict[str, tuple[str, Callable[[str, Progress, Runtime], None]]]:
    return {
        settings.BOXYARD_TEST_IMAGE: (busybox.RECIPE, busybox.build),
        # The default image can serve as the disks' image too (then it is built as itself).
        settings.BOXYARD_BASE_IMAGE: (debian.BASE_RECIPE, debian.build_base),
        settings.BOXYARD_DEFAULT_IMAGE: (debian.RECIPE, debian.build),
    }


def _is_current(labels: dict[str, str] | None, recipe: tuple[str, object] | None) -> bool:
    if labels is None:
        return False
    # An image without our label under our name was put there on purpose: leave it.
    recorded = labels.get(LABEL_RECIPE)
    return recipe is None or recorded is None or recorded == recipe[0]


def _pull(reference: str, progress: Progress, runtime: Runtime) -> Outcome:
    progress(f"Pulling {reference}")
    try:
        runtime.pull(reference)
    except (RuntimeFailure, RuntimeUnavailable) as exc:
        raise RuntimeFailure(
            f"Image {reference} is not in the Docker Engine and could not be pulled "
            f"({exc.message}); only {settings.BOXYARD_TEST_IMAGE} and "
            f"{settings.BOXYARD_DEFAULT_IMAGE} can be built locally.",
            image=reference,
        ) from exc
    return "pulled"
