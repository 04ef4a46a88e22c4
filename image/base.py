"""The Debian base of the image: debootstrap once, keep the result as a tarball in the cache.

    python -m image.base --arch x86-64|arm64      (behind `just image-base`; needs root)

The base is Debian ``bookworm``, ``minbase`` variant, plus what the appliance needs (systemd,
udev, Avahi, the growpart and filesystem tools, a kernel and initramfs-tools; for arm64 the
Raspberry Pi firmware and kernel that Debian packages). It is cached as
``$MAXY_CACHE_DIR/image/base-<arch>-<key>.tar.zst``, ``<key>`` a hash of the suite, the
architecture, the components and the package list, so a change of any of them makes a new base
and a second build reuses the first's in seconds.

The packages come from this machine's configured apt mirror (read from
``/etc/apt/sources.list.d/*.sources`` and ``/etc/apt/sources.list`` at run time; ``--mirror``
overrides it).

debootstrap is the one step that needs root (it unpacks as root and chroots to configure the
packages). Without root the build stops with a message that says to run
``sudo just image-base ARCH=…`` once; everything after the base runs unprivileged (see
``image/populate.py``).

arm64 on an x86-64 builder: debootstrap's first stage (``--foreign``) downloads and unpacks the
arm64 packages without running any of them; the second stage (``chroot … /debootstrap/debootstrap
--second-stage``) runs their maintainer scripts under qemu-user-static through binfmt_misc
(``apt-get install qemu-user-static``; the builder mounts binfmt_misc and registers
``/usr/lib/binfmt.d/qemu-aarch64.conf`` when the kernel has no ``qemu-aarch64`` entry yet).

The arm64 initramfs holds the boot path of the hardware it is for, not every module Debian's
kernel has (``MODULES=most``, initramfs-tools' default, copies 118 MB, most of it network,
SCSI and graphics drivers): a Raspberry Pi 4/5 starts from SD, USB or NVMe, and
``qemu-system-aarch64 -M virt`` from virtio. :func:`initramfs_files` are written into the root
before debootstrap configures the kernel (``MODULES=list`` plus a hook naming the groups), so the
``update-initramfs`` of the kernel's installation copies far fewer modules. Under qemu-user
that step was most of the arm64 base's time (each copied module is several emulated
processes); on the Pi, a smaller initramfs loads faster from the card.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from image.errors import BuildFailed, NeedsRoot, ToolMissing
from image.tools import (
    CAP_CHOWN,
    CAP_MKNOD,
    CAP_SYS_ADMIN,
    CAP_SYS_CHROOT,
    PRIVATE_MOUNTS,
    has_capabilities,
    release_mounts,
    run,
    which,
)

log = logging.getLogger(__name__)

SUITE = "bookworm"
VARIANT = "minbase"
# raspi-firmware is in non-free-firmware (the Raspberry Pi's closed boot firmware).
COMPONENTS = ("main", "non-free-firmware")
# Bumped when the way the base is made changes without the package list changing.
# 2: the initramfs is made once, after every package is configured (see _initramfs).
RECIPE = 2

# Image architecture names (as `just image ARCH=` takes them) → Debian architectures.
DEBIAN_ARCH = {"x86-64": "amd64", "arm64": "arm64"}
UNAME_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}

COMMON_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "systemd-resolved",
    "systemd-timesyncd",  # a Pi has no real-time clock: TLS needs the time
    "udev",
    "dbus",
    "kmod",
    "avahi-daemon",
    "libnss-mdns",
    "e2fsprogs",
    "cloud-guest-utils",  # growpart, for /data on first boot
    "fdisk",  # sfdisk, which growpart uses on GPT
    "dosfstools",
    "mtools",  # maxy ota reads and writes the FAT partitions with mtools
    "ca-certificates",
    "zstd",
    "iproute2",
    "initramfs-tools",
)
ARCH_PACKAGES = {
    "amd64": ("linux-image-amd64",),
    "arm64": ("linux-image-arm64", "raspi-firmware"),
}


# The arm64 card's initramfs: initramfs-tools' own module groups for a machine that starts from
# local storage (``base``: file systems, USB hosts, clocks, GPIO, regulators, resets, PCI
# controllers, PHYs, keyboards; ``mmc``; ``usb_storage``; ``block``: virtio and NVMe) — what
# ``MODULES=most`` takes, less its network, SCSI, ATA, IDE, FireWire, DASD and framebuffer
# groups — plus the Pi's firmware mailbox, DMA and SoC drivers and the SCSI disk for USB sticks.
ARM64_GROUPS = ("base", "mmc", "usb_storage", "block")
ARM64_BOOT_DIRS = (
    "kernel/drivers/firmware",
    "kernel/drivers/mailbox",
    "kernel/drivers/dma",
    "kernel/drivers/soc",
)
ARM64_BOOT_MODULES = ("sd_mod", "uas", "virtio_scsi", "crc32c_generic")


def initramfs_files(arch: str) -> dict[str, str]:
    """Files put into the root before debootstrap configures the kernel (path → text)."""
    if arch != "arm64":
        return {}
    hook = "\n".join(
        [
            "#!/bin/sh",
            "# Maxy (image/base.py): the arm64 card's boot path, copied into the initramfs.",
            'case "$1" in prereqs) exit 0 ;; esac',
            ". /usr/share/initramfs-tools/hook-functions",
            f"auto_add_modules {' '.join(ARM64_GROUPS)}",
            *[f"copy_modules_dir {folder}" for folder in ARM64_BOOT_DIRS],
            f"manual_add_modules {' '.join(ARM64_BOOT_MODULES)}",
            "",
        ]
    )
    return {
        "etc/initramfs-tools/conf.d/maxy-modules": "# Maxy: see the hook\nMODULES=list\n",
        "etc/initramfs-tools/hooks/maxy-boot-modules": hook,
    }


def packages(arch: str) -> tuple[str, ...]:
    """The packages the base of one Debian architecture adds to minbase."""
    return COMMON_PACKAGES + ARCH_PACKAGES[arch]


def base_key(arch: str) -> str:
    """The cache key of a base: a hash of everything that decides its content."""
    recipe = {
        "suite": SUITE,
        "arch": arch,
        "variant": VARIANT,
        "components": COMPONENTS,
        "packages": sorted(packages(arch)),
        "recipe": RECIPE,
    }
    if initramfs_files(arch):
        recipe["initramfs"] = initramfs_files(arch)
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def base_tarball(cache_dir: Path, arch: str) -> Path:
    """Where the cached base of ``arch`` lives (it may not exist yet)."""
    return cache_dir / "image" / f"base-{arch}-{base_key(arch)}.tar.zst"


def _deb822_uris(text: str) -> list[tuple[str, str]]:
    """(URI, suites) of every ``Types: deb`` stanza of a deb822 sources file."""
    found = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
            for uri in fields.get("uris", "").split():
                found.append((uri, fields.get("suites", "")))
    return found


def apt_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses for the main suite (not security)."""
    candidates: list[tuple[str, str]] = []
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        candidates += _deb822_uris(path.read_text(errors="replace"))
    legacy = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in legacy:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            match = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if match:
                candidates.append((match.group(1), match.group(2)))
    for uri, suites in candidates:
        if "security" in uri or "security" in suites:
            continue
        if re.search(r"\b(bookworm|trixie|stable|testing|sid|unstable)\b", suites) or not suites:
            return uri.rstrip("/")
    raise BuildFailed(
        "No Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list. "
        "Pass one with --mirror URL."
    )


def _ensure_binfmt(arch: str) -> None:
    """Make the kernel run ``arch`` binaries through qemu-user-static (root only)."""
    name = "qemu-" + UNAME_ARCH[arch]
    misc = Path("/proc/sys/fs/binfmt_misc")
    if (misc / name).is_file() and "enabled" in (misc / name).read_text():
        return
    conf = Path("/usr/lib/binfmt.d") / f"{name}.conf"
    if not conf.is_file():
        raise ToolMissing(
            f"Running {arch} packages' scripts on this {platform.machine()} machine needs "
            "qemu-user-static: `apt-get install qemu-user-static`."
        )
    if not (misc / "register").exists():
        run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(misc)])
    if not (misc / name).exists():
        (misc / "register").write_text(conf.read_text().strip())
    log.info("[image] op=binfmt-register name=%s", name)


def _debootstrap(target: Path, arch: str, mirror: str) -> None:
    foreign = UNAME_ARCH[arch] != platform.machine()
    args = [
        which("debootstrap"),
        f"--variant={VARIANT}",
        f"--arch={arch}",
        f"--components={','.join(COMPONENTS)}",
        f"--include={','.join(packages(arch))}",
    ]
    if foreign:
        args.append("--foreign")
    # The raspi-firmware hooks copy kernels into /boot/firmware; the directory must exist.
    if arch == "arm64":
        (target / "boot" / "firmware").mkdir(parents=True, exist_ok=True)
    for name, text in initramfs_files(arch).items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if "/hooks/" in name else 0o644)
    # INITRD=No: the kernel's installation makes no initramfs (_initramfs makes it once, after).
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C.UTF-8", INITRD="No")
    stages = [[*args, SUITE, str(target), mirror]]
    if foreign:
        stages.append(["chroot", str(target), "/debootstrap/debootstrap", "--second-stage"])
    for stage in stages:
        log.info("[image] op=debootstrap arch=%s stage=%s", arch, " ".join(stage[1:3]))
        done = subprocess.run(
            [*PRIVATE_MOUNTS, *stage], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            details = target / "debootstrap" / "debootstrap.log"
            tail = details.read_text(errors="replace")[-3000:] if details.is_file() else ""
            raise BuildFailed(
                f"debootstrap failed (exit {done.returncode}): {done.stderr[-2000:]}\n{tail}"
            )


def _initramfs(target: Path) -> None:
    """Make each installed kernel's initramfs, once.

    Left to the packages, the initramfs is made twice: by the kernel's installation, then again
    by the initramfs-tools trigger that the later packages (udev, kmod, …) fire. Under qemu-user
    each run costs tens of minutes, so debootstrap runs with INITRD=No (the kernel's hook skips
    it, and the trigger finds no initramfs to update) and it is made here, with every package
    configured and every hook in place.
    """
    env = dict(os.environ, LC_ALL="C.UTF-8", PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    for modules in sorted((target / "usr/lib/modules").glob("*")):
        version = modules.name
        log.info("[image] op=initramfs kernel=%s", version)
        # In a mount namespace of its own: /proc for the chroot, gone with the namespace.
        script = 'mount -t proc proc "$1/proc" && exec chroot "$1" update-initramfs -c -k "$2"'
        done = subprocess.run(
            [*PRIVATE_MOUNTS, "sh", "-c", script, "-", str(target), version],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not (target / "boot" / f"initrd.img-{version}").is_file():
            raise BuildFailed(
                f"update-initramfs for kernel {version} failed (exit {done.returncode}): "
                f"{(done.stdout + done.stderr)[-2000:]}"
            )


def build_base(cache_dir: Path, arch: str, mirror: str | None = None) -> Path:
    """Make the cached base tarball of ``arch`` unless it exists; return its path."""
    tarball = base_tarball(cache_dir, arch)
    if tarball.is_file():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    # Two builds (two test sessions, `just image` beside a test run) make one base, once.
    with tarball.with_name(tarball.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return tarball if tarball.is_file() else _build_base(tarball, arch, mirror)


def _build_base(tarball: Path, arch: str, mirror: str | None) -> Path:
    if not has_capabilities(CAP_CHOWN, CAP_MKNOD, CAP_SYS_CHROOT, CAP_SYS_ADMIN):
        raise NeedsRoot(
            f"The Debian {arch} base is not in the cache yet ({tarball.name}) and making it "
            "needs root once (debootstrap unpacks as root and chroots). Run "
            f"`sudo -E just image-base ARCH={'x86-64' if arch == 'amd64' else arch}` once; "
            "`just image` then runs unprivileged."
        )
    mirror = mirror or apt_mirror()
    if UNAME_ARCH[arch] != platform.machine():
        _ensure_binfmt(arch)
    work = tarball.with_name(tarball.name + ".work")
    release_mounts(work)
    shutil.rmtree(work, ignore_errors=True)
    target = work / "root"
    target.mkdir(parents=True)
    started = time.monotonic()
    _debootstrap(target, arch, mirror)
    _initramfs(target)
    # Downloaded packages and indexes are not part of an appliance.
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (target / leftover).glob("*"):
            if path.is_file() and path.name != "lock":
                path.unlink()
    manifest = {
        "suite": SUITE,
        "arch": arch,
        "packages": list(packages(arch)),
        "installed": _installed(target),
        "debootstrapSeconds": round(time.monotonic() - started),
        "initramfsBytes": {
            p.name: p.stat().st_size for p in (target / "boot").glob("initrd.img-*")
        },
    }
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    partial = tarball.with_name(tarball.name + ".partial")
    with partial.open("wb") as out:
        tar = subprocess.Popen(
            [
                "tar",
                "--numeric-owner",
                "--xattrs",
                "--xattrs-include=*",
                "-C",
                str(target),
                "-cf",
                "-",
                ".",
            ],
            stdout=subprocess.PIPE,
        )
        assert tar.stdout is not None
        done = subprocess.run(
            ["zstd", "-q", "-T0", "-6"], stdin=tar.stdout, stdout=out, check=False
        )
        tar.stdout.close()
        if tar.wait() != 0 or done.returncode != 0:
            raise BuildFailed(f"Packing the base into {partial} failed.")
    shutil.copy(work / "manifest.json", tarball.with_suffix("").with_suffix(".json"))
    os.replace(partial, tarball)
    shutil.rmtree(work)
    log.info(
        "[image] op=base-built arch=%s seconds=%d bytes=%d path=%s",
        arch,
        time.monotonic() - started,
        tarball.stat().st_size,
        tarball,
    )
    return tarball


def _installed(target: Path) -> dict[str, str]:
    """Package → version of what debootstrap installed (from dpkg's status file)."""
    status = (target / "var/lib/dpkg/status").read_text(errors="replace")
    found = {}
    for stanza in status.split("\n\n"):
        name = re.search(r"^Package: (\S+)", stanza, re.MULTILINE)
        version = re.search(r"^Version: (\S+)", stanza, re.MULTILINE)
        if name and version and "install ok installed" in stanza:
            found[name.group(1)] = version.group(1)
    return found


def main() -> None:
    """Build the base of one architecture (needs root once)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(DEBIAN_ARCH), default="x86-64")
    parser.add_argument("--mirror", help="Debian mirror URL (default: this machine's apt mirror)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("MAXY_CACHE_DIR", "~/.cache/maxy")).expanduser(),
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(build_base(args.cache_dir, DEBIAN_ARCH[args.arch], args.mirror))
    except (NeedsRoot, ToolMissing, BuildFailed) as err:
        print(f"[image] FATAL {type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
