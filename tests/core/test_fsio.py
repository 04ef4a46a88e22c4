"""The one durable write, the one secret writer and the one sha256."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from appliance.core.fsio import sha256_file, sha256_hex, staged, write_atomic, write_secret


def test_write_atomic_replaces_whole_file_with_exact_mode(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    old_umask = os.umask(0o077)  # the mode asked for wins over the umask
    try:
        assert write_atomic(target, "new\n", mode=0o644)
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left behind


def test_exclusive_write_keeps_the_first(tmp_path: Path) -> None:
    target = tmp_path / "key"
    assert write_atomic(target, b"first", exclusive=True)
    assert not write_atomic(target, b"second", exclusive=True)
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


def test_staged_file_that_is_not_committed_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "config.yml"
    target.write_text("kept\n")
    with pytest.raises(RuntimeError), staged(target, "refused\n", mode=0o600) as temp:
        assert temp.path.read_text() == "refused\n"
        assert temp.path.stat().st_mode & 0o777 == 0o600
        raise RuntimeError("the check refused it")
    assert target.read_text() == "kept\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yml"]


def test_write_secret_is_0600_in_a_0700_folder(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    path = folder / "cookie-hmac.key"
    assert write_secret(path, b"s3cret")
    assert path.read_bytes() == b"s3cret"
    assert path.stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700
    assert not write_secret(path, b"other", exclusive=True)
    assert path.read_bytes() == b"s3cret"


def test_sha256_of_a_file_and_of_bytes(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)  # more than one block
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert sha256_hex("é") == hashlib.sha256("é".encode()).hexdigest()


def test_write_atomic_never_shows_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "IDENTITY.md"
    path.write_text("before")
    inode = os.stat(path).st_ino
    write_atomic(path, "after")
    assert path.read_text() == "after" and os.stat(path).st_ino != inode  # replaced, not rewritten
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "\ud800")
    assert path.read_text() == "after" and sorted(p.name for p in tmp_path.iterdir()) == [
        "IDENTITY.md"
    ]
