"""Boxyard's own sandbox images, built on this machine with no registry and no builder.

Each image is a root-filesystem tar handed to `Runtime.import_image`:
- the test image is a scratch filesystem around Debian's static busybox, written in Python;
- the default image is a minimal Debian bookworm tree made by debootstrap.

Both ship a `/workspace` that already belongs to the sandbox user and say so with
`LABEL_WORKSPACE_UID`, so a fresh workspace volume copies that ownership on first mount.
"""

import fcntl
import io
import os
import re
import shutil
import signal
import struct
import subprocess
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from boxyard.errors import RuntimeFailure, RuntimeUnavailable
from sandboxes.runtime import LABEL_WORKSPACE_UID, get_runtime

Progress = Callable[[str], None]
Outcome = Literal["present", "built", "pulled"]

# Bump a recipe when what it builds changes: an image labelled with an older recipe is rebuilt.
LABEL_RECIPE = "io.boxyard.recipe"
TEST_RECIPE = "busybox-1"
DEFAULT_RECIPE = "debian-bookworm-1"

HOST_BUSYBOX = Path("/bin/busybox")
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = (
    "python3",
    "procps",
    "ca-certificates",
    "less",
    "file",
    "xz-utils",
    "bzip2",
    "unzip",
)
FALLBACK_MIRROR = "http://deb.debian.org/debian"
MIRROR_ENV = "BOXYARD_DEBIAN_MIRROR"

# A fixed mtime keeps the test image's tar byte-for-byte reproducible.
FIXED_MTIME = 1_700_000_000
SBIN_PATH = "/usr/local/sbin:/usr/sbin:/sbin"


def ensure_image(reference: str, *, rebuild: bool = False, progress: Progress = print) -> Outcome:
    """Make sure the engine has `reference`: keep it, build it (ours) or pull it (others)."""
    runtime = get_runtime()
    recipe = _recipes().get(reference)
    if not rebuild and _is_current(runtime.image_labels(reference), recipe):
        return "present"
    if recipe is None:
        return _pull(reference, progress)
    name, build = recipe
    with _build_lock():
        # Another process may have built it while we waited for the lock.
        if not rebuild and _is_current(runtime.image_labels(reference), recipe):
            return "present"
        progress(f"Building {reference} (recipe {name})")
        build(reference, progress)
    return "built"


def build_test_image(reference: str, progress: Progress = print) -> None:
    """Import a scratch image holding only static busybox, its applet links and a sandbox user."""
    with _build_lock():
        _build_test(reference, progress)


def build_default_image(reference: str, progress: Progress = print) -> None:
    """Import a minimal Debian bookworm with python3, made by debootstrap from a Debian mirror."""
    with _build_lock():
        _build_default(reference, progress)


def _build_test(reference: str, progress: Progress) -> None:
    uid, gid = sandbox_ids()
    busybox = _host_busybox()
    with _build_dir("busybox-") as workdir:
        tar_path = workdir / "rootfs.tar"
        progress(f"Writing busybox root filesystem from {busybox}")
        _write_busybox_tar(tar_path, busybox, uid, gid)
        progress(f"Importing {reference} ({_megabytes(tar_path)})")
        get_runtime().import_image(tar_path, reference, _test_changes(uid, gid))


def _build_default(reference: str, progress: Progress) -> None:
    uid, gid = sandbox_ids()
    if os.geteuid() != 0:
        raise RuntimeFailure(
            f"Building {reference} runs debootstrap, which needs root: "
            "run `manage.py build_images --default` as root."
        )
    debootstrap = _require_tool("debootstrap")
    mirror = debian_mirror()
    with _build_dir("debian-") as workdir:
        rootfs = workdir / "rootfs"
        progress(f"Running debootstrap {DEBIAN_SUITE} from {mirror}")
        _debootstrap(debootstrap, rootfs, mirror, progress)
        if still_mounted := _unmount_below(rootfs):
            raise RuntimeFailure(f"Cannot unmount {', '.join(still_mounted)} after debootstrap")
        progress("Adding the sandbox user and trimming the tree")
        _customize_debian(rootfs, uid, gid)
        tar_path = workdir / "rootfs.tar"
        progress("Writing root filesystem tar")
        _write_tree_tar(rootfs, tar_path)
        progress(f"Importing {reference} ({_megabytes(tar_path)})")
        get_runtime().import_image(tar_path, reference, _default_changes(uid, gid))


def sandbox_ids() -> tuple[int, int]:
    """The numeric uid and gid of `BOXYARD_SANDBOX_USER` ("uid:gid" or "uid")."""
    raw = settings.BOXYARD_SANDBOX_USER
    uid, _, gid = raw.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        raise ImproperlyConfigured(
            f"BOXYARD_SANDBOX_USER must be numeric 'uid:gid' to build images, got {raw!r}"
        )
    return int(uid), int(gid or uid)


def debian_mirror() -> str:
    """The mirror for debootstrap: $BOXYARD_DEBIAN_MIRROR, else the host's apt sources."""
    if override := os.environ.get(MIRROR_ENV, "").strip():
        return override
    for uri in _apt_source_uris():
        if _is_debian_archive(uri):
            return uri
    return FALLBACK_MIRROR


# --- choosing what to do ---------------------------------------------------------------------


def _recipes() -> dict[str, tuple[str, Callable[[str, Progress], None]]]:
    return {
        settings.BOXYARD_TEST_IMAGE: (TEST_RECIPE, _build_test),
        settings.BOXYARD_DEFAULT_IMAGE: (DEFAULT_RECIPE, _build_default),
    }


def _is_current(labels: dict[str, str] | None, recipe: tuple[str, object] | None) -> bool:
    if labels is None:
        return False
    # An image without our label under our name was put there on purpose: leave it.
    recorded = labels.get(LABEL_RECIPE)
    return recipe is None or recorded is None or recorded == recipe[0]


def _pull(reference: str, progress: Progress) -> Outcome:
    progress(f"Pulling {reference}")
    try:
        get_runtime().pull(reference)
    except (RuntimeFailure, RuntimeUnavailable) as exc:
        raise RuntimeFailure(
            f"Image {reference} is not in the Docker Engine and could not be pulled "
            f"({exc.message}); only {settings.BOXYARD_TEST_IMAGE} and "
            f"{settings.BOXYARD_DEFAULT_IMAGE} can be built locally.",
            image=reference,
        ) from exc
    return "pulled"


def _test_changes(uid: int, gid: int) -> list[str]:
    return [
        f"USER {uid}:{gid}",
        "WORKDIR /workspace",
        "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV HOME=/workspace",
        'CMD ["sh"]',
        f"LABEL {LABEL_WORKSPACE_UID}={uid} {LABEL_RECIPE}={TEST_RECIPE}",
    ]


def _default_changes(uid: int, gid: int) -> list[str]:
    return [
        f"USER {uid}:{gid}",
        "WORKDIR /workspace",
        "ENV HOME=/workspace",
        "ENV LANG=C.UTF-8",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'CMD ["bash"]',
        f"LABEL {LABEL_WORKSPACE_UID}={uid} {LABEL_RECIPE}={DEFAULT_RECIPE}",
    ]


# --- build directories -----------------------------------------------------------------------


def _build_root() -> Path:
    root = Path(settings.DATA_DIR) / "build"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time per data directory; what a killed build left behind goes first."""
    root = _build_root()
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for stale in root.iterdir():
                if stale.is_dir() and not stale.is_symlink():
                    _remove_tree(stale)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _build_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=_build_root()))
    try:
        yield path
    finally:
        _remove_tree(path)


def _remove_tree(path: Path) -> None:
    # A killed debootstrap can leave /proc (or more) mounted in its target: never let
    # rmtree walk into a mounted filesystem; what cannot be unmounted stays for next time.
    if not _unmount_below(path):
        shutil.rmtree(path, ignore_errors=True)


def _unmount_below(path: Path) -> list[str]:
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


def _megabytes(path: Path) -> str:
    return f"{path.stat().st_size / 1_000_000:.1f} MB tar"


def _require_tool(name: str) -> str:
    found = shutil.which(name, path=_tool_path())
    if found is None:
        raise RuntimeFailure(f"{name} is not installed: run `apt-get install {name}` as root.")
    return found


def _tool_path() -> str:
    return f"{os.environ.get('PATH', '')}:{SBIN_PATH}"


# --- test image: a scratch filesystem around static busybox ----------------------------------

_TEST_DIRS = ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "home", "root", "proc", "sys")
_TEST_DIRS_TAIL = ("dev", "var")
_STICKY = 0o1777


def _host_busybox() -> Path:
    install = "run `apt-get install busybox-static` (as root) on this machine"
    if not HOST_BUSYBOX.is_file():
        raise RuntimeFailure(f"{HOST_BUSYBOX} is missing: {install}.")
    if not _is_static_elf(HOST_BUSYBOX):
        raise RuntimeFailure(f"{HOST_BUSYBOX} is not a statically linked busybox: {install}.")
    return HOST_BUSYBOX


def _is_static_elf(path: Path) -> bool:
    """True for an ELF executable without a program interpreter (no dynamic loader)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return False
    order = "<" if data[5] == 1 else ">"
    if data[4] == 2:  # 64-bit
        (phoff,) = struct.unpack_from(f"{order}Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(f"{order}HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(f"{order}I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(f"{order}HH", data, 0x2A)
    pt_interp = 3
    types = (struct.unpack_from(f"{order}I", data, phoff + i * phentsize)[0] for i in range(phnum))
    return pt_interp not in types


def _applet_links(busybox: Path) -> list[str]:
    """Paths (relative, deduplicated, sorted) where busybox wants a link to itself."""
    listed = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    bin_dirs = {"bin", "sbin", "usr/bin", "usr/sbin"}
    # Only links inside the bin directories: that drops `linuxrc` (initramfs only).
    return sorted(
        {p for p in listed if p.rpartition("/")[0] in bin_dirs and p != "bin/busybox"}
    )


def _write_busybox_tar(tar_path: Path, busybox: Path, uid: int, gid: int) -> None:
    links = _applet_links(busybox)
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in _TEST_DIRS:
            tar.addfile(_entry(name, tarfile.DIRTYPE, 0o755))
        tar.addfile(_entry("tmp", tarfile.DIRTYPE, _STICKY))
        for name in _TEST_DIRS_TAIL:
            tar.addfile(_entry(name, tarfile.DIRTYPE, 0o755))
        tar.addfile(_entry("var/tmp", tarfile.DIRTYPE, _STICKY))
        tar.addfile(_entry("workspace", tarfile.DIRTYPE, 0o755, uid=uid, gid=gid))
        binary = busybox.read_bytes()
        tar.addfile(
            _entry("bin/busybox", tarfile.REGTYPE, 0o755, size=len(binary)), io.BytesIO(binary)
        )
        for link in links:
            tar.addfile(_entry(link, tarfile.SYMTYPE, 0o777, target="/bin/busybox"))
        for name, text in _busybox_etc(uid, gid).items():
            data = text.encode()
            tar.addfile(_entry(name, tarfile.REGTYPE, 0o644, size=len(data)), io.BytesIO(data))


def _entry(
    name: str,
    kind: bytes,
    mode: int,
    *,
    uid: int = 0,
    gid: int = 0,
    size: int = 0,
    target: str = "",
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.size = size
    info.linkname = target
    info.mtime = FIXED_MTIME
    return info


def _busybox_etc(uid: int, gid: int) -> dict[str, str]:
    passwd = ["root:x:0:0:root:/root:/bin/sh"]
    group = ["root:x:0:"]
    if uid != 0:
        passwd.append(f"sandbox:x:{uid}:{gid}:Boxyard sandbox:/workspace:/bin/sh")
    if gid != 0:
        group.append(f"sandbox:x:{gid}:")
    return {"etc/passwd": "\n".join(passwd) + "\n", "etc/group": "\n".join(group) + "\n"}


# --- default image: Debian by debootstrap ----------------------------------------------------


def _apt_source_uris() -> Iterator[str]:
    """Enabled `deb` URIs of the host's apt sources, in the order apt reads them."""
    etc_apt = Path("/etc/apt")
    files = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            yield from _deb822_uris(text)
        elif path.suffix == ".list":
            yield from _one_line_uris(text)


def _one_line_uris(text: str) -> Iterator[str]:
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if words:
            yield words[0]


def _deb822_uris(text: str) -> Iterator[str]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for stanza in re.split(r"\n\s*\n", "\n".join(lines)):
        fields = {
            key.strip().lower(): value.strip()
            for key, sep, value in (line.partition(":") for line in stanza.splitlines())
            if sep and not key.startswith((" ", "\t"))
        }
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
            yield from fields.get("uris", "").split()


def _is_debian_archive(uri: str) -> bool:
    # The security archive has no installer suites; debootstrap needs the main archive.
    return uri.startswith(("http://", "https://", "file:/")) and "debian" in uri and (
        "security" not in uri
    )


def _debootstrap(debootstrap: str, rootfs: Path, mirror: str, progress: Progress) -> None:
    argv = [
        debootstrap,
        "--variant=minbase",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        DEBIAN_SUITE,
        str(rootfs),
        mirror,
    ]
    env = {**os.environ, "PATH": _tool_path(), "DEBIAN_FRONTEND": "noninteractive"}
    said: deque[str] = deque(maxlen=5)
    # Its own session, so that an interrupted build can stop it with all its children.
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line := line.rstrip():
                said.append(line)
                progress(f"debootstrap: {line}")
        code = process.wait()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if code != 0:
        log = _tail_lines(rootfs / "debootstrap" / "debootstrap.log", 10)
        raise RuntimeFailure(
            f"debootstrap failed (exit {code}) using mirror {mirror} "
            f"(set {MIRROR_ENV} to use another):\n" + "\n".join([*said, *log])
        )


def _tail_lines(path: Path, count: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-count:]
    except OSError:
        return []


def _customize_debian(rootfs: Path, uid: int, gid: int) -> None:
    _add_sandbox_account(rootfs / "etc", uid, gid)
    workspace = rootfs / "workspace"
    workspace.mkdir(exist_ok=True)
    os.chown(workspace, uid, gid)
    workspace.chmod(0o755)
    for tmp in ("tmp", "var/tmp"):
        (rootfs / tmp).mkdir(parents=True, exist_ok=True)
        (rootfs / tmp).chmod(_STICKY)
    _trim(rootfs)


def _add_sandbox_account(etc: Path, uid: int, gid: int) -> None:
    if gid != 0 and not _has_id(etc / "group", gid):
        _append_line(etc / "group", f"sandbox:x:{gid}:")
        _append_line(etc / "gshadow", "sandbox:!::")
    if uid != 0 and not _has_id(etc / "passwd", uid):
        _append_line(etc / "passwd", f"sandbox:x:{uid}:{gid}:Boxyard sandbox:/workspace:/bin/bash")
        _append_line(etc / "shadow", "sandbox:!::0:99999:7:::")


def _has_id(path: Path, number: int) -> bool:
    """Whether a passwd/group file already has an entry with this id (or named sandbox)."""
    for line in path.read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 2 and (fields[0] == "sandbox" or fields[2] == str(number)):
            return True
    return False


def _append_line(path: Path, line: str) -> None:
    if not path.exists():
        return
    text = path.read_text()
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + line + "\n")


# Emptied, not removed: packages expect these directories to exist.
_EMPTIED = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "dev",  # Docker mounts its own /dev; the host's device nodes need not ship.
)
# Copied from the build host by debootstrap; Docker provides its own per container.
_HOST_FILES = ("etc/resolv.conf", "etc/hostname", "etc/hosts")


def _trim(rootfs: Path) -> None:
    for relative in _EMPTIED:
        directory = rootfs / relative
        if directory.is_dir() and not directory.is_symlink():
            _empty(directory)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for log in (rootfs / "var/log").rglob("*"):
        if not log.is_dir():
            log.unlink()
    for relative in _HOST_FILES:
        (rootfs / relative).unlink(missing_ok=True)
    shutil.rmtree(rootfs / "debootstrap", ignore_errors=True)


def _empty(directory: Path) -> None:
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _write_tree_tar(rootfs: Path, tar_path: Path) -> None:
    """Tar the tree as-is: numeric owners, modes, symlinks, hardlinks, sorted names."""
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(rootfs, arcname=".", filter=_numeric_owner)


def _numeric_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uname = info.gname = ""
    info.mtime = int(info.mtime)
    return info
