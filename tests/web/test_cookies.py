"""Login cookies: only a genuine, current cookie for this network is a session."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.web import cookies
from appliance.web.cookies import Session

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
NOW = 1_800_000_000


def lan_session(**changes: object) -> Session:
    fields: dict[str, object] = {
        "id": "abcdefghijklmnopqrstuvwx",
        "network": "lan",
        "issued_at": NOW,
        "expires_at": NOW + cookies.LAN_LIFETIME_S,
        "generation": 3,
    }
    fields.update(changes)
    return Session(**fields)  # type: ignore[arg-type]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_a_signed_session_verifies_to_itself() -> None:
    session = lan_session()
    value = cookies.sign(KEY, session)
    assert cookies.verify(KEY, value, "lan", generation=3, now=NOW + 10) == session
    assert cookies.verify(KEY, value, "lan", now=NOW + 10) == session
    assert len(value) < cookies.MAX_COOKIE_CHARS


def test_lifetimes_are_thirty_days_on_the_lan_and_twelve_hours_remotely() -> None:
    lan = cookies.issue("lan", 0, now=NOW)
    external = cookies.issue("external", 0, now=NOW)
    assert lan.expires_at - lan.issued_at == 30 * 24 * 3600
    assert external.expires_at - external.issued_at == 12 * 3600
    assert lan.id != external.id


@pytest.mark.parametrize(
    "case",
    ["empty", "none", "truncated", "mac-cut", "no-dot", "two-dots", "oversized", "garbage"],
)
def test_malformed_values_are_rejected(case: str) -> None:
    value = cookies.sign(KEY, lan_session())
    payload, mac = value.split(".")
    bad: str | None = {
        "empty": "",
        "none": None,
        "truncated": value[:-1],
        "mac-cut": payload + "." + mac[:20],
        "no-dot": payload + mac,
        "two-dots": value + ".x",
        "oversized": value + "A" * 500,
        "garbage": "%%%.$$$",
    }[case]
    assert cookies.verify(KEY, bad, "lan", now=NOW) is None


def test_a_cookie_signed_with_another_key_is_rejected() -> None:
    value = cookies.sign(OTHER_KEY, lan_session())
    assert cookies.verify(KEY, value, "lan", now=NOW) is None


def test_a_forged_payload_with_the_old_mac_is_rejected() -> None:
    value = cookies.sign(KEY, lan_session(generation=3))
    _, mac = value.split(".")
    forged = b"v1|abcdefghijklmnopqrstuvwx|l|1800000000|9999999999|3"
    assert cookies.verify(KEY, b64(forged) + "." + mac, "lan", now=NOW) is None


def test_a_mac_without_the_domain_prefix_is_rejected() -> None:
    # Whoever can get the key to MAC arbitrary text (for another purpose) cannot mint cookies.
    payload = b"v1|abcdefghijklmnopqrstuvwx|l|1800000000|9999999999|3"
    plain = hmac.new(KEY, payload, hashlib.sha256).digest()
    assert cookies.verify(KEY, b64(payload) + "." + b64(plain), "lan", now=NOW) is None


def test_an_expired_cookie_is_rejected() -> None:
    session = lan_session(expires_at=NOW + 60)
    value = cookies.sign(KEY, session)
    assert cookies.verify(KEY, value, "lan", now=NOW + 59) == session
    assert cookies.verify(KEY, value, "lan", now=NOW + 60) is None


def test_a_lan_cookie_is_not_valid_remotely_and_vice_versa() -> None:
    lan = cookies.sign(KEY, lan_session())
    external = cookies.sign(KEY, lan_session(network="external"))
    assert cookies.verify(KEY, lan, "external", now=NOW) is None
    assert cookies.verify(KEY, external, "lan", now=NOW) is None
    assert cookies.verify(KEY, external, "external", now=NOW) is not None


def test_a_stale_generation_is_rejected() -> None:
    value = cookies.sign(KEY, lan_session(generation=3))
    assert cookies.verify(KEY, value, "lan", generation=4, now=NOW) is None
    assert cookies.verify(KEY, value, "lan", generation=3, now=NOW) is not None


def test_a_genuinely_signed_but_ill_formed_payload_is_rejected() -> None:
    for payload in (
        b"v2|abcdefghijklmnopqrstuvwx|l|1|9999999999|0",
        b"v1|short|l|1|9999999999|0",
        b"v1|abcdefghijklmnopqrstuvwx|x|1|9999999999|0",
        b"v1|abcdefghijklmnopqrstuvwx|l|-1|9999999999|0",
        b"v1|abcdefghijklmnopqrstuvwx|l|9999999999|1|0",
        b"v1|abcdefghijklmnopqrstuvwx|l|1|9999999999",
        b"\xff\xfe",
    ):
        mac = hmac.new(KEY, b"maxy-session-v1\x00" + payload, hashlib.sha256).digest()
        assert cookies.verify(KEY, b64(payload) + "." + b64(mac), "lan", now=NOW) is None


def test_sign_refuses_an_id_that_could_break_the_payload() -> None:
    with pytest.raises(ValueError):
        cookies.sign(KEY, lan_session(id="abc|def|ghijklmnopqrst"))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_mutation_of_a_cookie_is_rejected(data: st.DataObject) -> None:
    value = cookies.sign(KEY, lan_session())
    index = data.draw(st.integers(0, len(value) - 1), label="index")
    action = data.draw(st.sampled_from(["replace", "delete", "insert"]), label="action")
    char = data.draw(st.characters(codec="utf-8"), label="char")
    if action == "replace":
        mutated = value[:index] + char + value[index + 1 :]
    elif action == "delete":
        mutated = value[:index] + value[index + 1 :]
    else:
        mutated = value[:index] + char + value[index:]
    if mutated == value:
        return
    # A change can only survive if it decodes to the same bytes (base64 slack bits at the end).
    session = cookies.verify(KEY, mutated, "lan", now=NOW)
    assert session is None or session == lan_session()


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.text(max_size=600), st.none()))
def test_verify_never_raises_on_arbitrary_text(value: str | None) -> None:
    assert cookies.verify(KEY, value, "lan", now=NOW) is None


def test_load_key_creates_a_private_key_once(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "cookie-hmac.key"
    key = cookies.load_key(path)
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert cookies.load_key(path) == key
    assert [p.name for p in path.parent.iterdir()] == ["cookie-hmac.key"]


def test_processes_racing_to_create_the_key_agree(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "cookie-hmac.key"
    results: list[bytes] = []
    barrier = threading.Barrier(8)

    def load() -> None:
        barrier.wait()
        results.append(cookies.load_key(path))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and len(set(results)) == 1
    assert path.read_bytes() == results[0]


def test_a_damaged_key_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "cookie-hmac.key"
    path.write_bytes(b"short")
    with pytest.raises(cookies.CookieKeyError, match="Delete it"):
        cookies.load_key(path)


def test_the_generation_starts_at_zero_and_bumps_atomically(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    assert cookies.read_generation(keys) == 0
    assert cookies.bump_generation(keys) == 1
    assert cookies.bump_generation(keys) == 2
    assert cookies.read_generation(keys) == 2
    path = keys / cookies.GENERATION_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(keys)) == [cookies.GENERATION_FILE]
