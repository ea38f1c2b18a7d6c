"""Workspace disks: a hard size limit on every sandbox's /workspace, on any Docker Engine.

A named volume of the local driver has no size limit, and the storage driver's own quotas
exist only on some hosts (overlay2 on XFS with project quotas). So each workspace gets a
disk of its own: a sparse file holding an ext4 file system of exactly the workspace's size,
attached to a loop device, and the workspace volume is that device (the local driver mounts
`type=ext4,device=/dev/loopN`). Writes past the size fail with ENOSPC inside the sandbox;
the host never gives a workspace more than its size.

Everything goes through the Docker API, so it works on a remote engine too: the disk files
live in one volume of the engine's (`boxyard-disks`), and one long-lived helper container
per engine, the keeper, makes, attaches, grows and removes them. Their files have random names
(see SCRIPT): the kernel shows every sandbox the name of each loop device's file. The keeper may only make
loop devices and attach files to them (CAP_SYS_ADMIN, CAP_MKNOD, block devices of major 7
and /dev/loop-control); it has no network and runs nothing but the script below, by exec.

Loop devices do not survive a restart of the engine's host. Every container start first
asks the keeper to attach the workspace's disk (a no-op when it is attached), and the volume
is made again whenever the device it names is not the disk's, so a workspace never mounts a
device that now holds another one. An engine's restart (not its host's) keeps the devices
attached: the keeper, started again with a fresh /dev, makes the nodes of the loop devices
the kernel has before it looks, and finds the disk where it is.
"""

import logging
import threading
from typing import Any

import docker.errors
from django.conf import settings
from docker.types import Mount as DockerMount

from boxyard.errors import N_, ImageMissing, RuntimeFailure
from sandboxes.runtime import (
    LABEL_MANAGED,
    LABEL_ROLE,
    ROOT,
    WorkspaceInfo,
)

log = logging.getLogger(__name__)

KEEPER = "boxyard-disks"
DISKS_VOLUME = "boxyard-disks"
# On a workspace volume that is a disk: its size in MiB.
LABEL_DISK = "io.boxyard.disk-mb"
MIB = 1024 * 1024

# The keeper's last line after a success. The engine may drop the output of an exec that ends
# quickly (docker/docker-py#2042), so an answer without it is not taken: every operation is
# idempotent, and is asked again.
END = "=end"
ATTEMPTS = 3

# argv: op name [size-mib owner idle]. Runs as root in the keeper, one at a time per engine
# (flock). `ensure` prints the loop device the disk is attached to and its size; `list` the
# keeper's clock, then each disk's last change and name.
#
# A disk's file has a random name that tells nothing, /disks/images/<32 hex>.img, and is
# attached by that name: anyone may read the name of a loop device's file in
# /sys/block/loop*/loop/backing_file, sandboxes too, and a workspace's name is its sandbox's
# id. The symlink /disks/names/<workspace> finds it. Disks were once named after their
# workspace (/disks/<workspace>.img): such a disk is renamed at the keeper's next operation,
# attached or not (the kernel shows the name a file has now). That name stays as a second link
# to the file, made for new disks too, so that a Boxyard of an earlier version sharing the
# engine (during a rolling upgrade) finds the same disk; it never attaches a disk by it.
SCRIPT = r"""
set -eu
trap '[ $? -ne 0 ] || echo "=end"' EXIT
op=$1; name=$2
case $name in ''|*[!A-Za-z0-9_.-]*) echo "bad disk name: $name" >&2; exit 2;; esac
mkdir -p /disks/images /disks/names
exec 9>>/disks/.lock
flock 9
# A keeper started anew (with its engine) has a fresh /dev: without a node for each loop
# device the kernel has, `losetup -j` would not see a disk attached before, and attach it
# again (leaking the first device when the disk is removed).
for sys in /sys/block/loop[0-9]*; do
  [ -e "$sys" ] || continue
  n=${sys##*/loop}
  [ -b "/dev/loop$n" ] || mknod "/dev/loop$n" b 7 "$n" 2>/dev/null || :
done
random() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
file_of() { t=$(readlink "/disks/names/$1" 2>/dev/null) || t=none.img; echo "/disks/images/${t##*/}"; }
detach() { for dev in $(losetup -j "$1" -n -O NAME 2>/dev/null); do losetup -d "$dev" || :; done; }
for old in /disks/*.img; do
  [ -f "$old" ] || continue
  was=${old##*/}; was=${was%.img}
  [ ! "$old" -ef "/disks/names/$was" ] || continue  # renamed already (no process forked)
  img=$(file_of "$was")
  # Made under the old name only, or made again there by an earlier version after it removed
  # the disk this one knew (that one is gone, then).
  if [ -f "$img" ]; then detach "$img"; rm -f "$img"; fi
  img=/disks/images/$(random).img
  ln -sfn "../images/${img##*/}" "/disks/names/$was"
  mv "$old" "$img"
  ln "$img" "$old"
done
if [ "$op" = list ]; then
  date +%s
  for link in /disks/names/*; do
    [ -L "$link" ] || continue
    changed=$(stat -L -c %Y "$link" 2>/dev/null || stat -c %Y "$link")
    echo "$changed ${link##*/}"
  done
  exit 0
fi
img=$(file_of "$name")
old=/disks/$name.img
attached() { losetup -j "$img" -n -O NAME 2>/dev/null | head -n 1; }
case $op in
ensure)
  mib=$3; owner=$4; idle=$5
  if [ ! -f "$img" ]; then
    img=/disks/images/$(random).img
    ln -sfn "../images/${img##*/}" "/disks/names/$name"
    truncate -s "${mib}M" "$img.new"
    mkfs.ext4 -q -F -m 0 -L workspace -E "root_owner=$owner,assume_storage_prezeroed=1" "$img.new" >&2
    debugfs -w -R "rmdir lost+found" "$img.new" >/dev/null 2>&1 || :
    mv "$img.new" "$img"
  fi
  [ -f "$old" ] || ln "$img" "$old"
  dev=$(attached)
  if [ "$idle" = 1 ] && [ $((mib * 1048576)) -gt "$(stat -c %s "$img")" ]; then
    # Asked to be larger while nothing mounts it: detach, grow, attach again.
    [ -z "$dev" ] || losetup -d "$dev"
    dev=
    truncate -s "${mib}M" "$img"
    e2fsck -f -p "$img" >&2 || [ $? -le 1 ]
    resize2fs "$img" >&2
  fi
  tries=0
  while [ -z "$dev" ]; do
    free=$(losetup -f)
    [ -b "$free" ] || mknod "$free" b 7 "${free#/dev/loop}"
    if losetup --direct-io=on "$free" "$img" 2>/dev/null; then dev=$free; fi
    tries=$((tries + 1))
    [ -n "$dev" ] || [ $tries -lt 20 ] || { echo "no loop device could be attached" >&2; exit 1; }
  done
  echo "$dev $(stat -c %s "$img")"
  ;;
remove)
  [ ! -f "$img" ] || detach "$img"
  rm -f "$img" "$img.new" "$old" "/disks/names/$name"
  ;;
*) echo "unknown op $op" >&2; exit 2;;
esac
"""


class WorkspaceDisks:
    """The disks of one engine's workspaces (see the module's docstring)."""

    def __init__(self, api: docker.APIClient) -> None:
        self.api = api
        self._lock = threading.Lock()
        self._keeper: str | None = None

    def ensure(self, name: str, labels: dict[str, str], size_mb: int) -> WorkspaceInfo:
        volume = self._volume(name)
        if volume is not None and LABEL_DISK not in (volume.get("Labels") or {}):
            # A workspace made before workspaces had disks: it goes on without a limit.
            return WorkspaceInfo(name=name, limit_bytes=None, created=False)
        users = self._containers_using(name)
        idle = not any(container["State"] == "running" for container in users)
        owner = settings.BOXYARD_SANDBOX_USER
        owner = owner if ":" in owner else f"{owner}:{owner}"
        answer = self._run("ensure", name, str(size_mb), owner, "1" if idle else "0")
        try:
            device, size = answer.split()
            size_bytes = int(size)
        except ValueError:
            raise RuntimeFailure(
                N_("the disk keeper answered %(said)r for %(name)s", said=answer, name=name)
            ) from None
        options = (volume or {}).get("Options") or {}
        if volume is not None and options.get("device") == device:
            return WorkspaceInfo(name=name, limit_bytes=size_bytes, created=False)
        # New, or naming a device that is not this disk's (the host restarted): made again.
        # Containers of earlier runs still name the volume; none of them is running.
        if volume is not None:
            for container in users:
                if container["State"] == "running":
                    raise RuntimeFailure(
                        N_(
                            "workspace %(name)s is mounted from %(mounted)s but its disk is "
                            "on %(device)s",
                            name=name,
                            mounted=options.get("device"),
                            device=device,
                        )
                    )
                self.api.remove_container(container["Id"], force=True)
            self.api.remove_volume(name, force=True)
        self.api.create_volume(
            name=name,
            driver="local",
            driver_opts={"type": "ext4", "device": device, "o": "nosuid,nodev"},
            labels={**labels, LABEL_DISK: str(size_bytes // MIB)},
        )
        return WorkspaceInfo(name=name, limit_bytes=size_bytes, created=volume is None)

    def remove(self, name: str) -> None:
        """The volume, then its disk; both may be gone already."""
        try:
            self.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            pass
        self._run("remove", name)

    def remove_orphans(self, older_than_seconds: float) -> list[str]:
        """Remove the disks of workspaces whose volume is gone (removed by something other
        than Boxyard's removal, which takes the disk along), left alone while younger than
        `older_than_seconds` (a workspace being made has its disk a moment before its
        volume). Nothing can mount a disk without its volume."""
        try:
            self.api.inspect_container(KEEPER)
        except docker.errors.NotFound:
            return []  # no disk was ever made on this engine
        lines = self._run("list", "all").splitlines()
        if not lines:
            return []
        now = int(lines[0])
        volumes = {volume["Name"] for volume in self.api.volumes().get("Volumes") or []}
        removed = []
        for line in lines[1:]:
            changed, _, name = line.partition(" ")
            if name not in volumes and now - int(changed) >= older_than_seconds:
                self._run("remove", name)
                removed.append(name)
        return removed

    def _volume(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.inspect_volume(name)
        except docker.errors.NotFound:
            return None

    def _containers_using(self, name: str) -> list[dict[str, Any]]:
        containers: list[dict[str, Any]] = self.api.containers(all=True, filters={"volume": name})
        return containers

    def _run(self, *args: str) -> str:
        """Run the script in the keeper and return its answer; a keeper that vanished is made
        again, and an answer the engine cut short is asked again."""
        for _ in range(ATTEMPTS):
            output = self._exec(args)
            lines = output.splitlines()
            if lines and lines[-1] == END:
                return "\n".join(lines[:-1]).strip()
            log.warning("the disk keeper's answer to %s came back cut: %r", args[0], output)
        raise RuntimeFailure(
            N_(
                "the workspace disk of %(name)s: %(step)s gave no answer",
                name=args[1],
                step=args[0],
            )
        )

    def _exec(self, args: tuple[str, ...]) -> str:
        for attempt in range(2):
            keeper = self._keeper_id()
            try:
                created = self.api.exec_create(
                    keeper, ["sh", "-c", SCRIPT, "boxyard-disk", *args], user=ROOT
                )
            except docker.errors.NotFound:
                self._keeper = None
                continue
            except docker.errors.APIError as error:
                if error.status_code == 409 and attempt == 0:  # not running: start it again
                    self._keeper = None
                    continue
                raise
            output = self.api.exec_start(created["Id"], demux=True)
            stdout, stderr = output if isinstance(output, tuple) else (output, b"")
            code = self.api.exec_inspect(created["Id"]).get("ExitCode")
            if code != 0:
                detail = (stderr or stdout or b"").decode(errors="replace").strip()[-500:]
                raise RuntimeFailure(
                    N_(
                        "the workspace disk of %(name)s: %(step)s failed: %(detail)s",
                        name=args[1],
                        step=args[0],
                        detail=detail,
                    )
                )
            return (stdout or b"").decode()
        raise RuntimeFailure(N_("the workspace disk keeper cannot be started"))

    def _keeper_id(self) -> str:
        with self._lock:
            if self._keeper is not None:
                return self._keeper
            try:
                data = self.api.inspect_container(KEEPER)
            except docker.errors.NotFound:
                data = None
            if data is None:
                self._keeper = self._create_keeper()
            else:
                self._keeper = data["Id"]
                if not (data.get("State") or {}).get("Running"):
                    self.api.start(self._keeper)
            return self._keeper

    def _create_keeper(self) -> str:
        image = settings.BOXYARD_DISK_IMAGE
        try:
            self.api.inspect_image(image)  # type: ignore[no-untyped-call]  # untyped in types-docker
        except docker.errors.ImageNotFound:
            raise ImageMissing(
                N_(
                    "the workspace disk keeper runs image %(image)s (mkfs.ext4, losetup, flock), "
                    "which the engine does not have: `manage.py build_images --default` builds it",
                    image=image,
                )
            ) from None
        try:
            self.api.create_volume(DISKS_VOLUME, labels={LABEL_MANAGED: "1", LABEL_ROLE: "disks"})
        except docker.errors.APIError:
            pass  # made meanwhile by another process
        host_config = self.api.create_host_config(
            mounts=[DockerMount(target="/disks", source=DISKS_VOLUME, type="volume")],
            cap_drop=["ALL"],
            cap_add=["SYS_ADMIN", "MKNOD"],
            devices=["/dev/loop-control:/dev/loop-control:rwm"],
            device_cgroup_rules=["b 7:* rwm"],
            security_opt=["no-new-privileges:true"],
            read_only=True,
            network_mode="none",
            pids_limit=64,
            mem_limit="256m",
            init=True,
            restart_policy={"Name": "unless-stopped"},
        )
        try:
            created = self.api.create_container(
                image,
                ["sleep", "infinity"],
                name=KEEPER,
                user=ROOT,
                labels={LABEL_MANAGED: "1", LABEL_ROLE: "disks"},
                host_config=host_config,
                network_disabled=True,
            )
            keeper: str = created["Id"]
        except docker.errors.APIError as error:
            if error.status_code != 409:
                raise
            keeper = self.api.inspect_container(KEEPER)["Id"]  # another process made it
        try:
            self.api.start(keeper)
        except docker.errors.APIError as error:
            if error.status_code != 304:
                raise
        return keeper
