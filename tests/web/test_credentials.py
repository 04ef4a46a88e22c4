"""Admin PIN and remote password: scrypt hashes in private files."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from appliance.web import credentials
from appliance.web.credentials import AlreadySet, Credentials, InvalidCredential


def test_a_pin_is_stored_hashed_and_checked(tmp_path: Path) -> None:
    store = Credentials(tmp_path / "keys")
    assert not store.has_pin() and not store.check_pin("1234")
    store.set_pin("482913", first=True)
    assert store.has_pin()
    assert store.check_pin("482913")
    assert not store.check_pin("482914")
    assert not store.check_pin("")
    text = store.pin_path.read_text()
    assert "482913" not in text
    assert text.startswith(f"scrypt${credentials.SCRYPT_N}$8$1$")
    assert stat.S_IMODE(store.pin_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.keys_dir.stat().st_mode) == 0o700


def test_the_same_secret_hashes_differently_each_time() -> None:
    first, second = credentials.hash_secret("1234"), credentials.hash_secret("1234")
    assert first != second
    assert credentials.check_secret("1234", first) and credentials.check_secret("1234", second)


def test_parameters_travel_with_the_hash() -> None:
    # A hash made with other scrypt parameters still checks: they are read from the record.
    import base64
    import hashlib

    salt = b"0123456789abcdef"
    digest = hashlib.scrypt(b"correct horse", salt=salt, n=2**10, r=4, p=2, dklen=24)

    def enc(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    stored = f"scrypt${2**10}$4$2${enc(salt)}${enc(digest)}"
    assert credentials.check_secret("correct horse", stored)
    assert not credentials.check_secret("correct horsE", stored)


@pytest.mark.parametrize(
    "stored",
    [
        "",
        "garbage",
        "bcrypt$1$2$3$4$5",
        "scrypt$16384$8$1$!!!$AAAA",
        "scrypt$3$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "scrypt$2147483648$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAA",
    ],
)
def test_an_unreadable_record_never_matches(stored: str) -> None:
    assert credentials.check_secret("1234", stored) is False


@pytest.mark.parametrize(
    ("pin", "confirm", "code"),
    [
        ("123", None, "invalid-pin"),
        ("1234567890123", None, "invalid-pin"),
        ("12a4", None, "invalid-pin"),
        ("١٢٣٤", None, "invalid-pin"),  # Arabic-Indic digits: digits, but not ASCII
        (" 1234", None, "invalid-pin"),
        ("1234", "1235", "pin-mismatch"),
    ],
)
def test_pin_rules(pin: str, confirm: str | None, code: str) -> None:
    with pytest.raises(InvalidCredential) as caught:
        credentials.validate_pin(pin, confirm)
    assert caught.value.code == code


@pytest.mark.parametrize("pin", ["1234", "000000000000", "0042"])
def test_valid_pins(pin: str) -> None:
    credentials.validate_pin(pin, pin)


def test_onboarding_sets_the_pin_only_once(tmp_path: Path) -> None:
    store = Credentials(tmp_path / "keys")
    store.set_pin("1111", first=True)
    with pytest.raises(AlreadySet):
        store.set_pin("2222", first=True)
    assert store.check_pin("1111")
    store.set_pin("3333")  # a change from Settings replaces it
    assert store.check_pin("3333") and not store.check_pin("1111")


def test_racing_onboardings_leave_exactly_one_pin(tmp_path: Path) -> None:
    store = Credentials(tmp_path / "keys")
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def setup(pin: str) -> None:
        barrier.wait()
        try:
            store.set_pin(pin, first=True)
            outcomes.append(pin)
        except AlreadySet:
            outcomes.append("refused")

    threads = [threading.Thread(target=setup, args=(f"{n}{n}{n}{n}",)) for n in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o != "refused"]
    assert len(winners) == 1 and outcomes.count("refused") == 3
    assert store.check_pin(winners[0])
    assert sorted(p.name for p in store.keys_dir.iterdir()) == ["admin-pin"]


def test_remote_password_rules_and_storage(tmp_path: Path) -> None:
    store = Credentials(tmp_path / "keys")
    assert not store.has_remote_password()
    with pytest.raises(InvalidCredential, match="at least 10"):
        store.set_remote_password("short")
    with pytest.raises(InvalidCredential):
        store.set_remote_password("x" * 2000)
    assert not store.has_remote_password()
    store.set_remote_password("a long remote secret")
    assert store.check_remote_password("a long remote secret")
    assert not store.check_remote_password("a long remote secreT")
    assert not store.check_pin("a long remote secret")
    assert stat.S_IMODE(store.remote_password_path.stat().st_mode) == 0o600
