"""Artefacts through a real `maxy app` in front of a real `maxy engine`: the list, a document's
kept text edited and re-ingested (only what changed re-embedded), a PDF source served inline and
never anything outside the account's attachments, agents' files editable from the home network
only, specialists read-only, and a one-line reason for a row with nothing to read."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.core.documents import text_path
from tests.app.running_app import edge_headers
from tests.app.traversal import DOTS, PASSWD_MARKER, SECRET_MARKER, build_traversal_tree
from tests.support.processes import Neo4jServer
from tests.support.stacks import Stack, add_agent, make_env, running_stack

API = "/api/admin/artefacts"
EXTERNAL = edge_headers("external", "203.0.113.9", "admin")
REMOTE_PASSWORD = "correct horse battery staple"
HANDBOOK = "\n\n".join(
    [
        "The garden has four raised beds.",
        "# Watering",
        "Water the tomatoes every morning. The rain barrel lasts a week.",
        "# Compost",
        "Turn the heap every fortnight and keep it damp.",
    ]
)
# A one-page PDF (no fonts needed to be a PDF; viewers and the magic number accept it).
PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("artefacts")
    env = make_env(neo4j_server, root / "data")
    anna = add_agent(env, "anna", {"displayName": "Anna the Gardener"})
    (anna / "IDENTITY.md").write_text("You are Anna, who knows the garden.\n")
    (anna / "KNOWLEDGE.md").write_text("# What Anna knows\n\nThe beds.\n")
    with running_stack(env, root / "logs", "engine", "app") as running:
        yield running


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    """A logged-in LAN admin whose requests carry the session's CSRF token."""
    with stack.client(stack.admin_cookies()) as client:
        client.headers["X-Maxy-CSRF"] = client.get("/api/admin/session").json()["csrf"]
        yield client


def account_dir(stack: Stack) -> Path:
    return stack.env.settings.accounts_dir / stack.env.account_id


def ingest(stack: Stack, title: str, text: str, attachment: str, **extra: Any) -> str:
    done = stack.rpc("ingest", {"title": title, "text": text, "attachmentId": attachment, **extra})
    return str(done["documentId"])


@pytest.fixture(scope="module")
def documents(stack: Stack) -> dict[str, str]:
    attachments = account_dir(stack) / "attachments"
    attachments.mkdir(parents=True, exist_ok=True)
    (attachments / "brochure.pdf").write_bytes(PDF)
    old = ingest(stack, "Old notes", "Written before texts were kept.", "old-notes")
    text_path(account_dir(stack), old).unlink()  # as if ingested before the text was kept
    return {
        "handbook": ingest(stack, "Garden handbook", HANDBOOK, "handbook"),
        "brochure": ingest(
            stack, "Brochure", "Seeds and bulbs.", f"file:{attachments / 'brochure.pdf'}"
        ),
        "old": old,
    }


def test_the_list_has_every_document_the_agents_files_and_the_specialists(
    admin: httpx.Client, documents: dict[str, str]
) -> None:
    body = admin.get(API).json()
    titles = {d["title"]: d["id"] for d in body["documents"]}
    assert titles["Garden handbook"] == f"document:{documents['handbook']}"
    assert {"Brochure", "Old notes"} <= set(titles)
    anna = next(a for a in body["agents"] if a["slug"] == "anna")
    files = {f["name"]: (f["editable"], f["exists"]) for f in anna["files"]}
    assert files == {
        "IDENTITY.md": (True, True),
        "SOUL.md": (True, False),
        "KNOWLEDGE.md": (False, True),
        "config.json": (False, True),
    }
    roles = {(r["plugin"], r["role"]) for r in body["roles"]}
    assert ("memory", "librarian") in roles and ("admin", "database-operator") in roles


def test_a_document_is_edited_and_ingested_again_embedding_only_what_changed(
    stack: Stack, admin: httpx.Client, documents: dict[str, str]
) -> None:
    url = f"{API}/documents/{documents['handbook']}"
    opened = admin.get(url).json()
    assert opened["view"] == "text" and opened["editable"] is True
    assert opened["text"] == HANDBOOK and opened["title"] == "Garden handbook"
    assert "3 sections" in opened["subtitle"] and "seen by only you" in opened["subtitle"]
    edited = HANDBOOK.replace("every fortnight", "every Sunday")
    saved = admin.put(url, json={"text": edited, "version": opened["version"]})
    assert saved.status_code == 200, saved.text
    done = saved.json()["saved"]
    # Only the compost chunk, its section and the document (its summary) changed.
    assert done["embedded"] <= 3 and done["reused"] >= 3, done
    assert admin.get(url).json()["text"] == edited
    found = admin.get("/api/admin/search", params={"q": "turn the heap every Sunday"}).json()
    titles = [r["title"] for r in found["results"]]
    assert "Garden handbook \u203a Compost" in titles, titles
    # A save from the copy opened before is refused, and changes nothing.
    stale = admin.put(url, json={"text": "lost?", "version": opened["version"]})
    assert (stale.status_code, stale.json()["code"]) == (409, "changed-elsewhere")
    assert admin.get(url).json()["text"] == edited


def test_a_pdf_is_served_inline_to_this_origin_only(
    admin: httpx.Client, documents: dict[str, str]
) -> None:
    opened = admin.get(f"{API}/documents/{documents['brochure']}").json()
    assert opened["view"] == "pdf" and opened["editable"] is False and "text" not in opened
    shown = admin.get(opened["fileUrl"])
    assert shown.status_code == 200 and shown.content == PDF
    assert shown.headers["content-type"] == "application/pdf"
    assert shown.headers["content-disposition"].startswith("inline;")
    assert "frame-ancestors 'self'" in shown.headers["content-security-policy"]
    assert shown.headers["x-frame-options"] == "SAMEORIGIN"
    downloaded = admin.get(opened["downloadUrl"])
    assert downloaded.headers["content-disposition"].startswith('attachment; filename="brochure')
    refused = admin.put(f"{API}/documents/{documents['brochure']}", json={"text": "x"})
    assert (refused.status_code, refused.json()["code"]) == (409, "read-only")


def test_a_document_with_nothing_to_read_says_why_in_one_line(
    admin: httpx.Client, documents: dict[str, str]
) -> None:
    opened = admin.get(f"{API}/documents/{documents['old']}").json()
    assert opened["view"] == "missing" and opened["editable"] is False
    assert opened["banner"].startswith("No readable file:") and "\n" not in opened["banner"]
    assert admin.get(f"{API}/documents/no-such-document").status_code == 404
    assert admin.get(f"{API}/documents/..%2f..%2faccount.json").status_code == 404


def evil_attachments(attachments: Path) -> list[str]:
    """attachmentIds an agent could write that name files outside the attachments folder."""
    spelled = [f"file:{attachments}/{dots}/{dots}/{dots}/secret.txt" for dots in DOTS]
    return [
        *spelled,
        "file:/etc/passwd",
        "file:etc/passwd",
        f"file:{attachments}/../account.json",
        f"file:{attachments}/sub/../../../secret.txt",
        f"file:{attachments}/link-out.pdf",
        f"file:{attachments}/link-dir/secret.txt",
        f"file:{attachments}/.hidden.pdf",
        f"file:{attachments}//etc/passwd",
        f"file:{attachments}/\x00/../../secret.txt",
        f"file:{attachments}",
    ]


def test_no_source_outside_the_attachments_folder_is_ever_served(
    stack: Stack, admin: httpx.Client
) -> None:
    data_dir = stack.env.settings.data_dir
    build_traversal_tree(data_dir, stack.env.account_id)  # secrets around the account
    attachments = account_dir(stack) / "attachments"
    attachments.mkdir(parents=True, exist_ok=True)
    os.symlink(data_dir / "outside" / "secret.txt", attachments / "link-out.pdf")
    os.symlink(data_dir / "outside", attachments / "link-dir")
    (attachments / ".hidden.pdf").write_text(f"{SECRET_MARKER} hidden\n")
    for index, attachment in enumerate(evil_attachments(attachments)):
        document = ingest(stack, f"Evil {index}", "Harmless text.", attachment)
        opened = admin.get(f"{API}/documents/{document}").json()
        assert opened["view"] == "text" and opened["text"] == "Harmless text.", attachment
        for path in (f"/admin/artefacts/documents/{document}/file", opened["downloadUrl"]):
            served = admin.get(path)
            assert SECRET_MARKER.encode() not in served.content, attachment
            assert PASSWD_MARKER.encode() not in served.content, attachment
            assert served.content in (b"Harmless text.", b"") or served.status_code >= 400


def test_agents_files_are_edited_from_the_home_network_only(
    stack: Stack, admin: httpx.Client
) -> None:
    identity = admin.get(f"{API}/agents/anna/IDENTITY.md").json()
    assert identity["editable"] and identity["text"].startswith("You are Anna")
    soul = admin.get(f"{API}/agents/anna/SOUL.md").json()
    assert soul["editable"] and soul["text"] == "" and soul["banner"].startswith("No SOUL.md yet")
    saved = admin.put(
        f"{API}/agents/anna/SOUL.md", json={"text": "Warm and brief.", "version": soul["version"]}
    )
    assert saved.status_code == 200, saved.text
    folder = account_dir(stack) / "agents" / "anna"
    assert (folder / "SOUL.md").read_text() == "Warm and brief."
    knowledge = admin.get(f"{API}/agents/anna/KNOWLEDGE.md").json()
    assert not knowledge["editable"] and knowledge["text"].startswith("# What Anna knows")
    refused = admin.put(f"{API}/agents/anna/KNOWLEDGE.md", json={"text": "x"})
    assert (refused.status_code, refused.json()["code"]) == (403, "read-only")
    for bad in ("../anna/SOUL.md", "anna/../../account.json", "ANNA/SOUL.md", "anna/secret.txt"):
        assert admin.get(f"{API}/agents/{bad}").status_code in (400, 404), bad
    # An owner logged in over the tunnel may read, not change.
    answer = admin.post("/api/admin/settings/remote-password", json={"password": REMOTE_PASSWORD})
    assert answer.status_code == 200, answer.text
    with stack.client(**EXTERNAL) as remote:
        login = remote.post("/api/auth/login", json={"password": REMOTE_PASSWORD})
        remote.headers["X-Maxy-CSRF"] = login.json()["csrf"]
        assert remote.get(f"{API}/agents/anna/SOUL.md").status_code == 200
        changed = remote.put(f"{API}/agents/anna/SOUL.md", json={"text": "Cold."})
        assert (changed.status_code, changed.json()["code"]) == (403, "lan-only")
    assert (folder / "SOUL.md").read_text() == "Warm and brief."


def test_a_specialist_is_read_only(admin: httpx.Client) -> None:
    role = admin.get(f"{API}/roles/memory/librarian").json()
    assert role["view"] == "text" and role["editable"] is False
    shipped = Path(__file__).parents[2] / "appliance/plugins/core/memory/agents/librarian.md"
    assert role["text"] == shipped.read_text()
    assert admin.get(f"{API}/roles/memory/no-such-role").status_code == 404
    assert admin.get(f"{API}/roles/nope/librarian").status_code == 404


def test_the_page_is_the_shell_with_the_pane(admin: httpx.Client) -> None:
    html = admin.get("/admin/artefacts").text
    assert 'id="artefact-view"' in html and "/static/js/artefacts.js" in html
    assert 'data-nav="artefacts" title="Artefacts" aria-current="page"' in html
