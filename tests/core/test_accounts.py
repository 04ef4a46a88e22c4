"""Accounts on disk: create, list, and the start-up check of MAXY_ACCOUNT_ID."""

from __future__ import annotations

import json
import re
import tempfile
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.core.accounts import (
    Account,
    AccountError,
    AccountIdError,
    AccountTimeZoneError,
    create_account,
    list_accounts,
    owner_zone,
    set_time_zone,
    update_account_file,
    validate_account_id,
)

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def write_account(accounts_dir: Path, folder: str, content: str | bytes) -> Path:
    """Put an account.json on disk by hand, as a damaged or foreign install might."""
    path = accounts_dir / folder / "account.json"
    path.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def account_json(account_id: str, created_at: str = "2026-01-01T00:00:00+00:00") -> str:
    return json.dumps(
        {
            "id": account_id,
            "owner": "Someone",
            "createdAt": created_at,
            "defaultAgent": "maxy",
            "brand": {"productName": "Maxy"},
        }
    )


# --- create and list -------------------------------------------------------------------------


def test_created_account_is_written_as_account_json(tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    account = create_account(tmp_path / "accounts", "Ada Lovelace")
    after = datetime.now(UTC)

    assert UUID4.match(account.id)
    data = json.loads((tmp_path / "accounts" / account.id / "account.json").read_text())
    assert set(data) == {"id", "owner", "createdAt", "defaultAgent", "brand"}
    assert data["id"] == account.id
    assert data["owner"] == "Ada Lovelace"
    assert data["defaultAgent"] == "maxy"
    assert data["brand"] == {"productName": "Maxy"}
    created = datetime.fromisoformat(data["createdAt"])
    assert created.utcoffset() == timedelta(0)
    assert before <= created <= after
    assert not list((tmp_path / "accounts" / account.id).glob("*.tmp"))


def test_create_then_list_round_trip(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    account = create_account(accounts, "Ada", product_name="Ada's Box")
    assert list_accounts(accounts) == [account]
    assert account.brand == {"productName": "Ada's Box"}


def test_owner_is_trimmed(tmp_path: Path) -> None:
    account = create_account(tmp_path / "accounts", "  Ada \n")
    assert account.owner == "Ada"
    assert list_accounts(tmp_path / "accounts")[0].owner == "Ada"


def test_each_account_gets_its_own_id(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    made = [create_account(accounts, f"owner {n}") for n in range(5)]
    assert len({a.id for a in made}) == 5
    assert sorted(a.id for a in list_accounts(accounts)) == sorted(a.id for a in made)


@pytest.mark.parametrize("owner", ["", " ", "\t\n"])
def test_empty_owner_is_refused_and_nothing_is_written(tmp_path: Path, owner: str) -> None:
    accounts = tmp_path / "accounts"
    with pytest.raises(AccountError, match="owner"):
        create_account(accounts, owner)
    assert list_accounts(accounts) == []
    assert not accounts.exists() or not any(accounts.iterdir())


@given(owner=st.text(min_size=1).filter(lambda s: s.strip() != ""), product=st.text())
def test_any_owner_and_product_name_survive_the_round_trip(owner: str, product: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        accounts = Path(folder) / "accounts"
        account = create_account(accounts, owner, product_name=product)
        [listed] = list_accounts(accounts)
    assert listed == account
    assert listed.owner == owner.strip()
    assert listed.brand["productName"] == product


def test_no_accounts_folder_lists_nothing(tmp_path: Path) -> None:
    assert list_accounts(tmp_path / "does-not-exist") == []


def test_accounts_are_listed_oldest_first(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    ids = [str(uuid.uuid4()) for _ in range(3)]
    stamps = ["2026-03-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"]
    for account_id, stamp in zip(ids, stamps, strict=True):
        write_account(accounts, account_id, account_json(account_id, stamp))
    listed = list_accounts(accounts)
    assert [a.created_at for a in listed] == sorted(stamps)
    assert [a.id for a in listed] == [ids[1], ids[2], ids[0]]


def test_missing_optional_fields_get_defaults(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    account_id = str(uuid.uuid4())
    write_account(accounts, account_id, json.dumps({"id": account_id}))
    [account] = list_accounts(accounts)
    assert account == Account(account_id, "", "", "maxy", {})


# --- damaged accounts are skipped, not fatal -------------------------------------------------

OTHER_ID = "00000000-0000-4000-8000-000000000000"

DAMAGED: list[Any] = [
    pytest.param("{not json", id="invalid-json"),
    pytest.param("", id="empty-file"),
    pytest.param(b"\xff\xfe\x00garbage", id="not-utf8"),
    pytest.param("[]", id="json-list"),
    pytest.param("null", id="json-null"),
    pytest.param('"a string"', id="json-string"),
    pytest.param(json.dumps({"owner": "no id"}), id="no-id"),
    pytest.param(account_json(OTHER_ID), id="id-differs-from-folder"),
    pytest.param(json.dumps({"id": "{folder}", "brand": "not a map"}), id="brand-not-a-map"),
    pytest.param(json.dumps({"id": "{folder}", "brand": [1, 2]}), id="brand-a-list"),
]


@pytest.mark.parametrize("content", DAMAGED)
def test_damaged_account_is_skipped(tmp_path: Path, content: str | bytes) -> None:
    accounts = tmp_path / "accounts"
    good = create_account(accounts, "Ada")
    folder = str(uuid.uuid4())
    if isinstance(content, str):
        content = content.replace("{folder}", folder)
    write_account(accounts, folder, content)
    assert list_accounts(accounts) == [good]


@pytest.mark.parametrize(
    "folder",
    ["not-a-uuid", "0000000-0000-4000-8000-000000000000", "account-1"],
)
def test_account_whose_id_is_not_a_uuid_is_skipped(tmp_path: Path, folder: str) -> None:
    accounts = tmp_path / "accounts"
    write_account(accounts, folder, account_json(folder))
    assert list_accounts(accounts) == []


def test_folder_without_account_json_is_ignored(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    good = create_account(accounts, "Ada")
    (accounts / str(uuid.uuid4())).mkdir()
    (accounts / "README").write_text("not an account")
    assert list_accounts(accounts) == [good]


# --- validate_account_id ---------------------------------------------------------------------


def test_valid_account_id_returns_the_account(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    create_account(accounts, "Someone else")
    mine = create_account(accounts, "Ada")
    assert validate_account_id(accounts, mine.id) == mine


@pytest.mark.parametrize(
    ("setup", "account_id", "reason", "in_message"),
    [
        ("one-account", "", "missing", "MAXY_ACCOUNT_ID"),
        ("nothing", "", "missing", "MAXY_ACCOUNT_ID"),
        ("nothing", OTHER_ID, "no-on-disk-account", "maxy account create"),
        ("empty-folder", OTHER_ID, "no-on-disk-account", "maxy account create"),
        ("only-damaged", OTHER_ID, "no-on-disk-account", "maxy account create"),
        ("one-account", OTHER_ID, "mismatch", OTHER_ID),
        ("one-account", "not-even-a-uuid", "mismatch", "not-even-a-uuid"),
    ],
)
def test_account_id_failures(
    tmp_path: Path, setup: str, account_id: str, reason: str, in_message: str
) -> None:
    accounts = tmp_path / "accounts"
    if setup == "one-account":
        create_account(accounts, "Ada")
    elif setup == "empty-folder":
        accounts.mkdir()
    elif setup == "only-damaged":
        write_account(accounts, str(uuid.uuid4()), "{not json")

    with pytest.raises(AccountIdError) as caught:
        validate_account_id(accounts, account_id)
    error = caught.value
    assert error.reason == reason
    assert error.line == f"[graph-health] account-id-env FATAL reason={reason}"
    assert in_message in str(error)
    assert isinstance(error, AccountError)


@given(account_id=st.uuids(version=4).map(str))
def test_an_id_that_is_not_on_disk_is_a_mismatch(account_id: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        accounts = Path(folder) / "accounts"
        existing = create_account(accounts, "Ada")
        if account_id == existing.id:
            return
        with pytest.raises(AccountIdError) as caught:
            validate_account_id(accounts, account_id)
    assert caught.value.reason == "mismatch"


def test_concurrent_changes_of_account_json_all_land(tmp_path: Path) -> None:
    """Two writers changing different keys at once (a page and an admin tool) lose nothing."""
    account = create_account(tmp_path, "Owner")

    def add(key: str) -> None:
        for i in range(40):

            def append(data: dict[str, Any], i: int = i) -> None:
                data.setdefault(key, []).append(i)

            update_account_file(tmp_path, account.id, append)

    writers = [threading.Thread(target=add, args=(key,)) for key in ("left", "right")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    stored = json.loads((tmp_path / account.id / "account.json").read_text())
    assert stored["left"] == stored["right"] == list(range(40))
    assert stored["id"] == account.id and stored["brand"] == {"productName": "Maxy"}


def test_a_change_may_not_move_the_account_to_another_id(tmp_path: Path) -> None:
    account = create_account(tmp_path, "Owner")
    with pytest.raises(AccountError, match="may not change its id"):
        update_account_file(tmp_path, account.id, lambda data: data.update(id="other"))
    assert json.loads((tmp_path / account.id / "account.json").read_text())["id"] == account.id


# --- the owner's time zone --------------------------------------------------------------------


def test_the_time_zone_is_kept_in_account_json_and_utc_while_unset(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    plain = create_account(accounts, "Ada")
    assert "timeZone" not in plain.to_json() and owner_zone(accounts, plain.id).key == "UTC"
    paris = create_account(accounts, "Bea", time_zone="Europe/Paris")
    on_disk = json.loads((accounts / paris.id / "account.json").read_text())
    assert on_disk["timeZone"] == "Europe/Paris" and paris.time_zone == "Europe/Paris"
    assert Account.from_json(on_disk) == paris
    assert set_time_zone(accounts, plain.id, "Asia/Tokyo").key == "Asia/Tokyo"
    assert owner_zone(accounts, plain.id).key == "Asia/Tokyo"


def test_a_time_zone_that_is_no_zone_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    with pytest.raises(AccountTimeZoneError, match="IANA time zone"):
        create_account(accounts, "Ada", time_zone="Paris")
    assert list_accounts(accounts) == []
    account = create_account(accounts, "Ada")
    before = (accounts / account.id / "account.json").read_text()
    with pytest.raises(AccountTimeZoneError, match="not a time zone"):
        set_time_zone(accounts, account.id, "Mars/Olympus")
    assert (accounts / account.id / "account.json").read_text() == before
    with pytest.raises(AccountError, match="cannot be read"):
        owner_zone(accounts, "no-such-account")
