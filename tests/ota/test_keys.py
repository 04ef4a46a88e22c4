"""Signing keys: generated pairs, the trust store over two directories, rotated keys."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed448 import Ed448PrivateKey

from appliance.ota.errors import SignatureError
from appliance.ota.keys import (
    TrustStore,
    generate_key,
    install_rotated_key,
    key_id,
    load_private_key,
    load_public_key,
)


def test_a_generated_pair_is_private_and_signs_for_its_public_half(tmp_path: Path) -> None:
    public = generate_key(tmp_path / "release.pem")
    assert public == tmp_path / "release.pub"
    assert stat.S_IMODE((tmp_path / "release.pem").stat().st_mode) == 0o600
    private = load_private_key(tmp_path / "release.pem")
    assert key_id(private.public_key()) == key_id(load_public_key(public))
    store = TrustStore.load([tmp_path])
    assert store.signer_of(private.sign(b"data"), b"data") == key_id(private.public_key())
    assert store.signer_of(private.sign(b"data"), b"other") is None


def test_trust_comes_from_every_directory_and_skips_what_is_not_a_key(tmp_path: Path) -> None:
    image, rotated = tmp_path / "image", tmp_path / "rotated"
    first = load_public_key(generate_key(image / "a.pem"))
    second = load_public_key(generate_key(rotated / "b.pem"))
    (image / "junk.pub").write_text("not a key")
    other = Ed448PrivateKey.generate().public_key()
    (image / "ed448.pub").write_bytes(
        other.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    store = TrustStore.load([image, rotated, tmp_path / "absent"])
    assert set(store) == {key_id(first), key_id(second)}


def test_an_untrusted_signer_is_named_in_the_refusal(tmp_path: Path) -> None:
    generate_key(tmp_path / "k.pem")
    with pytest.raises(SignatureError, match="does not trust"):
        TrustStore.load(tmp_path).verify("0123456789abcdef", b"x" * 64, b"d", "manifest.json")


def test_a_rotated_key_is_installed_once_by_its_id(tmp_path: Path) -> None:
    public = generate_key(tmp_path / "next.pem")
    target = install_rotated_key(tmp_path / "keys", public.read_text())
    assert target.name == f"{key_id(load_public_key(public))}.pub"
    assert install_rotated_key(tmp_path / "keys", public.read_text()) == target
    assert [p.name for p in (tmp_path / "keys").iterdir()] == [target.name]
