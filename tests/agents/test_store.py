"""The agents' folders on disk: slug rules, whole-file writes, the default agent in account.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.agents import store
from appliance.agents.errors import AgentConflict, InvalidAgentInput, NoSuchAgent
from appliance.core.accounts import ACCOUNT_LOCK, create_account, validate_account_id


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    return tmp_path / "accounts" / "acc" / "agents"


def leftovers(folder: Path) -> list[str]:
    """Hidden staging folders and temporary files: none may survive an operation."""
    return sorted(p.name for p in folder.rglob(".*")) if folder.exists() else []


@pytest.mark.parametrize("slug", ["anna", "garden-help", "a", "x9", "a" * 40, "0-0"])
def test_valid_slugs(agents_dir: Path, slug: str) -> None:
    assert store.check_slug(slug) == slug
    assert store.folder_of(agents_dir, slug, must_exist=False) == agents_dir / slug


@pytest.mark.parametrize(
    "slug",
    [
        "",
        "Anna",
        "anna_x",
        "-anna",
        "anna-",
        "a" * 41,
        "..",
        ".",
        "../x",
        "a/b",
        "a\\b",
        "anna ",
        "an\x00na",
        "admin",
        "api",
        "static",
        "sites",
        "bot",
        "login",
        "onboarding",
        "healthz",
        42,
        None,
    ],
)
def test_invalid_or_reserved_slugs_are_refused(agents_dir: Path, slug: object) -> None:
    with pytest.raises(InvalidAgentInput):
        store.folder_of(agents_dir, slug, must_exist=False)
    with pytest.raises(InvalidAgentInput):
        store.create(agents_dir, slug, {"identity": "x"})
    assert not agents_dir.exists()


@given(st.text(max_size=60))
def test_no_slug_reaches_outside_the_agents_folder(text: str) -> None:
    root = Path("/tmp/maxy-agents-property/agents")
    try:
        folder = store.folder_of(root, text, must_exist=False)
    except InvalidAgentInput:
        return
    assert folder.parent == root and folder.name == text and store.is_slug(text)


def test_a_symlinked_agent_folder_is_never_followed(agents_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "IDENTITY.md").write_text("secret")
    agents_dir.mkdir(parents=True)
    (agents_dir / "evil").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidAgentInput):
        store.folder_of(agents_dir, "evil")
    with pytest.raises(InvalidAgentInput):
        store.update(agents_dir, "evil", {"identity": "overwritten"})
    assert (outside / "IDENTITY.md").read_text() == "secret"
    assert store.list_all(agents_dir, "maxy") == []


def test_create_writes_the_whole_agent_at_once(agents_dir: Path) -> None:
    slug = store.create(
        agents_dir,
        "anna",
        {
            "slug": "anna",
            "displayName": "  Anna   the Gardener ",
            "identity": "You are Anna of {{productName}}.\r\nHello.",
            "soul": "Warm.",
            "keywordSubscriptions": ["roses", " opening   hours "],
        },
    )
    folder = agents_dir / slug
    assert (folder / "IDENTITY.md").read_text() == "You are Anna of {{productName}}.\nHello."
    assert (folder / "SOUL.md").read_text() == "Warm."
    config = json.loads((folder / "config.json").read_text())
    assert config == {
        "displayName": "Anna the Gardener",
        "description": "",
        "keywordSubscriptions": ["roses", "opening hours"],
    }
    assert leftovers(agents_dir) == []
    record = store.load(agents_dir, "anna", "anna")
    assert record.is_default and record.subscriptions == ("roses", "opening hours")
    assert record.knowledge_updated_at is None
    with pytest.raises(AgentConflict):
        store.create(agents_dir, "anna", {"identity": "again"})
    assert (folder / "IDENTITY.md").read_text().startswith("You are Anna")


def test_a_create_that_fails_half_way_leaves_no_agent(agents_dir: Path) -> None:
    # SOUL.md cannot be encoded (a lone surrogate): IDENTITY.md was already written by then.
    with pytest.raises(UnicodeEncodeError):
        store.create(agents_dir, "anna", {"identity": "fine", "soul": "broken \ud800"})
    assert not (agents_dir / "anna").exists()
    assert leftovers(agents_dir) == []
    assert store.list_all(agents_dir, "maxy") == []


def test_an_empty_folder_in_the_way_is_a_conflict(agents_dir: Path) -> None:
    (agents_dir / "anna").mkdir(parents=True)
    with pytest.raises(AgentConflict):
        store.create(agents_dir, "anna", {})
    assert leftovers(agents_dir) == []


def test_update_replaces_files_whole_and_keeps_unknown_config(agents_dir: Path) -> None:
    store.create(agents_dir, "anna", {"identity": "old", "soul": "old soul"})
    config_path = agents_dir / "anna" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "avatar": "rose.png"}))
    changed = store.update(
        agents_dir, "anna", {"identity": "new", "keywordSubscriptions": ["Roses"]}
    )
    assert changed == ["identity", "keywordSubscriptions"]
    folder = agents_dir / "anna"
    assert (folder / "IDENTITY.md").read_text() == "new"
    assert (folder / "SOUL.md").read_text() == "old soul"
    stored = json.loads(config_path.read_text())
    assert stored["avatar"] == "rose.png" and stored["keywordSubscriptions"] == ["Roses"]
    assert leftovers(agents_dir) == []


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"keywordSubscriptions": ["a", "b", "c", "d", "e", "f"]}, "at most 5"),
        ({"keywordSubscriptions": ["Roses", "roses"]}, "twice"),
        ({"keywordSubscriptions": ["x" * 61]}, "at most 60"),
        ({"keywordSubscriptions": ["roses)", "tulips"]}, "cannot be a keyword"),
        ({"keywordSubscriptions": "roses"}, "must be a list"),
        ({"identity": "x" * 20_001}, "limit is 20,000"),
        ({"soul": 7}, "must be text"),
        ({"displayName": "n" * 81}, "limited to 80"),
        ({"colour": "red"}, "Unknown field"),
        ({"slug": "bert"}, "cannot change"),
    ],
)
def test_a_bad_edit_changes_nothing(agents_dir: Path, data: dict[str, object], words: str) -> None:
    store.create(agents_dir, "anna", {"identity": "kept", "keywordSubscriptions": ["roses"]})
    before = {p.name: p.read_bytes() for p in (agents_dir / "anna").iterdir()}
    with pytest.raises(InvalidAgentInput, match=words):
        store.update(agents_dir, "anna", data)
    assert {p.name: p.read_bytes() for p in (agents_dir / "anna").iterdir()} == before


def test_unknown_agents_are_404(agents_dir: Path) -> None:
    for action in (
        lambda: store.update(agents_dir, "nobody", {"identity": "x"}),
        lambda: store.load(agents_dir, "nobody", "maxy"),
        lambda: store.delete(agents_dir, "nobody", "maxy"),
    ):
        with pytest.raises(NoSuchAgent):
            action()


def test_the_default_agent_cannot_be_deleted_others_can(agents_dir: Path) -> None:
    store.create(agents_dir, "anna", {})
    store.create(agents_dir, "bert", {})
    with pytest.raises(AgentConflict, match="default"):
        store.delete(agents_dir, "anna", "anna")
    store.delete(agents_dir, "bert", "anna")
    assert [a.slug for a in store.list_all(agents_dir, "anna")] == ["anna"]
    assert leftovers(agents_dir) == []


def test_the_list_puts_the_default_first_and_skips_hidden_folders(agents_dir: Path) -> None:
    store.create(agents_dir, "zed", {"displayName": "Zed"})
    store.create(agents_dir, "anna", {"displayName": "Anna"})
    store.create(agents_dir, "bert", {"displayName": "Bert"})
    (agents_dir / ".bert.new-1234").mkdir()  # a staging folder left by a power cut
    (agents_dir / "admin").mkdir()  # a reserved word is never an agent
    assert [a.slug for a in store.list_all(agents_dir, "zed")] == ["zed", "anna", "bert"]


def test_the_default_agent_is_written_to_account_json_keeping_other_keys(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts"
    account = create_account(accounts, "Owner", product_name="Gardenia")
    path = accounts / account.id / "account.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "timezone": "Europe/Paris"}))
    agents_dir = store.agents_dir_of(accounts, account.id)
    store.create(agents_dir, "anna", {})
    updated = store.set_default(accounts, account, agents_dir, "anna")
    assert updated.default_agent == "anna" and updated.brand == {"productName": "Gardenia"}
    on_disk = json.loads(path.read_text())
    assert on_disk["defaultAgent"] == "anna" and on_disk["timezone"] == "Europe/Paris"
    assert validate_account_id(accounts, account.id).default_agent == "anna"
    # No temporary file is left behind (the lock file that serialises changes stays).
    leftovers = [p.name for p in path.parent.iterdir() if p.name.startswith(".")]
    assert leftovers in ([], [ACCOUNT_LOCK])
    with pytest.raises(NoSuchAgent):
        store.set_default(accounts, account, agents_dir, "nobody")
    assert json.loads(path.read_text())["defaultAgent"] == "anna"
