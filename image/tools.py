"""The programs the builder drives, each wrapped once: mkfs.vfat + mtools, mke2fs + debugfs, sfdisk.

Nothing here mounts anything: FAT filesystems are written with ``mcopy``, ext4 with
``mke2fs -d`` from a directory, and both are read back with ``mtools`` and ``debugfs`` (the
tests use the same readers).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance.core import proc
from appliance.firstboot import parse_mountinfo
from image.errors import BuildFailed, ToolMissing

log = logging.getLogger(__name__)

# Debian puts mkfs.vfat, mke2fs, debugfs and sfdisk in /usr/sbin, which a normal user's PATH lacks.
SBIN_PATH = ":".join(
    dict.fromkeys(
        p for p in [*os.environ.get("PATH", "/usr/bin:/bin").split(":"), "/usr/sbin", "/sbin"] if p
    )
)
PACKAGE_OF = {
    "debootstrap": "debootstrap",
    "mkfs.vfat": "dosfstools",
    "mcopy": "mtools",
    "mdir": "mtools",
    "mtype": "mtools",
    "mmd": "mtools",
    "mke2fs": "e2fsprogs",
    "debugfs": "e2fsprogs",
    "sfdisk": "fdisk",
    "zstd": "zstd",
    "fakeroot": "fakeroot",
    "tar": "tar",
    "syslinux": "syslinux",
}


# Capability bits (linux/capability.h) the privileged steps use.
CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_SYS_CHROOT, CAP_SYS_ADMIN, CAP_MKNOD = (
    0,
    1,
    3,
    18,
    21,
    27,
)


def has_capabilities(*caps: int) -> bool:
    """Whether this process is root with every one of ``caps`` in its effective set.

    Root is a set of capabilities, not a uid: uid 0 with its capabilities dropped (a container,
    ``setpriv --bounding-set=-all``) can neither chown nor mknod nor mount, so it is treated as
    unprivileged (and the build uses fakeroot).
    """
    if os.geteuid() != 0:
        return False
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return True
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            effective = int(line.split()[1], 16)
            return all(effective >> cap & 1 for cap in caps)
    return True


def can_own_files() -> bool:
    """Whether files can be given any owner and device nodes made (root with its capabilities)."""
    return has_capabilities(CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_MKNOD)


def which(program: str) -> str:
    """The full path of ``program`` (also searching /usr/sbin), or ToolMissing."""
    found = shutil.which(program, path=SBIN_PATH)
    if found is None:
        package = PACKAGE_OF.get(program, program)
        raise ToolMissing(
            f"`{program}` is not installed. Install it with `apt-get install {package}`."
        )
    return found


def run(
    args: Sequence[str | Path],
    *,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 3600,
) -> bytes:
    """Run a program, return its stdout; BuildFailed (with its stderr) when it fails."""
    argv = [str(a) for a in args]
    argv[0] = which(argv[0]) if "/" not in argv[0] else argv[0]
    merged = dict(os.environ, MTOOLS_SKIP_CHECK="1", PATH=SBIN_PATH)
    merged.update(env or {})
    try:
        done = proc.run(argv, input=input, env=merged, cwd=cwd, timeout=timeout)
    except proc.ToolError as err:
        raise BuildFailed(f"{err}.") from err
    if done.returncode != 0:
        said = done.stderr.strip()[-3000:]
        raise BuildFailed(f"`{' '.join(argv[:6])}…` failed (exit {done.returncode}): {said}")
    return done.stdout_bytes


# ---- mounts ------------------------------------------------------------------------------

# A command run behind this prefix mounts into a mount namespace of its own: whatever it mounts
# (debootstrap's /proc and /sys in the target, a chroot's /proc) goes away when it exits, and
# also when it is killed, instead of staying mounted under the build's work directory.
PRIVATE_MOUNTS = ("unshare", "--mount", "--propagation", "private")


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below ``path`` in this process's mount namespace, deepest first."""
    root = path.resolve()
    points = [m.point for m in parse_mountinfo(Path("/proc/self/mountinfo").read_text())]
    found = [p for p in points if p == root or root in p.parents]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def release_mounts(path: Path) -> None:
    """Unmount whatever is still mounted below ``path`` (left by a build killed mid-way)."""
    for point in mounts_under(path):
        log.warning("[image] op=unmount-leftover path=%s", point)
        run(["umount", "--lazy", point])


# ---- FAT ----------------------------------------------------------------------------------


def make_fat(image: Path, size_mib: int, label: str, volume_id: str, files: Path) -> None:
    """Write a FAT filesystem of ``size_mib`` into ``image`` holding the tree ``files``."""
    image.unlink(missing_ok=True)
    with image.open("wb") as handle:
        handle.truncate(size_mib * 1024 * 1024)
    fat = ["-F", "32"] if size_mib >= 64 else []
    run(["mkfs.vfat", *fat, "-n", label.upper()[:11], "-i", volume_id, str(image)])
    entries = sorted(files.iterdir())
    if entries:
        run(["mcopy", "-s", "-p", "-m", "-i", image, *entries, "::/"])


def fat_list(image: Path, directory: str = "/") -> list[str]:
    """Names in one directory of a FAT image, hidden ones too (``mdir -a -b``)."""
    out = run(["mdir", "-a", "-b", "-i", image, "::" + directory]).decode()
    prefix = "::" + directory.rstrip("/") + "/"
    return sorted(line.strip()[len(prefix) :] for line in out.splitlines() if line.strip())


def fat_read(image: Path, path: str) -> bytes:
    """The bytes of one file of a FAT image (``mtype``-free: ``mcopy`` to stdout)."""
    return run(["mcopy", "-n", "-i", image, "::" + path, "-"])


def fat_write(image: Path, path: str, data: bytes, scratch: Path) -> None:
    """Replace one file of a FAT image."""
    scratch.write_bytes(data)
    run(["mcopy", "-o", "-i", image, scratch, "::" + path])
    scratch.unlink()


# ---- ext4 ---------------------------------------------------------------------------------


def make_ext4(image: Path, size_mib: int, label: str, fs_uuid: str, tree: Path) -> None:
    """Write an ext4 filesystem of ``size_mib`` into ``image`` populated from ``tree``.

    ``mke2fs -d`` copies owners, modes (setuid bits included), symlinks, hard links, device
    nodes and extended attributes as ``lstat`` reports them; run it as root or under the same
    ``fakeroot`` session that unpacked the tree, so those are root's and not the builder's.
    """
    image.unlink(missing_ok=True)
    with image.open("wb") as handle:
        handle.truncate(size_mib * 1024 * 1024)
    run(
        [
            "mke2fs",
            "-q",
            "-F",
            "-t",
            "ext4",
            "-b",
            "4096",
            "-L",
            label,
            "-U",
            fs_uuid,
            "-E",
            f"root_owner=0:0,hash_seed={fs_uuid}",
            "-d",
            tree,
            image,
        ],
        env={"E2FSPROGS_FAKE_TIME": os.environ.get("SOURCE_DATE_EPOCH", "")}
        if os.environ.get("SOURCE_DATE_EPOCH")
        else None,
    )


def debugfs(image: Path, *commands: str) -> str:
    """Run debugfs requests (read-only) against an ext4 image; return their output."""
    script = "\n".join(commands) + "\n"
    return run(["debugfs", "-f", "-", image], input=script.encode()).decode(errors="replace")


def ext4_read(image: Path, path: str) -> bytes:
    """The bytes of one file of an ext4 image (``debugfs cat``)."""
    return run(["debugfs", "-R", f"cat {path}", image])


@dataclass(frozen=True)
class Ext4Entry:
    """One directory entry as ``debugfs ls -p`` reports it."""

    name: str
    inode: int
    mode: int
    uid: int
    gid: int
    size: int

    @property
    def kind(self) -> str:
        """'dir', 'file', 'link' or 'other', from the mode's file type bits."""
        return {0o040000: "dir", 0o100000: "file", 0o120000: "link"}.get(
            self.mode & 0o170000, "other"
        )


def parse_ls_p(output: str) -> list[Ext4Entry]:
    """Parse ``debugfs ls -p`` lines: ``/inode/mode/uid/gid/name/size/``."""
    entries = []
    for line in output.splitlines():
        if not line.startswith("/") or line.count("/") < 7:
            continue
        inode, mode, uid, gid, rest = line[1:].split("/", 4)
        name, size, _ = rest.rsplit("/", 2)
        if name in (".", "..") or not inode.isdigit() or inode == "0":
            continue
        entries.append(
            Ext4Entry(name, int(inode), int(mode, 8), int(uid), int(gid), int(size or 0))
        )
    return entries


def ext4_list(image: Path, directory: str) -> list[Ext4Entry]:
    """The entries of one directory of an ext4 image."""
    return parse_ls_p(debugfs(image, f"ls -p {directory}"))


def ext4_stat(image: Path, path: str) -> Ext4Entry | None:
    """The entry of one path of an ext4 image, or None when it does not exist."""
    parent, _, name = path.rstrip("/").rpartition("/")
    for entry in ext4_list(image, parent or "/"):
        if entry.name == name:
            return entry
    return None


def ext4_readlink(image: Path, path: str) -> str:
    """The target of a symbolic link in an ext4 image."""
    out = debugfs(image, f"stat {path}")
    for line in out.splitlines():
        if line.startswith("Fast link dest:"):
            return line.split(":", 1)[1].strip().strip('"')
    # A long target lives in a data block: read it like a file.
    return ext4_read(image, path).decode()


# ---- partition table ----------------------------------------------------------------------


def sfdisk_write(disk: Path, script: str) -> None:
    """Write a partition table to a disk image file from an sfdisk script."""
    run(
        ["sfdisk", "--no-reread", "--no-tell-kernel", "--wipe", "never", disk],
        input=script.encode(),
    )


def sfdisk_read(disk: Path) -> dict[str, object]:
    """The partition table of a disk image (``sfdisk --json``)."""
    table: dict[str, object] = json.loads(run(["sfdisk", "--json", disk]))["partitiontable"]
    return table


def copy_into(disk: Path, offset: int, source: Path, block: int = 1 << 20) -> None:
    """Copy ``source`` into ``disk`` at ``offset``, leaving holes where it is all zeros."""
    zero = bytes(block)
    with source.open("rb") as src, disk.open("r+b") as dst:
        dst.seek(offset)
        for chunk in iter(lambda: src.read(block), b""):
            if chunk == zero[: len(chunk)]:
                dst.seek(len(chunk), os.SEEK_CUR)
            else:
                dst.write(chunk)


def copy_out(disk: Path, offset: int, size: int, target: Path, block: int = 1 << 20) -> None:
    """Copy ``size`` bytes of ``disk`` from ``offset`` into a new (sparse) file ``target``."""
    zero = bytes(block)
    with disk.open("rb") as src, target.open("wb") as dst:
        src.seek(offset)
        left = size
        while left > 0:
            chunk = src.read(min(block, left))
            if not chunk:
                break
            if chunk == zero[: len(chunk)]:
                dst.seek(len(chunk), os.SEEK_CUR)
            else:
                dst.write(chunk)
            left -= len(chunk)
        dst.truncate(size)


def tree_size(paths: Iterable[Path]) -> int:
    """Bytes of all regular files under ``paths`` (symlinks not followed)."""
    total = 0
    for top in paths:
        for root, _dirs, files in os.walk(top):
            for name in files:
                path = Path(root, name)
                if not path.is_symlink():
                    total += path.stat().st_size
    return total
