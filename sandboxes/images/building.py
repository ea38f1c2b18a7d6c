"""What building any of Boxyard's images needs: the sandbox user's ids, one build at a time
in a directory of the data dir (what a killed build left is removed first, never walking into
a filesystem still mounted there), host tools, and the recipe label."""

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from boxyard.errors import RuntimeFailure
from boxyard.threads import waiting

Progress = Callable[[str], None]
Outcome = Literal["present", "built", "pulled"]

# Bump a recipe when what it builds changes: an image labelled with an older recipe is rebuilt.
LABEL_RECIPE = "io.boxyard.recipe"
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"
STICKY = 0o1777


def sandbox_ids() -> tuple[int, int]:
    """The numeric uid and gid of `BOXYARD_SANDBOX_USER` ("uid:gid" or "uid")."""
    raw = settings.BOXYARD_SANDBOX_USER
    uid, _, gid = raw.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        raise ImproperlyConfigured(
            f"BOXYARD_SANDBOX_USER must be numeric 'uid:gid' to build images, got {raw!r}"
        )
    return int(uid), int(gid or uid)


def _build_root() -> Path:
    root = Path(settings.DATA_DIR) / "build"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def build_lock() -> Iterator[None]:
    """One build at a time per data directory; what a killed build left behind goes first."""
    root = _build_root()
    with open(root / ".lock", "w") as lock:
        with waiting():  # held through the engine's answers: see boxyard.threads.locked
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for stale in root.iterdir():
                if stale.is_dir() and not stale.is_symlink():
                    _remove_tree(stale)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def build_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=_build_root()))
    try:
        yield path
    finally:
        _remove_tree(path)


def _remove_tree(path: Path) -> None:
    # A killed debootstrap can leave /proc (or more) mounted in its target: never let
    # rmtree walk into a mounted filesystem; what cannot be unmounted stays for next time.
    if not unmount_below(path):
        shutil.rmtree(path, ignore_errors=True)


def unmount_below(path: Path) -> list[str]:
    """Unmount everything mounted below path; return what is still mounted there."""
    for point in _mounts_below(path):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    return _mounts_below(path)


def _mounts_below(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    # /proc/self/mounts escapes spaces and the like as octal.
    points = [
        re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[1]) for line in lines
    ]
    return sorted((p for p in points if p.startswith(prefix)), reverse=True)


def megabytes(path: Path) -> str:
    return f"{path.stat().st_size / 1_000_000:.1f} MB tar"


def require_tool(name: str) -> str:
    found = shutil.which(name, path=tool_path())
    if found is None:
        raise RuntimeFailure(f"{name} is not installed: run `apt-get install {name}` as root.")
    return found


def tool_path() -> str:
    return f"{os.environ.get('PATH', '')}:{SBIN_PATH}"
