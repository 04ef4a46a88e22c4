"""The root and data filesystems, read with debugfs from the card's partitions (never mounted)."""

from __future__ import annotations

import configparser
import hashlib
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from appliance.core.config import SETTINGS, load_settings
from appliance.graphdb.java import required_java_major
from appliance.ota.keys import key_id, parse_public_pem
from image import overlay
from image.cloudflared import cloudflared
from image.inputs import ELF_MACHINE
from image.tools import debugfs, ext4_list, ext4_read, ext4_readlink, ext4_stat
from tests.image.conftest import CACHE, PRESET, Card, arm64_binary_missing

pytestmark = pytest.mark.timeout(7200)

ROLES = ("maxy-edge", "maxy-app", "maxy-engine", "maxy-manager", "maxy-channels", "maxy-neo4j")
ENABLED = (*ROLES, "maxy-firstboot", "maxy-ota-commit", "maxy-usb-updates")
UNIT_DIR = "/usr/lib/systemd/system"
WANTS = "/etc/systemd/system/multi-user.target.wants"


def read(card: Card, path: str, part: str = "root_a") -> str:
    return ext4_read(card.parts[part], path).decode()


def unit(card: Card, name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    # Repeated keys (EnvironmentFile=) overwrite each other here; tests read those from the text.
    parser.read_string(read(card, f"{UNIT_DIR}/{name}.service"))
    return parser


def env_file(card: Card) -> dict[str, str]:
    lines = read(card, "/etc/maxy/maxy.env").splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_both_root_slots_hold_the_same_filesystem(card: Card) -> None:
    assert card.region_sha256("root_a") == card.region_sha256("root_b")
    stats = debugfs(card.parts["root_a"], "stats")
    assert "Filesystem volume name:   root" in stats
    data = debugfs(card.parts["data"], "stats")
    assert "Filesystem volume name:   data" in data


def test_maxy_units_are_installed_and_enabled_cloudflared_waits_for_its_config(
    card: Card,
) -> None:
    wants = {e.name for e in ext4_list(card.parts["root_a"], WANTS)}
    for name in ENABLED:
        assert ext4_stat(card.parts["root_a"], f"{UNIT_DIR}/{name}.service") is not None, name
        assert f"{name}.service" in wants, f"{name} is not enabled"
        target = ext4_readlink(card.parts["root_a"], f"{WANTS}/{name}.service")
        assert target == f"{UNIT_DIR}/{name}.service"
    # The owner's confirmation in the admin UI, and `maxy tunnel` (both user maxy), reach root
    # through path units.
    for request in ("maxy-ota-request", "maxy-tunnel-request"):
        assert f"{request}.path" in wants
        assert ext4_stat(card.parts["root_a"], f"{UNIT_DIR}/{request}.service") is not None
    # cloudflared starts at boot only once `maxy tunnel create` has written its config.
    assert ext4_readlink(card.parts["root_a"], f"{WANTS}/cloudflared.service") == (
        f"{UNIT_DIR}/cloudflared.service"
    )
    cloudflared = read(card, f"{UNIT_DIR}/cloudflared.service").splitlines()
    assert "User=maxy" in cloudflared
    assert "ConditionPathExists=/data/cloudflared/config.yml" in cloudflared
    assert env_file(card)["MAXY_TUNNEL_UNIT"] == "cloudflared.service"


@pytest.mark.parametrize("role", ROLES)
def test_role_units_run_as_maxy_hardened_with_notify_and_watchdog(card: Card, role: str) -> None:
    service = unit(card, role)["Service"]
    text = read(card, f"{UNIT_DIR}/{role}.service")
    assert service["User"] == "maxy" and service["Group"] == "maxy"
    assert service["Type"] == "notify"
    assert service["WatchdogSec"].endswith("s")
    assert service["ExecStart"].startswith("/usr/bin/maxy ")
    for setting, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "ProtectHome": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "RuntimeDirectory": "maxy",
        "RuntimeDirectoryPreserve": "yes",
    }.items():
        assert service[setting] == value, setting
    assert set(service["ReadWritePaths"].split()) == {"/data", "/run/maxy"}
    assert "AF_UNIX" in service["RestrictAddressFamilies"].split()
    assert "EnvironmentFile=/etc/maxy/maxy.env\n" in text
    assert "EnvironmentFile=-/data/account.env\n" in text
    assert text.index("/etc/maxy/maxy.env") < text.index("/data/account.env"), "account.env wins"
    assert "maxy-firstboot.service" in unit(card, role)["Unit"]["After"].split()


def test_first_boot_runs_before_the_roles_and_commit_after_them(card: Card) -> None:
    first = unit(card, "maxy-firstboot")
    assert first["Service"]["Type"] == "oneshot"
    assert first["Service"]["ExecStart"] == "/usr/bin/maxy firstboot"
    assert {f"{r}.service" for r in ROLES} <= set(first["Unit"]["Before"].split())
    commit = unit(card, "maxy-ota-commit")
    assert commit["Service"]["ExecStart"] == "/usr/bin/maxy ota commit"
    assert {f"{r}.service" for r in ROLES} - {"maxy-neo4j.service"} <= set(
        commit["Unit"]["After"].split()
    )
    usb = unit(card, "maxy-usb-updates")["Service"]
    assert usb["ExecStart"] == "/usr/bin/maxy ota watch-usb"
    assert usb["CapabilityBoundingSet"] == "" and usb["NoNewPrivileges"] == "yes"
    assert usb["DevicePolicy"] == "closed"


def test_user_maxy_has_fixed_ids_and_no_login(card: Card) -> None:
    passwd = {line.split(":")[0]: line for line in read(card, "/etc/passwd").splitlines()}
    assert passwd["maxy"] == "maxy:x:990:990:Maxy:/data/home:/usr/sbin/nologin"
    groups = {line.split(":")[0]: line for line in read(card, "/etc/group").splitlines()}
    assert groups["maxy"] == "maxy:x:990:"
    shadow = ext4_read(card.parts["root_a"], "/etc/shadow").decode().splitlines()
    assert any(line.startswith("maxy:!:") for line in shadow), "locked password"
    uids = [line.split(":")[2] for line in passwd.values()]
    assert uids.count("990") == 1
    # Every group a unit adds its user to exists, or systemd refuses to start the unit.
    folder = "/usr/lib/systemd/system"
    names = [e.name for e in ext4_list(card.parts["root_a"], folder) if e.name.startswith("maxy")]
    assert "maxy-manager.service" in names
    for name in names:
        for line in read(card, f"{folder}/{name}").splitlines():
            if line.startswith("SupplementaryGroups="):
                for group in line.split("=", 1)[1].split():
                    assert group in groups, f"{group} (SupplementaryGroups=) is not in /etc/group"


def test_hostname_hosts_and_the_avahi_service(card: Card) -> None:
    assert read(card, "/etc/hostname") == "maxy\n"
    assert "127.0.1.1\tmaxy" in read(card, "/etc/hosts")
    service = ET.fromstring(read(card, "/etc/avahi/services/maxy.service"))
    assert service.findtext("service/type") == "_http._tcp"
    assert service.findtext("service/port") == "19200"
    nsswitch = read(card, "/etc/nsswitch.conf")
    assert "mdns4_minimal" in nsswitch, "maxy.local resolves through libnss-mdns"
    assert "avahi-daemon.service" in {e.name for e in ext4_list(card.parts["root_a"], WANTS)}


def test_fstab_mounts_data_by_partuuid_and_never_the_fat_partitions(card: Card) -> None:
    entries = [
        line.split()
        for line in read(card, "/etc/fstab").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    data_uuid = str(card.partition("data")["uuid"]).lower()
    assert entries == [
        [f"PARTUUID={data_uuid}", "/data", "ext4", "defaults,noatime", "0", "2"],
        # Hardened units need a writable /tmp for their private /dev and /tmp.
        ["tmpfs", "/tmp", "tmpfs", "nosuid,nodev,mode=1777,size=256M", "0", "0"],
    ]
    # The root is named (read-only) by each slot's cmdline.txt; FAT partitions stay unmounted.
    for name in ("bootconfig", "boot_a", "boot_b"):
        assert str(card.partition(name)["uuid"]).lower() not in read(card, "/etc/fstab")


def test_the_pre_init_mounts_data_and_the_etc_overlay(card: Card) -> None:
    entry = ext4_stat(card.parts["root_a"], "/usr/lib/maxy/preinit")
    assert entry is not None and entry.mode & 0o111 and entry.uid == 0
    script = read(card, "/usr/lib/maxy/preinit")
    assert "upperdir=/data/overlay/$dir/upper" in script
    assert "for dir in etc var" in script
    assert script.rstrip().endswith('exec /sbin/init "$@"')
    # The forgotten-PIN reset it runs (tests/image/test_reset_pin.py).
    reset = ext4_stat(card.parts["root_a"], "/usr/lib/maxy/reset-pin")
    assert reset is not None and reset.mode & 0o111 and reset.uid == 0
    # Every card makes its own machine id on the first boot (into the /etc overlay).
    assert read(card, "/etc/machine-id") == ""
    assert ext4_stat(card.parts["root_a"], "/data") is not None


def test_data_holds_the_skeleton_owned_by_maxy(card: Card) -> None:
    entries = {e.name: e for e in ext4_list(card.parts["data"], "/")}
    for name in ("accounts", "keys", "neo4j", "cloudflared", "home"):
        assert entries[name].uid == 990 and entries[name].gid == 990, name
    assert entries["keys"].mode & 0o777 == 0o700
    overlay_dirs = {e.name: e for e in ext4_list(card.parts["data"], "/overlay/etc")}
    assert set(overlay_dirs) >= {"upper", "work"} and overlay_dirs["upper"].uid == 0


def test_base_ownership_survives_the_unprivileged_assembly(card: Card) -> None:
    shadow = ext4_stat(card.parts["root_a"], "/etc/shadow")
    assert shadow is not None and shadow.uid == 0 and shadow.mode & 0o777 == 0o640
    assert shadow.gid == 42, "group shadow"
    su = ext4_stat(card.parts["root_a"], "/usr/bin/su")
    assert su is not None and su.uid == 0 and su.mode & 0o4000, "setuid root"


def test_maxy_env_sets_known_settings_and_neo4j_memory_for_a_4gb_pi(card: Card) -> None:
    env = env_file(card)
    known = {s.env for s in SETTINGS}
    assert {k for k in env if k.startswith("MAXY_")} <= known
    settings = load_settings({k: v for k, v in env.items() if k.startswith("MAXY_")})
    assert settings.neo4j_heap == "512m" and settings.neo4j_pagecache == "256m"
    assert settings.data_dir == Path("/data") and settings.runtime_dir == Path("/run/maxy")
    assert env["JAVA_HOME"] == "/opt/maxy/java"
    # The launcher finds the jars and the model where the image put them.
    jars = f"{settings.cache_dir}/neo4j/{settings.neo4j_version}"
    assert ext4_stat(card.parts["root_a"], f"{jars}/SHA256SUMS") is not None
    assert ext4_stat(card.parts["root_a"], str(settings.embed_model_path)) is not None


def test_neo4j_jars_are_the_cached_distribution(card: Card) -> None:
    env = env_file(card)
    version = env["MAXY_NEO4J_VERSION"]
    folder = f"/opt/maxy/neo4j/{version}"
    sums = read(card, f"{folder}/SHA256SUMS")
    assert sums == (CACHE / "neo4j" / version / "SHA256SUMS").read_text()
    jars = {e.name: e.size for e in ext4_list(card.parts["root_a"], f"{folder}/lib")}
    for line in sums.splitlines():
        digest, size, name = line.split(maxsplit=2)
        assert jars.get(name) == int(size), name
    kernel_jar = next(line for line in sums.splitlines() if f" neo4j-{version}.jar" in line)
    digest, _, name = kernel_jar.split(maxsplit=2)
    got = hashlib.sha256(ext4_read(card.parts["root_a"], f"{folder}/lib/{name}")).hexdigest()
    assert got == digest


def test_java_runtime_is_present_new_enough_and_for_the_architecture(card: Card) -> None:
    java = ext4_stat(card.parts["root_a"], "/opt/maxy/java/bin/java")
    assert java is not None and java.mode & 0o755 == 0o755
    header = ext4_read(card.parts["root_a"], "/opt/maxy/java/bin/java")[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == ELF_MACHINE[card.arch]
    release = read(card, "/opt/maxy/java/release")
    major = int(release.split('JAVA_VERSION="', 1)[1].split(".")[0])
    assert major >= required_java_major(env_file(card)["MAXY_NEO4J_VERSION"])
    top = ext4_stat(card.parts["root_a"], "/opt/maxy/java")
    assert top is not None and top.mode & 0o755 == 0o755, "readable by maxy"


def test_the_model_matches_the_caches_checksum(card: Card) -> None:
    model = Path(env_file(card)["MAXY_EMBED_MODEL"])
    cached = CACHE / "models" / model.name
    expected = (cached.with_name(cached.name + ".sha256")).read_text().split()[0]
    data = ext4_read(card.parts["root_a"], str(model))
    assert hashlib.sha256(data).hexdigest() == expected == card.record["model"]["sha256"]  # type: ignore[index]


def test_the_account_preset_is_where_firstboot_reads_it(card: Card) -> None:
    preset = ext4_read(card.parts["root_a"], "/etc/maxy/preset/account.json")
    assert preset == PRESET.read_bytes()
    entry = ext4_stat(card.parts["root_a"], "/etc/maxy/preset/account.json")
    assert entry is not None and entry.uid == 0 and entry.mode & 0o777 == 0o644


def test_the_ota_trust_root_is_the_signing_keys_public_half(card: Card) -> None:
    entries = ext4_list(card.parts["root_a"], "/etc/maxy/ota/trust")
    assert [e.name for e in entries] == [f"{card.record['signing_key']['id']}.pub"]  # type: ignore[index]
    pem = ext4_read(card.parts["root_a"], f"/etc/maxy/ota/trust/{entries[0].name}")
    assert key_id(parse_public_pem(pem, "trust root")) == entries[0].name.removesuffix(".pub")


def test_maxy_binary_is_executable_and_for_the_architecture(card: Card) -> None:
    if not card.has_binary:
        pytest.skip(arm64_binary_missing() or "no binary")
    link = ext4_readlink(card.parts["root_a"], "/usr/bin/maxy")
    assert link in ("/opt/maxy/lib/maxy/maxy", "/opt/maxy/bin/maxy")
    entry = ext4_stat(card.parts["root_a"], link)
    assert entry is not None and entry.kind == "file"
    assert entry.mode & 0o755 == 0o755 and entry.uid == 0
    header = ext4_read(card.parts["root_a"], link)[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == ELF_MACHINE[card.arch]
    if link.startswith("/opt/maxy/lib/"):
        assert ext4_stat(card.parts["root_a"], "/opt/maxy/lib/maxy/_internal") is not None


def test_cloudflared_is_on_path_for_the_architecture_and_in_the_record(card: Card) -> None:
    built = cloudflared(CACHE, card.arch)
    assert ext4_readlink(card.parts["root_a"], "/usr/bin/cloudflared") == overlay.CLOUDFLARED
    entry = ext4_stat(card.parts["root_a"], overlay.CLOUDFLARED)
    assert entry is not None and entry.kind == "file"
    assert entry.mode & 0o777 == 0o755 and entry.uid == 0
    data = ext4_read(card.parts["root_a"], overlay.CLOUDFLARED)
    assert int.from_bytes(data[18:20], "little") == ELF_MACHINE[card.arch]
    assert hashlib.sha256(data).hexdigest() == built.sha256
    assert card.record["cloudflared"] == built.manifest() | {"path": overlay.CLOUDFLARED}
    assert env_file(card)["MAXY_CLOUDFLARED_BIN"] == "/usr/bin/cloudflared"


# llama.cpp's CPU code in the binary, once per processor generation (build/llama-wheel.sh): for
# each variant, an instruction only it may hold (None: the baseline, which must hold none of the
# others') and one the baseline must not.
CPU_VARIANTS = {
    "x86-64": {"haswell": None, "alderlake": "{vex}", "icelake": "%zmm", "zen4": "vdpbf16ps"},
    "arm64": {"armv8.0_1": None, "armv8.2_2": "sdot"},
}
OBJDUMP = {"x86-64": "objdump", "arm64": "aarch64-linux-gnu-objdump"}


def test_the_binary_carries_llama_cpp_for_each_processor_generation(
    card: Card, tmp_path: Path
) -> None:
    """The baseline variant runs on every CPU of the card's architecture (a mini PC, qemu, a
    Pi 4); the others hold the newer instructions, loaded only where the CPU has them."""
    assert card.has_binary
    lib = "/opt/maxy/lib/maxy/_internal/llama_cpp/lib"
    found = {
        e.name.removeprefix("libggml-cpu-").removesuffix(".so")
        for e in ext4_list(card.parts["root_a"], lib)
        if e.name.startswith("libggml-cpu") and e.kind == "file"
    }
    variants = CPU_VARIANTS[card.arch]
    assert found == set(variants), f"{lib} holds the CPU variants {sorted(found)}"
    listings = {}
    for name in variants:
        library = tmp_path / f"libggml-cpu-{name}.so"
        library.write_bytes(ext4_read(card.parts["root_a"], f"{lib}/{library.name}"))
        listings[name] = subprocess.run(
            [OBJDUMP[card.arch], "-d", "--no-show-raw-insn", str(library)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    baseline = next(name for name, marker in variants.items() if marker is None)
    for name, marker in variants.items():
        if marker is not None:
            assert marker in listings[name], f"{name} has no {marker}"
            assert marker not in listings[baseline], f"the baseline {baseline} has {marker}"
    if card.arch == "x86-64":
        assert "%ymm" in listings[baseline]  # AVX2 on every x86-64-v3 CPU


def test_enable_follows_install_sections(tmp_path: Path) -> None:
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    (units / "a.service").write_text(
        "[Unit]\n[Install]\nWantedBy=multi-user.target\nAlias=b.service\nAlso=c.socket\n"
    )
    (units / "c.socket").write_text("[Install]\nWantedBy=sockets.target\n")
    (units / "d.service").write_text("[Service]\nExecStart=/bin/true\n")
    made = overlay.enable(tmp_path, ["a.service", "d.service"])
    system = tmp_path / "etc/systemd/system"
    assert sorted(made) == sorted(
        [
            "etc/systemd/system/multi-user.target.wants/a.service",
            "etc/systemd/system/b.service",
            "etc/systemd/system/sockets.target.wants/c.socket",
        ]
    )
    assert (system / "multi-user.target.wants/a.service").readlink() == Path(
        "/usr/lib/systemd/system/a.service"
    )
    with pytest.raises(FileNotFoundError):
        overlay.enable(tmp_path, ["missing.service"])


def test_add_user_replaces_rather_than_duplicates(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nmaxy:x:1:1::/:/bin/sh\n")
    overlay.add_user(tmp_path)
    overlay.add_user(tmp_path)
    lines = (etc / "passwd").read_text().splitlines()
    assert lines == [
        "root:x:0:0:root:/root:/bin/bash",
        "maxy:x:990:990:Maxy:/data/home:/usr/sbin/nologin",
    ]
