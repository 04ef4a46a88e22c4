"""Build the card image and its update bundle, without root and without mounting anything.

    just image                       # x86-64, from the Debian base
    just image ARCH=arm64            # Raspberry Pi 4, Debian arm64 + Debian's Pi firmware/kernel
    python -m image.build --arch arm64 --base raspios-lite.img.xz --base-sha256 HEX

Output, in ``--out`` (default ``dist/image``):

- ``maxy-<version>-<arch>.img.zst`` — the whole card (GPT: bootconfig, boot_a, boot_b, root_a,
  root_b, data; ``appliance/ota/layout.py``). Both slots hold the same build; autoboot.txt
  starts slot A.
- ``maxy-<version>-<arch>.maxyupdate`` — the signed update bundle made from the same slot
  images: both boot images (each cmdline.txt names its own slot's root by PARTUUID) and the root.
- ``maxy-<version>-<arch>.json`` — what went in, partition ids, sizes and times.

Steps: inputs (``image/inputs.py``, cloudflared from ``image/cloudflared.py``) → base
(``image/base.py``: the cached Debian tarball, or a Raspberry Pi OS image, ``image/rpios.py``) →
root and data ext4 images (``image/populate.py``, the one step that needs an ownership context:
root, else ``fakeroot``) → FAT boot slots and bootconfig (mkfs.vfat + mcopy) → the GPT (sfdisk on
the image file) with each partition copied to its offset → zstd → the bundle
(``appliance.ota.bundle.create_bundle``).

A build is keyed by a hash of all its inputs and of the builder's own files; the outputs are kept
in ``$MAXY_CACHE_DIR/image/out/<key>/`` (the newest two of each name) and a second build with the
same inputs only links them into ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from appliance.core.config import SETTINGS, load_settings
from appliance.core.fsio import sha256_file
from appliance.ota.bundle import create_bundle
from appliance.ota.errors import OtaError
from appliance.ota.layout import BOOTCONFIG, DATA, PARTITIONS, ROOT_A, SLOTS, partuuid
from appliance.tunnel.unit import render_unit
from image import cloudflared as tunnel_daemon
from image import disk, inputs, rpios
from image.base import DEBIAN_ARCH, build_base
from image.errors import BuildFailed, ImageError
from image.overlay import CLAUDE, CLOUDFLARED, RootSpec
from image.populate import Spec
from image.tools import can_own_files, run, which

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
BOARDS = {
    ("x86-64", "debian"): ["x86-64"],
    ("arm64", "debian"): ["rpi4"],
    ("arm64", "rpios"): ["rpi4", "rpi5"],
}
# Sized for a Raspberry Pi 4 with 4 GB: the JVM heap and page cache Neo4j gets on the device.
# From `just bench-memory` at 100k nodes: with these Neo4j takes ~950 MB (PSS) idle and ~1,010 MB
# at the peak of an ingest (the JVM's own memory and the indexes' mapped files come on top of
# the two); with 1g and 512m it took ~1,090 MB already at 2k nodes, leaving a 4 GB Pi no room
# for a Claude session beside the roles.
NEO4J_HEAP = "512m"
NEO4J_PAGECACHE = "256m"


@dataclass(frozen=True)
class Request:
    """What to build."""

    arch: str
    out: Path
    cache_dir: Path
    version: str
    binary: Path | None = None
    base: str = "debian"
    base_sha256: str | None = None
    preset: Path | None = None
    signing_key: Path | None = None
    model: Path | None = None
    claude_cli: str | None = None  # a Claude Code CLI version to put in the image (npm)
    small: bool = False
    mirror: str | None = None
    # Build every other layer when there is no maxy build for this architecture (the image
    # then cannot run Maxy; its files are named ...-nobinary so nobody flashes one by mistake).
    without_binary: bool = False


@dataclass(frozen=True)
class Result:
    """Where the build put its outputs, and what it recorded about them."""

    image: Path
    bundle: Path
    record: Path
    reused: bool

    def facts(self) -> dict[str, object]:
        """The build record."""
        facts: dict[str, object] = json.loads(self.record.read_text())
        return facts


def project_version() -> str:
    """The version in pyproject.toml."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        version: str = tomllib.load(handle)["project"]["version"]
    return version


def _builder_hash() -> str:
    digest = hashlib.sha256()
    for top in (REPO / "image", REPO / "firmware-config", REPO / "appliance" / "ota" / "layout.py"):
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts:
                continue
            digest.update(f"{path.relative_to(REPO)}:{os.access(path, os.X_OK)}:".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _image_env(model: Path, neo4j_version: str, *, claude: bool = False) -> dict[str, str]:
    """The image's /etc/maxy/maxy.env (every name is a setting of appliance/core/config.py)."""
    env = {
        "MAXY_DATA_DIR": "/data",
        "MAXY_RUNTIME_DIR": "/run/maxy",
        # Neo4j's jars and the model sit in /opt/maxy the way the cache holds them.
        "MAXY_CACHE_DIR": "/opt/maxy",
        "MAXY_NEO4J_VERSION": neo4j_version,
        "MAXY_NEO4J_HEAP": NEO4J_HEAP,
        "MAXY_NEO4J_PAGECACHE": NEO4J_PAGECACHE,
        "MAXY_EMBED_MODEL": f"/opt/maxy/models/{model.name}",
        "MAXY_CLOUDFLARED_BIN": "/usr/bin/cloudflared",
        "MAXY_TUNNEL_UNIT": "cloudflared.service",
        "MAXY_HOST": "0.0.0.0",
        "MAXY_PORT": "19200",
    }
    if claude:
        env["MAXY_CLAUDE_BIN"] = CLAUDE
    known = {setting.env for setting in SETTINGS}
    unknown = sorted(set(env) - known)
    if unknown:
        raise BuildFailed(
            f"maxy.env names settings appliance/core/config.py does not have: {unknown}"
        )
    return {**env, "JAVA_HOME": "/opt/maxy/java", "LANG": "C.UTF-8"}


def _link_or_copy(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _prune(image_cache: Path, name: str, keep: int = 2) -> None:
    """Drop all but the newest ``keep`` kept builds called ``name``, and stale work folders."""
    kept = sorted(
        (d for d in (image_cache / "out").glob("*") if (d / f"{name}.json").is_file()),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    for old in kept[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for work in image_cache.glob("work-*"):
        if time.time() - work.stat().st_mtime > 12 * 3600:  # left by a build that was killed
            shutil.rmtree(work, ignore_errors=True)


def _populate(spec: Spec, work: Path) -> dict[str, object]:
    """Run image.populate as root, or under fakeroot when the builder is not root."""
    spec_file = work / "populate.json"
    spec.dump(spec_file)
    command = [sys.executable, "-m", "image.populate", str(spec_file)]
    if not can_own_files():
        command = [which("fakeroot"), "--", *command]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    for line in done.stderr.splitlines():
        log.info("%s", line)
    if done.returncode != 0:
        raise BuildFailed(f"Making the root and data filesystems failed:\n{done.stderr[-3000:]}")
    facts: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return facts


def build(request: Request) -> Result:
    """Build (or reuse) the image and bundle a request describes."""
    started = time.monotonic()
    arch, cache = request.arch, request.cache_dir
    name = f"maxy-{request.version}-{arch}" + ("-nobinary" if request.without_binary else "")
    settings = load_settings({"MAXY_CACHE_DIR": str(cache)})
    neo4j_version = settings.neo4j_version

    binary = None if request.without_binary else inputs.locate_binary(arch, request.binary)
    neo4j_dist = inputs.neo4j_distribution(cache, neo4j_version)
    wheel = inputs.java_wheel(cache, arch)
    inputs.check_java(wheel, neo4j_version)
    model, model_sha = inputs.model_file(cache, request.model)
    preset = inputs.check_preset(request.preset)
    claude = inputs.claude_cli(cache, arch, request.claude_cli) if request.claude_cli else None
    daemon = tunnel_daemon.cloudflared(cache, arch)
    key = inputs.signing_key(cache, request.signing_key)
    if key.development:
        log.warning(
            "[image] op=signing key=development path=%s (a development key: devices "
            "built with it accept updates signed by whoever has this file)",
            key.path,
        )

    if request.base == "debian":
        base_kind = "debian"
        base_root: Path = build_base(cache, DEBIAN_ARCH[arch], request.mirror)
        base_boot: Path | None = None
        base_id = base_root.name
    else:
        if arch != "arm64":
            raise BuildFailed("A Raspberry Pi OS base makes an arm64 image: pass --arch arm64.")
        base_kind = "rpios"
        base_root, base_boot, base_sha = rpios.prepare(cache, request.base, request.base_sha256)
        base_id = f"rpios-{base_sha}"
    sized = disk.sizes(request.small)

    fingerprint = {
        "arch": arch,
        "version": request.version,
        "base": base_id,
        "binary": binary.fingerprint() if binary else None,
        "neo4j": sha256_file(neo4j_dist / "SHA256SUMS"),
        "java": wheel.name,
        "model": model_sha,
        "preset": sha256_file(preset) if preset else None,
        "claude": claude[1] if claude else None,
        "cloudflared": daemon.sha256,
        "trust": key.key_id(),
        "sizes": sized,
        "builder": _builder_hash(),
    }
    key_hash = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:20]
    kept = cache / "image" / "out" / key_hash
    request.out.mkdir(parents=True, exist_ok=True)
    outputs = {
        "image": request.out / f"{name}.img.zst",
        "bundle": request.out / f"{name}.maxyupdate",
        "record": request.out / f"{name}.json",
    }
    if all((kept / p.name).is_file() for p in outputs.values()):
        for path in outputs.values():
            _link_or_copy(kept / path.name, path)
        log.info("[image] op=reuse key=%s out=%s", key_hash, request.out)
        return Result(**outputs, reused=True)

    boards = BOARDS[(arch, base_kind)]
    consoles = disk.CONSOLES[(arch, base_kind)]
    (cache / "image").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"work-{arch}-", dir=cache / "image"))
    timings: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="java-", dir=work) as java_dir:
            java_major = inputs.unpack_java(wheel, Path(java_dir))
            cloudflared = render_unit(
                settings.replace(data_dir=Path("/data")), binary="/usr/bin/cloudflared"
            )
            root = RootSpec(
                data_partuuid=partuuid(DATA),
                env=_image_env(model, neo4j_version, claude=claude is not None),
                binary=binary.path if binary else None,
                neo4j_dist=neo4j_dist,
                neo4j_version=neo4j_version,
                java_home=Path(java_dir),
                model=model,
                model_sha256=model_sha,
                trust={key.key_id(): key.public_pem()},
                cloudflared_unit=cloudflared,
                preset=preset,
                claude=claude[0] if claude else None,
                cloudflared=daemon.path,
            )
            spec = Spec(
                arch=arch,
                base_kind=base_kind,
                base_root=base_root,
                base_boot=base_boot,
                work=work,
                boot_dir=work / "boot-files",
                root_image=work / "root.img",
                root_size_mib=sized[ROOT_A.name],
                root_uuid=disk.fs_uuid("root"),
                data_image=work / "data.img",
                data_size_mib=sized[DATA.name],
                data_uuid=disk.fs_uuid("data"),
                root=root,
            )
            mark = time.monotonic()
            facts = _populate(spec, work)
            timings["rootfs"] = time.monotonic() - mark

        mark = time.monotonic()
        images: dict[str, Path] = {
            "bootconfig": work / "bootconfig.img",
            "root_a": spec.root_image,
            "root_b": spec.root_image,
            "data": spec.data_image,
        }
        disk.bootconfig_image(images["bootconfig"], sized[BOOTCONFIG.name])
        for slot in SLOTS:
            images[slot.boot.name] = work / f"{slot.boot.name}.img"
            disk.boot_image(
                images[slot.boot.name],
                slot,
                sized[slot.boot.name],
                spec.boot_dir,
                consoles,
                bios=arch == "x86-64",
            )

        card = work / f"{name}.img"
        # A PC starts slot A through syslinux; a Pi's firmware reads autoboot.txt itself.
        disk.assemble(card, sized, images, bios_boot="boot_a" if arch == "x86-64" else None)
        timings["assemble"] = time.monotonic() - mark

        mark = time.monotonic()
        kept.mkdir(parents=True, exist_ok=True)
        staged_image = work / f"{name}.img.zst"
        run(["zstd", "-q", "-T0", "-6", "--force", card, "-o", staged_image])
        timings["compress"] = time.monotonic() - mark
        mark = time.monotonic()
        staged_bundle = work / f"{name}.maxyupdate"
        try:
            create_bundle(
                staged_bundle,
                version=request.version,
                boards=boards,
                boot_images={"a": images["boot_a"], "b": images["boot_b"]},
                root_image=spec.root_image,
                signing_key=key.path,
            )
        except OtaError as err:
            raise BuildFailed(f"Making the update bundle failed: {err}") from err
        timings["bundle"] = time.monotonic() - mark

        record = {
            "name": name,
            "version": request.version,
            "arch": arch,
            "base": base_id,
            "boards": boards,
            "kernel": facts.get("kernel"),
            "java": java_major,
            "neo4j": neo4j_version,
            "model": {"file": model.name, "sha256": model_sha},
            "claude": {"version": request.claude_cli, "sha256": claude[1]} if claude else None,
            "cloudflared": daemon.manifest() | {"path": CLOUDFLARED},
            "binary": None
            if binary is None
            else {
                "form": "onedir" if binary.onedir else "onefile",
                "sha256": fingerprint["binary"],
            },
            "signing_key": {"id": key.key_id(), "development": key.development},
            "partitions": {
                part.name: {"partuuid": partuuid(part), "size_mib": sized[part.name]}
                for part in PARTITIONS
            },
            "slot_sha256": {
                "boot_a": sha256_file(images["boot_a"]),
                "boot_b": sha256_file(images["boot_b"]),
                "root": sha256_file(spec.root_image),
            },
            "bytes": {
                "card": card.stat().st_size,
                "image_zst": staged_image.stat().st_size,
                "bundle": staged_bundle.stat().st_size,
                "root_tree": facts.get("root_tree_bytes"),
            },
            "seconds": {k: round(v, 1) for k, v in timings.items()}
            | {"total": round(time.monotonic() - started, 1)},
            "key": key_hash,
        }
        staged_record = work / f"{name}.json"
        staged_record.write_text(json.dumps(record, indent=1) + "\n")
        for staged in (staged_image, staged_bundle, staged_record):
            os.replace(staged, kept / staged.name)
        for path in outputs.values():
            _link_or_copy(kept / path.name, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _prune(cache / "image", name)
    log.info(
        "[image] op=built name=%s seconds=%.0f image_bytes=%d bundle_bytes=%d out=%s",
        name,
        time.monotonic() - started,
        outputs["image"].stat().st_size,
        outputs["bundle"].stat().st_size,
        request.out,
    )
    return Result(**outputs, reused=False)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and build."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(DEBIAN_ARCH), default="x86-64")
    parser.add_argument("--out", type=Path, default=REPO / "dist" / "image")
    parser.add_argument("--version", default=None, help="release version (default: pyproject's)")
    parser.add_argument("--binary", type=Path, help="the maxy build (its one-directory form)")
    parser.add_argument(
        "--base",
        default="debian",
        help="'debian' (debootstrap, cached), or a Raspberry Pi OS image path/URL",
    )
    parser.add_argument("--base-sha256", help="pinned sha256 of the --base image file")
    parser.add_argument(
        "--preset", type=Path, help="account preset JSON for `maxy firstboot` (owner, brand, …)"
    )
    parser.add_argument(
        "--signing-key",
        type=Path,
        help="ed25519 PEM key for the bundle (default: $MAXY_OTA_SIGNING_KEY, "
        "else a development key in the cache)",
    )
    parser.add_argument("--model", type=Path, help="GGUF embedding model (default: the dev model)")
    parser.add_argument(
        "--claude-cli",
        metavar="VERSION",
        help="put this Claude Code CLI version (from npm) in the image; only if you may "
        "redistribute it (its licence is Anthropic's)",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="smaller boot/root/data partitions (tests); same content",
    )
    parser.add_argument(
        "--without-binary",
        action="store_true",
        help="no maxy build for this architecture: check every other layer (-nobinary files)",
    )
    parser.add_argument("--mirror", help="Debian mirror for the base (default: this machine's)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("MAXY_CACHE_DIR", "~/.cache/maxy")).expanduser(),
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    request = Request(
        arch=args.arch,
        out=args.out.absolute(),
        cache_dir=args.cache_dir.absolute(),
        version=args.version or project_version(),
        binary=args.binary,
        base=args.base,
        base_sha256=args.base_sha256,
        preset=args.preset,
        signing_key=args.signing_key,
        model=args.model,
        claude_cli=args.claude_cli,
        small=args.small,
        mirror=args.mirror,
        without_binary=args.without_binary,
    )
    try:
        result = build(request)
    except ImageError as err:
        print(f"[image] FATAL {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(f"{result.image}\n{result.bundle}")
    print(
        f"[image] op=done reused={result.reused} image_bytes={result.image.stat().st_size} "
        f"bundle_bytes={result.bundle.stat().st_size} record={result.record}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
