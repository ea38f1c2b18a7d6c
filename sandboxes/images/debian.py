"""The Debian images, made by debootstrap (as root) from the host's Debian mirror, with python3,
the sandbox user and a trimmed tree: the default image, with the code interpreter's packages
(`build`), and the base image without them (`build_base`: the disks' keeper, small enough to
copy to a new host in seconds)."""

import os
import re
import shutil
import signal
import subprocess
import tarfile
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from boxyard.errors import RuntimeFailure
from hosts.engines import get_runtime
from sandboxes.images.building import (
    LABEL_RECIPE,
    STICKY,
    Progress,
    build_dir,
    megabytes,
    require_tool,
    sandbox_ids,
    tool_path,
    unmount_below,
)
from sandboxes.runtime import LABEL_WORKSPACE_UID, Runtime

RECIPE = "debian-bookworm-2"
BASE_RECIPE = "debian-bookworm-base-1"
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
# The code interpreter: a Jupyter kernel and what analyses use, there with the network off;
# and a JavaScript runtime. Installed by apt in the tree after debootstrap, without the
# packages they only recommend (debootstrap's own resolver would pick compilers and
# debuggers for their virtual dependencies).
CODE_PACKAGES = (
    "python3-ipykernel",
    "python3-numpy",
    "python3-pandas",
    "python3-matplotlib",
    "nodejs",
)
# Matplotlib's font list, made once at build time; the kernels copy it into their own
# writable cache so that a first chart does not scan the fonts.
MATPLOTLIB_CACHE = "/usr/local/share/boxyard/matplotlib"
FALLBACK_MIRROR = "http://deb.debian.org/debian"
MIRROR_ENV = "BOXYARD_DEBIAN_MIRROR"


def build(reference: str, progress: Progress, runtime: Runtime | None = None) -> None:
    """The default image: Debian with the code interpreter's packages."""
    _build(reference, progress, runtime, RECIPE, code=True)


def build_base(reference: str, progress: Progress, runtime: Runtime | None = None) -> None:
    """The base image: the same Debian without the code interpreter."""
    _build(reference, progress, runtime, BASE_RECIPE, code=False)


def _build(
    reference: str, progress: Progress, runtime: Runtime | None, recipe: str, *, code: bool
) -> None:
    uid, gid = sandbox_ids()
    if os.geteuid() != 0:
        raise RuntimeFailure(
            f"Building {reference} runs debootstrap, which needs root: "
            "run `manage.py build_images --default` as root."
        )
    debootstrap = require_tool("debootstrap")
    mirror = debian_mirror()
    with build_dir("debian-") as workdir:
        rootfs = workdir / "rootfs"
        progress(f"Running debootstrap {DEBIAN_SUITE} from {mirror}")
        _debootstrap(debootstrap, rootfs, mirror, progress)
        if still_mounted := unmount_below(rootfs):
            raise RuntimeFailure(f"Cannot unmount {', '.join(still_mounted)} after debootstrap")
        if code:
            progress(f"Installing {', '.join(CODE_PACKAGES)}")
            _install_code_packages(rootfs, progress)
        progress("Adding the sandbox user and trimming the tree")
        _customize_debian(rootfs, uid, gid)
        tar_path = workdir / "rootfs.tar"
        progress("Writing root filesystem tar")
        _write_tree_tar(rootfs, tar_path)
        progress(f"Importing {reference} ({megabytes(tar_path)})")
        (runtime or get_runtime()).import_image(tar_path, reference, _changes(uid, gid, recipe))


def debian_mirror() -> str:
    """The mirror for debootstrap: $BOXYARD_DEBIAN_MIRROR, else the host's apt sources."""
    if override := os.environ.get(MIRROR_ENV, "").strip():
        return override
    for uri in _apt_source_uris():
        if _is_debian_archive(uri):
            return uri
    return FALLBACK_MIRROR


def _changes(uid: int, gid: int, recipe: str) -> list[str]:
    return [
        f"USER {uid}:{gid}",
        "WORKDIR /workspace",
        "ENV HOME=/workspace",
        "ENV LANG=C.UTF-8",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'CMD ["bash"]',
        f"LABEL {LABEL_WORKSPACE_UID}={uid} {LABEL_RECIPE}={recipe}",
    ]


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
    return (
        uri.startswith(("http://", "https://", "file:/"))
        and "debian" in uri
        and ("security" not in uri)
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
    env = {**os.environ, "PATH": tool_path(), "DEBIAN_FRONTEND": "noninteractive"}
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


def _install_code_packages(rootfs: Path, progress: Progress) -> None:
    """apt-get in the new tree (chroot): the code interpreter's packages, then matplotlib's
    font list made once."""
    chroot = require_tool("chroot")
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc/resolv.conf")
    env = {"PATH": tool_path(), "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}
    cache = MATPLOTLIB_CACHE
    steps = (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *CODE_PACKAGES],
        ["env", f"MPLCONFIGDIR={cache}", "python3", "-c", "import matplotlib.font_manager"],
        ["chmod", "-R", "a+rX", cache],
    )
    for step in steps:
        said: deque[str] = deque(maxlen=10)
        process = subprocess.run(
            [chroot, str(rootfs), *step],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            check=False,
        )
        for line in process.stdout.splitlines():
            if line := line.rstrip():
                said.append(line)
        progress(f"{step[0]} {step[1]}: exit {process.returncode}")
        if process.returncode != 0:
            raise RuntimeFailure(
                f"{' '.join(step[:3])} failed (exit {process.returncode}):\n" + "\n".join(said)
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
        (rootfs / tmp).chmod(STICKY)
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
