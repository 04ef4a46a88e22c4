"""The root and data filesystems: unpack the base, add Maxy, write the ext4 images.

    python -m image.populate SPEC.json     (image/build.py runs this; not meant for people)

Ownership is the one thing an unprivileged build cannot do by itself: the base's files belong to
root and a few system groups, and ``mke2fs -d`` copies owners from ``lstat``. So this whole step
runs in ONE ownership context — as root where the builder is root (CI), else under ``fakeroot``,
whose LD_PRELOAD records every chown/chmod/mknod of ``tar``, ``debugfs``, Python and
``mke2fs`` in one session and answers their ``stat`` calls from that record. (``mke2fs -E
root_owner=`` only sets the top directory's owner, not the files'.) The real files on disk stay
the builder's; the images come out with root's, maxy's and the base's owners and modes.

Bases:

- a Debian base tarball (``image/base.py``): ``tar --numeric-owner -xp``;
- a Raspberry Pi OS Lite image: its root partition (ext4) is read with ``debugfs rdump``, which
  writes owners but drops setuid/setgid bits (it chmods before it chowns) and special files; so
  every directory is then listed with ``debugfs ls -p`` in one batch and each entry's owner and
  full mode are set again. Its boot partition (FAT) is copied out with ``mcopy``.

The kernel, initramfs and (Raspberry Pi) firmware and device trees are gathered into the boot
staging folder for ``image/build.py`` to put into the FAT boot slots.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from image import overlay
from image.errors import BuildFailed
from image.tools import debugfs, make_ext4, parse_ls_p, run, tree_size

log = logging.getLogger(__name__)

# maxy's folders on /data (the first boot makes any that are missing, too).
DATA_DIRS = {
    "accounts": 0o750,
    "keys": 0o700,
    "neo4j": 0o750,
    "cloudflared": 0o700,
    "home": 0o750,
    "logs": 0o750,
}
OVERLAY_DIRS = ("overlay/etc/upper", "overlay/etc/work", "overlay/var/upper", "overlay/var/work")


@dataclass
class Spec:
    """Everything this step reads and writes (written by image/build.py as JSON)."""

    arch: str  # "x86-64" or "arm64"
    base_kind: str  # "debian" (a tarball) or "rpios" (ext4 root + FAT boot images)
    base_root: Path
    base_boot: Path | None
    work: Path
    boot_dir: Path
    root_image: Path
    root_size_mib: int
    root_uuid: str
    data_image: Path
    data_size_mib: int
    data_uuid: str
    root: overlay.RootSpec

    @classmethod
    def load(cls, path: Path) -> Spec:
        """Read a spec file."""
        raw = json.loads(path.read_text())
        paths = ("base_root", "work", "boot_dir", "root_image", "data_image")
        for key in paths:
            raw[key] = Path(raw[key])
        raw["base_boot"] = Path(raw["base_boot"]) if raw["base_boot"] else None
        root = raw.pop("root")
        for key in (
            "binary",
            "neo4j_dist",
            "java_home",
            "model",
            "preset",
            "claude",
            "cloudflared",
        ):
            root[key] = Path(root[key]) if root[key] else None
        return cls(**raw, root=overlay.RootSpec(**root))

    def dump(self, path: Path) -> None:
        """Write a spec file."""

        def plain(value: object) -> object:
            if isinstance(value, Path):
                return str(value)
            if isinstance(value, list):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        fields = {k: plain(v) for k, v in vars(self).items() if k != "root"}
        fields["root"] = {k: plain(v) for k, v in vars(self.root).items()}
        path.write_text(json.dumps(fields, indent=1))


def unpack_tarball(tarball: Path, tree: Path) -> None:
    """Unpack a base tarball keeping numeric owners, modes and special files."""
    run(
        [
            "tar",
            "--numeric-owner",
            "--same-owner",
            "-p",
            "--xattrs",
            "--xattrs-include=*",
            "-I",
            "zstd",
            "-xf",
            tarball,
            "-C",
            tree,
        ]
    )


def unpack_ext4(image: Path, tree: Path) -> int:
    """Copy an ext4 image's files into ``tree`` with their owners and modes; return the count."""
    debugfs(image, f'rdump / "{tree}"')
    directories = ["/"]
    for root, dirs, _files in os.walk(tree):
        for name in dirs:
            path = Path(root, name)
            if not path.is_symlink():
                directories.append("/" + str(path.relative_to(tree)))
    listing = debugfs(image, *(f'ls -p "{d}"' for d in directories))
    fixed = skipped = 0
    sections = re.split(r"^debugfs: ls -p \"(.*)\"$", listing, flags=re.MULTILINE)
    for index in range(1, len(sections) - 1, 2):
        directory, output = sections[index], sections[index + 1]
        for entry in parse_ls_p(output):
            path = tree / directory.lstrip("/") / entry.name
            if entry.kind == "other" or not (path.exists() or path.is_symlink()):
                skipped += 1  # device nodes, fifos, sockets: /dev is a devtmpfs anyway
                continue
            os.lchown(path, entry.uid, entry.gid)
            if entry.kind != "link":
                os.chmod(path, entry.mode & 0o7777)  # after chown, which clears setuid bits
            fixed += 1
    root_entry = debugfs(image, "stat /")
    match = re.search(r"Mode:\s+0?(\d+)", root_entry)
    if match:
        os.chmod(tree, int(match.group(1), 8) & 0o7777)
    log.info("[image] op=unpack-ext4 entries=%d skipped_special=%d", fixed, skipped)
    return fixed


def _newest(paths: list[Path]) -> Path:
    def version_key(path: Path) -> list[int]:
        return [int(n) for n in re.findall(r"\d+", path.name)]

    return max(paths, key=version_key)


def gather_boot(spec: Spec, tree: Path) -> dict[str, str]:
    """Put the kernel, initramfs and firmware into ``boot_dir``; return kernel facts."""
    boot = spec.boot_dir
    shutil.rmtree(boot, ignore_errors=True)
    boot.mkdir(parents=True)
    if spec.base_kind == "rpios":
        assert spec.base_boot is not None
        run(["mcopy", "-s", "-p", "-m", "-i", spec.base_boot, "::/*", boot])
        for ours in ("config.txt", "cmdline.txt", "kernel.txt"):
            (boot / ours).unlink(missing_ok=True)
        (boot / "kernel.txt").write_text(
            "# Raspberry Pi OS kernels (kernel8.img, kernel_2712.img) and their initramfs.\n"
            "auto_initramfs=1\n"
        )
        return {"kernel": "raspberry-pi-os"}
    kernels = sorted((tree / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise BuildFailed(f"The base has no kernel in /boot (looked in {tree / 'boot'}).")
    kernel = _newest(kernels)
    release = kernel.name.removeprefix("vmlinuz-")
    initrd = tree / "boot" / f"initrd.img-{release}"
    if not initrd.is_file():
        raise BuildFailed(f"The base has no initramfs for kernel {release}.")
    shutil.move(kernel, boot / "vmlinuz")
    shutil.move(initrd, boot / "initrd.img")
    lines = ["kernel=vmlinuz", "initramfs initrd.img followkernel"]
    if spec.arch == "arm64":
        firmware = tree / "usr" / "lib" / "raspi-firmware"
        if not (firmware / "start4.elf").is_file():
            raise BuildFailed(f"The arm64 base has no Raspberry Pi firmware in {firmware}.")
        for item in sorted(firmware.iterdir()):
            if item.is_file():
                shutil.copyfile(item, boot / item.name)
        dtbs = tree / "usr" / "lib" / f"linux-image-{release}" / "broadcom"
        for dtb in sorted(dtbs.glob("bcm27*.dtb")):
            shutil.copyfile(dtb, boot / dtb.name)
        if not list(boot.glob("bcm2711-rpi-4-b.dtb")):
            raise BuildFailed(f"The arm64 kernel {release} has no Raspberry Pi 4 device tree.")
        lines.append("upstream_kernel=1")
    (boot / "kernel.txt").write_text(
        f"# Debian's kernel {release} and its initramfs.\n" + "\n".join(lines) + "\n"
    )
    return {"kernel": release}


def data_tree(path: Path) -> None:
    """The skeleton of /data: maxy's folders and the overlay directories."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for name, mode in DATA_DIRS.items():
        folder = path / name
        folder.mkdir()
        folder.chmod(mode)
        os.chown(folder, overlay.MAXY_UID, overlay.MAXY_GID)
    for name in OVERLAY_DIRS:
        (path / name).mkdir(parents=True, mode=0o755)
    for root, dirs, _files in os.walk(path / "overlay"):
        for name in dirs:
            os.chown(Path(root, name), 0, 0)
    os.chown(path / "overlay", 0, 0)
    os.chown(path, 0, 0)


def populate(spec: Spec) -> dict[str, object]:
    """Build the root and data images the spec describes; return facts for the build log."""
    if os.geteuid() != 0:
        raise BuildFailed(
            "image.populate must run as root or under fakeroot (image/build.py arranges that)."
        )
    tree = spec.work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    if spec.base_kind == "debian":
        unpack_tarball(spec.base_root, tree)
    else:
        unpack_ext4(spec.base_root, tree)
    facts: dict[str, object] = dict(gather_boot(spec, tree))
    overlay.apply(tree, spec.root)
    used = tree_size([tree])
    capacity = spec.root_size_mib * 1024 * 1024
    if used > capacity * 0.92:
        raise BuildFailed(
            f"The root tree holds {used / 1e6:.0f} MB; the root partition is "
            f"{spec.root_size_mib} MiB. Make ROOT_A/ROOT_B bigger in appliance/ota/layout.py "
            "or the image smaller."
        )
    make_ext4(spec.root_image, spec.root_size_mib, "root", spec.root_uuid, tree)
    skeleton = spec.work / "data-tree"
    data_tree(skeleton)
    make_ext4(spec.data_image, spec.data_size_mib, "data", spec.data_uuid, skeleton)
    facts["root_tree_bytes"] = used
    shutil.rmtree(tree)
    shutil.rmtree(skeleton)
    return facts


def main() -> None:
    """Run the step for one spec file; print its facts as JSON."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    spec = Spec.load(Path(sys.argv[1]))
    try:
        facts = populate(spec)
    except (BuildFailed, OSError, subprocess.SubprocessError) as err:
        print(f"[image] FATAL populate: {err}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
