"""The test image: a scratch filesystem around Debian's static busybox, its applet links and a
sandbox user, written as a tar in Python (byte for byte the same at every build)."""

import io
import struct
import subprocess
import tarfile
from pathlib import Path

from boxyard.errors import RuntimeFailure
from hosts.engines import get_runtime
from sandboxes.images.building import (
    LABEL_RECIPE,
    STICKY,
    Progress,
    build_dir,
    megabytes,
    sandbox_ids,
)
from sandboxes.runtime import LABEL_WORKSPACE_UID, Runtime

RECIPE = "busybox-1"
HOST_BUSYBOX = Path("/bin/busybox")
# A fixed mtime keeps the test image's tar byte-for-byte reproducible.
FIXED_MTIME = 1_700_000_000


def build(reference: str, progress: Progress, runtime: Runtime | None = None) -> None:
    uid, gid = sandbox_ids()
    busybox = _host_busybox()
    with build_dir("busybox-") as workdir:
        tar_path = workdir / "rootfs.tar"
        progress(f"Writing busybox root filesystem from {busybox}")
        _write_busybox_tar(tar_path, busybox, uid, gid)
        progress(f"Importing {reference} ({megabytes(tar_path)})")
        (runtime or get_runtime()).import_image(tar_path, reference, _changes(uid, gid))


def _changes(uid: int, gid: int) -> list[str]:
    return [
        f"USER {uid}:{gid}",
        "WORKDIR /workspace",
        "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV HOME=/workspace",
        'CMD ["sh"]',
        f"LABEL {LABEL_WORKSPACE_UID}={uid} {LABEL_RECIPE}={RECIPE}",
    ]


_TEST_DIRS = ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "home", "root", "proc", "sys")
_TEST_DIRS_TAIL = ("dev", "var")


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
    return sorted({p for p in listed if p.rpartition("/")[0] in bin_dirs and p != "bin/busybox"})


def _write_busybox_tar(tar_path: Path, busybox: Path, uid: int, gid: int) -> None:
    links = _applet_links(busybox)
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in _TEST_DIRS:
            tar.addfile(_entry(name, tarfile.DIRTYPE, 0o755))
        tar.addfile(_entry("tmp", tarfile.DIRTYPE, STICKY))
        for name in _TEST_DIRS_TAIL:
            tar.addfile(_entry(name, tarfile.DIRTYPE, 0o755))
        tar.addfile(_entry("var/tmp", tarfile.DIRTYPE, STICKY))
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
