"""``maxy ota apply|commit|status|verify|keygen|bundle``: signed A/B updates from the command line.

``apply`` and ``commit`` end with exit status 0 on success and 1 with one line on stderr saying
what to do otherwise; with ``--progress json`` they also print the error as a last
``{"phase": "error", …}`` line on stdout. ``keygen`` and ``bundle`` are for whoever makes
releases (the image builder calls :func:`appliance.ota.bundle.create_bundle` directly).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from appliance.core.config import Settings
from appliance.ota import usb
from appliance.ota.errors import OtaError, StateError
from appliance.ota.layout import Slot
from appliance.ota.manifest import Manifest
from appliance.ota.progress import Bar, JsonLines, Progress, Silent

log = logging.getLogger(__name__)


def _progress(kind: str) -> Progress:
    if kind == "json":
        return JsonLines(sys.stdout)
    if kind == "bar":
        return Bar(sys.stderr)
    return Silent()


def _confirm(args: argparse.Namespace) -> Any:
    if args.yes:
        return None

    def ask(manifest: Manifest, target: Slot) -> bool:
        if not sys.stdin.isatty():
            raise StateError("no terminal to confirm on; pass --yes to install without asking.")
        answer = input(
            f"Install {manifest.version} into slot {target.name} and reboot into it? [y/N] "
        )
        return answer.strip().lower() in ("y", "yes")

    return ask


def apply(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy ota apply SOURCE``: install a bundle and reboot into a trial of it."""
    from appliance.ota.apply import apply_update

    source: str | Path = args.source if "://" in args.source else Path(args.source)
    progress = _progress(args.progress)
    manifest = apply_update(settings, source, progress, confirm=_confirm(args))
    progress("done", 1, 1, f"{manifest.version} armed; rebooting into it")
    if args.progress != "json":
        print(f"{manifest.version} is installed; the device reboots into it for a trial.")
    return 0


def commit(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy ota commit``: make a healthy trial boot permanent (or roll back)."""
    from appliance.ota.commit import commit_trial

    message = commit_trial(settings, _progress(args.progress))
    if args.progress != "json":
        print(message)
    return 0


def status(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy ota status``: slots, versions, trial state, last outcome."""
    from appliance.ota.status import collect, render

    report = collect(settings)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def verify(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy ota verify SOURCE``: check a bundle for this device without installing it."""
    from appliance.core.version import build_info
    from appliance.ota import device
    from appliance.ota.bundle import verify_bundle
    from appliance.ota.card import Card
    from appliance.ota.firmware import detect_board
    from appliance.ota.state import OtaState

    current = str(build_info()["version"])
    try:
        with Card(settings.ota_device, writable=False) as card:
            view = device.boot_view(settings, card)
        current = device.installed_version(OtaState.load(device.ota_dir(settings)), view.committed)
        bootloader = view.firmware.build_timestamp
    except OtaError:
        bootloader = None  # not on a Maxy card: check signature, board and version only
    manifest = verify_bundle(
        args.source if "://" in args.source else Path(args.source),
        device.trust_store(settings),
        board=detect_board(settings.ota_board),
        current_version=current,
        full=args.full,
        bootloader_timestamp=bootloader,
    )
    if args.json:
        print(json.dumps(manifest.summary(), indent=2))
    else:
        print(f"{manifest.version}: signed by {manifest.key_id}, installable over {current}.")
    return 0


def keygen(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy ota keygen PATH``: a new signing key pair."""
    from appliance.ota.keys import generate_key, key_id, load_public_key

    public = generate_key(Path(args.path))
    print(f"private key {args.path}, public key {public} (id {key_id(load_public_key(public))})")
    return 0


def bundle(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy ota bundle OUT …``: sign slot images into a .maxyupdate."""
    from appliance.ota.bundle import create_bundle

    out = create_bundle(
        Path(args.out),
        version=args.version,
        boards=args.board,
        boot_images={"a": Path(args.boot_a), "b": Path(args.boot_b)},
        root_image=Path(args.root),
        signing_key=Path(args.key),
        min_bootloader=args.min_bootloader,
        next_key=Path(args.next_key) if args.next_key else None,
    )
    print(out)
    return 0


def _guarded(func: Any) -> Any:
    """In JSON progress mode an OtaError is also the last progress line (cli.py says FATAL)."""

    def run(settings: Settings, args: argparse.Namespace) -> int:
        try:
            code: int = func(settings, args)
        except OtaError as err:
            if getattr(args, "progress", None) == "json":
                JsonLines(sys.stdout)("error", 0, 0, str(err))
            raise
        return code

    return run


def add_parsers(sub: Any) -> None:
    """Register ``ota`` on the ``maxy`` parser."""
    ota = sub.add_parser("ota", help="signed A/B updates: apply, commit, status")
    ota_sub = ota.add_subparsers(dest="ota_command", required=True)

    run = ota_sub.add_parser("apply", help="install a .maxyupdate (file or URL), reboot into it")
    run.add_argument("source", help="path or http(s) URL of the .maxyupdate bundle")
    run.add_argument("--progress", choices=["bar", "json", "none"], default="bar")
    run.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    run.set_defaults(func=_guarded(apply))

    done = ota_sub.add_parser("commit", help="commit a healthy trial boot, else roll back")
    done.add_argument("--progress", choices=["bar", "json", "none"], default="none")
    done.set_defaults(func=_guarded(commit))

    show = ota_sub.add_parser("status", help="slots, versions, trial state, last outcome")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=_guarded(status))

    check = ota_sub.add_parser("verify", help="check a bundle without installing it")
    check.add_argument("source")
    check.add_argument("--full", action="store_true", help="also hash every payload")
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=_guarded(verify))

    make_key = ota_sub.add_parser("keygen", help="make an ed25519 signing key pair")
    make_key.add_argument("path", help="where the private key goes (the .pub lands beside it)")
    make_key.set_defaults(func=_guarded(keygen))

    make = ota_sub.add_parser("bundle", help="sign slot images into a .maxyupdate")
    make.add_argument("out")
    make.add_argument("--version", required=True)
    make.add_argument("--board", action="append", required=True, choices=["rpi4", "rpi5", "x86-64"])
    make.add_argument("--boot-a", required=True, help="slot A's boot image (FAT; names root_a)")
    make.add_argument("--boot-b", required=True, help="slot B's boot image (FAT; names root_b)")
    make.add_argument("--root", required=True, help="root slot image (ext4)")
    make.add_argument("--key", required=True, help="PEM ed25519 private signing key")
    make.add_argument("--min-bootloader", default="2023-01-01")
    make.add_argument("--next-key", help="public key to rotate to (cross-signed)")
    make.set_defaults(func=_guarded(bundle))

    usb.add_parsers(ota_sub)
