"""What Maxy adds to the base's root tree, written straight into the unpacked tree (no chroot).

Runs inside the build's ownership context (root, or the ``fakeroot`` session that unpacked the
base, see ``image/populate.py``): every file it creates is root's unless it says otherwise.

- ``image/rootfs/``: static files copied as they are (units, the pre-init, Avahi, networkd).
- user and group ``maxy`` (UID/GID 990, home ``/data/home``, no password, no shell).
- ``/etc/fstab``: ``/data`` by PARTUUID; the root is not listed (see :func:`write_fstab`);
  bootconfig and the boot slots are never mounted (``maxy ota`` reads them with mtools).
- ``/etc/maxy/maxy.env``: the image's settings (MAXY_*), ``/etc/maxy/ota/trust/<id>.pub``, the
  preset in ``/etc/maxy/preset/``.
- ``/opt/maxy``: the binary (``/usr/bin/maxy`` links to it), Neo4j, Java, the model, cloudflared
  (``/usr/bin/cloudflared`` links to it) and, when asked for, the Claude Code CLI.
- ``systemctl enable`` done by hand: the ``[Install]`` section's links under /etc/systemd/system.
- identity reset: no machine id, random seed or D-Bus id is shared by every card.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "rootfs"
MAXY_UID = MAXY_GID = 990
OPT = Path("opt/maxy")
CLAUDE = "/" + str(OPT / "claude" / "claude")  # where --claude-cli puts the CLI (MAXY_CLAUDE_BIN)
CLOUDFLARED = "/" + str(OPT / "cloudflared" / "cloudflared")  # image/cloudflared.py's build

# The units `just image` enables; cloudflared's starts only once `maxy tunnel create` wrote its
# config (ConditionPathExists=), and `maxy tunnel` reaches it through maxy-tunnel-request.path.
ENABLED_UNITS = (
    "maxy-firstboot.service",
    "maxy-neo4j.service",
    "maxy-engine.service",
    "maxy-manager.service",
    "maxy-channels.service",
    "maxy-app.service",
    "maxy-edge.service",
    "maxy-ota-commit.service",
    "maxy-usb-updates.service",
    "maxy-ota-request.path",
    "maxy-tunnel-request.path",
    "cloudflared.service",
    "systemd-networkd.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "avahi-daemon.service",
)
NETWORKD_UNITS = ("systemd-networkd.service", "systemd-resolved.service")
# Timers that make no sense on a read-only, image-updated root.
DISABLED_LINKS = (
    "timers.target.wants/apt-daily.timer",
    "timers.target.wants/apt-daily-upgrade.timer",
    "timers.target.wants/dpkg-db-backup.timer",
)
UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")


@dataclass
class RootSpec:
    """What the overlay needs to know (paths on the build machine, values for the image)."""

    data_partuuid: str
    env: dict[str, str]
    binary: Path | None  # None: built without a maxy binary (see image/build.py)
    neo4j_dist: Path
    neo4j_version: str
    java_home: Path  # an unpacked runtime
    model: Path
    model_sha256: str
    trust: dict[str, str]  # key id → public PEM
    cloudflared_unit: str
    preset: Path | None = None
    claude: Path | None = None  # the Claude Code CLI's executable (image/inputs.claude_cli)
    cloudflared: Path | None = None  # the tunnel daemon (image/cloudflared.py)


def copy_static(tree: Path, static: Path = STATIC) -> None:
    """Copy ``image/rootfs`` into the tree (files 0644, or 0755 when executable in the repo)."""
    for source in sorted(static.rglob("*")):
        target = tree / source.relative_to(static)
        if source.is_dir():
            target.mkdir(mode=0o755, parents=True, exist_ok=True)
            continue
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        shutil.copyfile(source, target)
        target.chmod(0o755 if os.access(source, os.X_OK) else 0o644)
        os.chown(target, 0, 0)


def _append_line(path: Path, key: str, line: str) -> None:
    lines = path.read_text().splitlines() if path.exists() else []
    lines = [existing for existing in lines if existing.split(":", 1)[0] != key]
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    path.write_text("\n".join([*lines, line]) + "\n")
    path.chmod(mode)


def add_user(tree: Path, name: str = "maxy", uid: int = MAXY_UID, gid: int = MAXY_GID) -> None:
    """Add a system user and group with fixed ids, no password and no login shell."""
    etc = tree / "etc"
    _append_line(etc / "passwd", name, f"{name}:x:{uid}:{gid}:Maxy:/data/home:/usr/sbin/nologin")
    _append_line(etc / "group", name, f"{name}:x:{gid}:")
    _append_line(etc / "shadow", name, f"{name}:!:19000::::::")
    _append_line(etc / "gshadow", name, f"{name}:!::")


def write_fstab(tree: Path, data_partuuid: str) -> None:
    """Write /etc/fstab: /data by PARTUUID, /tmp in memory; not the root, not the FAT partitions."""
    (tree / "etc" / "fstab").write_text(
        "# Maxy's card (see appliance/ota/layout.py). The root is not listed: each slot's\n"
        "# cmdline.txt names its own root partition (root=PARTUUID=… ro), and one root image\n"
        "# serves both slots, so it cannot name its partition here. The bootconfig and boot\n"
        "# partitions are never mounted: `maxy ota` reads and writes them with mtools.\n"
        "# /data is mounted by /usr/lib/maxy/preinit before systemd starts; this line is what\n"
        "# systemd knows it by (and mounts it from, should the pre-init have failed).\n"
        f"PARTUUID={data_partuuid}\t/data\text4\tdefaults,noatime\t0\t2\n"
        "# /tmp in memory: the root is read-only, and systemd builds each hardened unit's private\n"
        "# /dev and /tmp (PrivateDevices=, PrivateTmp=) under /tmp.\n"
        "tmpfs\t/tmp\ttmpfs\tnosuid,nodev,mode=1777,size=256M\t0\t0\n"
    )


def write_env(tree: Path, env: dict[str, str]) -> None:
    """Write /etc/maxy/maxy.env, the settings every Maxy unit reads."""
    lines = [
        "# Maxy's settings on this device, from the image (see README: Settings).",
        "# MAXY_ACCOUNT_ID is in /data/account.env (written by `maxy firstboot`), which the units",
        "# read after this file. Edit this file to change a setting on the device: /etc is an",
        "# overlay kept on /data, so the change survives updates (and shadows the image's file).",
        *(f"{key}={value}" for key, value in env.items()),
    ]
    path = tree / "etc" / "maxy" / "maxy.env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a tree keeping modes (owner: root, whatever the source's)."""
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    target.chmod(0o755)  # the source may be a private temporary directory
    for root, dirs, files in os.walk(target):
        for name in [*dirs, *files]:
            os.lchown(Path(root, name), 0, 0)
    os.chown(target, 0, 0)


def _install_program(tree: Path, executable: Path, path: str) -> Path:
    """Copy ``executable`` to ``path`` in the tree (mode 0755), on PATH as /usr/bin/<its name>."""
    target = tree / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(executable, target)
    target.chmod(0o755)
    link = tree / "usr" / "bin" / Path(path).name
    link.unlink(missing_ok=True)
    link.symlink_to(path)
    return target


def install_claude(tree: Path, executable: Path) -> Path:
    """Install the Claude Code CLI as /opt/maxy/claude/claude, on PATH as /usr/bin/claude."""
    return _install_program(tree, executable, CLAUDE)


def install_cloudflared(tree: Path, executable: Path) -> Path:
    """Install cloudflared as /opt/maxy/cloudflared/cloudflared, on PATH as /usr/bin/cloudflared."""
    return _install_program(tree, executable, CLOUDFLARED)


def install_payloads(tree: Path, spec: RootSpec) -> None:
    """Install the binary, Neo4j, Java, the model, trust roots, preset, claude, cloudflared."""
    opt = tree / OPT
    opt.mkdir(parents=True, exist_ok=True)
    usr_bin = tree / "usr" / "bin" / "maxy"
    usr_bin.unlink(missing_ok=True)
    if spec.binary is None:
        pass
    elif spec.binary.is_dir():
        _copy_tree(spec.binary, opt / "lib" / "maxy")
        usr_bin.symlink_to("/" + str(OPT / "lib" / "maxy" / "maxy"))
    else:
        (opt / "bin").mkdir(exist_ok=True)
        shutil.copyfile(spec.binary, opt / "bin" / "maxy")
        (opt / "bin" / "maxy").chmod(0o755)
        usr_bin.symlink_to("/" + str(OPT / "bin" / "maxy"))

    neo4j = opt / "neo4j" / spec.neo4j_version
    (neo4j / "lib").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(spec.neo4j_dist / "SHA256SUMS", neo4j / "SHA256SUMS")
    for jar in sorted((spec.neo4j_dist / "lib").glob("*.jar")):
        shutil.copyfile(jar, neo4j / "lib" / jar.name)
    _copy_tree(spec.java_home, opt / "java")

    models = opt / "models"
    models.mkdir(exist_ok=True)
    shutil.copyfile(spec.model, models / spec.model.name)
    (models / (spec.model.name + ".sha256")).write_text(f"{spec.model_sha256}  {spec.model.name}\n")

    trust = tree / "etc" / "maxy" / "ota" / "trust"
    trust.mkdir(parents=True, exist_ok=True)
    for ident, pem in spec.trust.items():
        (trust / f"{ident}.pub").write_text(pem)
    if spec.preset is not None:
        # Where `maxy firstboot` looks for it (MAXY_PRESET_FILE's default).
        preset = tree / "etc" / "maxy" / "preset"
        preset.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec.preset, preset / "account.json")
    if spec.claude is not None:
        install_claude(tree, spec.claude)
    if spec.cloudflared is not None:
        install_cloudflared(tree, spec.cloudflared)
    (tree / "usr/lib/systemd/system/cloudflared.service").write_text(spec.cloudflared_unit)
    for path in (opt, tree / "etc" / "maxy"):
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(Path(root, name), 0, 0)
        os.chown(path, 0, 0)


def _find_unit(tree: Path, name: str) -> Path | None:
    for folder in UNIT_DIRS:
        path = tree / folder / name
        if path.is_file() or path.is_symlink():
            return path
    return None


def _install_section(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section == "[Install]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).extend(value.split())
    return found


def enable(tree: Path, units: Iterable[str]) -> list[str]:
    """Enable units as ``systemctl enable`` would (WantedBy, RequiredBy, Alias, Also links)."""
    made: list[str] = []
    todo, seen = list(units), set()
    system = tree / "etc" / "systemd" / "system"
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        unit = _find_unit(tree, name)
        if unit is None:
            raise FileNotFoundError(f"unit {name} is not in the image")
        target_path = "/" + str(unit.relative_to(tree))
        install = _install_section(unit.read_text())
        links = [(f"{t}.wants", name) for t in install.get("WantedBy", [])]
        links += [(f"{t}.requires", name) for t in install.get("RequiredBy", [])]
        links += [("", alias) for alias in install.get("Alias", [])]
        for folder, link_name in links:
            link = system / folder / link_name if folder else system / link_name
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target_path)
            made.append(str(link.relative_to(tree)))
        todo.extend(install.get("Also", []))
    return made


def reset_identity(tree: Path) -> None:
    """Blank what debootstrap made unique: each card makes its own on the first boot."""
    machine_id = tree / "etc" / "machine-id"
    machine_id.unlink(missing_ok=True)
    machine_id.write_text("")  # empty + writable /etc (the overlay): systemd writes a new one
    machine_id.chmod(0o444)
    dbus_id = tree / "var" / "lib" / "dbus" / "machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
        dbus_id.symlink_to("/etc/machine-id")
    (tree / "var" / "lib" / "systemd" / "random-seed").unlink(missing_ok=True)


def apply(tree: Path, spec: RootSpec) -> None:
    """Turn an unpacked base into Maxy's root filesystem."""
    copy_static(tree)
    add_user(tree)
    write_fstab(tree, spec.data_partuuid)
    write_env(tree, spec.env)
    install_payloads(tree, spec)
    for link in DISABLED_LINKS:
        (tree / "etc" / "systemd" / "system" / link).unlink(missing_ok=True)
    units = [u for u in ENABLED_UNITS if _find_unit(tree, u) is not None]
    if _find_unit(tree, "NetworkManager.service") is not None:
        # Raspberry Pi OS manages the network with NetworkManager; two managers would fight.
        units = [u for u in units if u not in NETWORKD_UNITS]
    enable(tree, units)
    reset_identity(tree)
    for mountpoint in ("data", "boot/firmware"):
        (tree / mountpoint).mkdir(parents=True, exist_ok=True)
