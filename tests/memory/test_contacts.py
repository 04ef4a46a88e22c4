"""The contact book against the real Neo4j and model: merge by email, duplicates without one,
update, lookup, list, search, soft delete and the owner-only rule."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.memory.contacts import Contacts
from appliance.memory.errors import WriteRejected
from appliance.memory.lifecycle import restore, soft_delete
from appliance.memory.search import SearchRequest
from appliance.memory.write import WriteRequest
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio


@pytest.fixture
def book(memory: Memory) -> Contacts:
    return Contacts(memory.graph, memory.writer)


async def people(memory: Memory, **match: Any) -> list[dict[str, Any]]:
    """Every Person node of the test account (deleted ones too), with all its properties."""
    rows, _ = await memory.graph.run(
        "MATCH (n:Person {accountId: $account}) RETURN properties(n) AS p ORDER BY n.createdAt",
        {"account": memory.caller.account_id},
    )
    found = [row["p"] for row in rows]
    return [p for p in found if all(p.get(k) == v for k, v in match.items())]


async def found(memory: Memory, query: str, caller: Caller | None = None) -> list[str]:
    result = await memory.searcher.search(caller or memory.caller, SearchRequest(query))
    return [c.node_id for c in result.results]


async def test_the_same_email_in_any_case_or_spacing_merges_into_one_contact(
    memory: Memory, book: Contacts
) -> None:
    first = await book.create(
        memory.caller, {"name": "Anna  Berg", "email": "Anna.Berg@Example.com"}
    )
    assert first["created"] and first["embedded"]
    assert first["contact"] == {
        "id": first["id"],
        "name": "Anna Berg",
        "email": "anna.berg@example.com",
        "createdAt": first["contact"]["createdAt"],
        "updatedAt": first["contact"]["updatedAt"],
    }
    again = await book.create(
        memory.caller,
        {"name": "Anna Berg", "email": "  ANNA.BERG@example.COM ", "telephone": "+46 70 123 45 67"},
    )
    assert again["id"] == first["id"] and again["created"] is False
    assert again["contact"]["telephone"] == "+46 70 123 45 67"
    stored = await people(memory)
    assert len(stored) == 1
    assert stored[0]["emailKey"] == "anna.berg@example.com"
    assert stored[0]["scope"] == "admin" and len(stored[0]["embedding"]) == 384


async def test_two_first_creates_of_one_email_at_once_make_one_person(
    memory: Memory, book: Contacts
) -> None:
    done = await asyncio.gather(
        *(
            book.create(memory.caller, {"name": f"Sam {i}", "email": "sam@example.org"})
            for i in range(4)
        )
    )
    assert len({d["id"] for d in done}) == 1
    assert [d["created"] for d in done].count(True) == 1
    assert len(await people(memory)) == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Anna", "email": "anna(at)example.com"}, "is not an email address"),
        ({"name": "Anna", "email": "anna@localhost"}, "is not an email address"),
        ({"name": "Anna", "email": "an na@example.com"}, "is not an email address"),
        ({"name": "Anna", "telephone": "call me"}, "is not a telephone number"),
        ({"name": "Anna", "telephone": "12"}, "is not a telephone number"),
        ({"name": "Anna", "birthDate": "3rd of May"}, "is not a birth date"),
        ({"name": "Anna", "birthDate": "1990-02-30"}, "is not a birth date"),
        ({"name": "   ", "email": "anna@example.com"}, "needs a name"),
        ({"name": "Anna", "description": "x" * 4001}, "the limit is 4,000"),
    ],
)
async def test_bad_details_are_refused_and_nothing_is_written(
    memory: Memory, book: Contacts, fields: dict[str, str], message: str
) -> None:
    with pytest.raises(WriteRejected, match=message):
        await book.create(memory.caller, fields)
    assert await people(memory) == []


async def test_a_birth_date_with_or_without_its_year(memory: Memory, book: Contacts) -> None:
    done = await book.create(memory.caller, {"name": "Ola", "birthDate": "--05-03"})
    assert done["contact"]["birthDate"] == "--05-03"
    done = await book.create(memory.caller, {"name": "Per", "birthDate": "1980-02-29"})
    assert done["contact"]["birthDate"] == "1980-02-29"


async def test_without_an_email_a_same_name_or_phone_is_refused_unless_allowed(
    memory: Memory, book: Contacts, caplog: pytest.LogCaptureFixture
) -> None:
    first = await book.create(memory.caller, {"name": "Jon Snow", "telephone": "+44 20 7946 0018"})
    with caplog.at_level(logging.ERROR), pytest.raises(WriteRejected) as refused:
        await book.create(memory.caller, {"name": "  jon   SNOW "})
    assert f"Jon Snow (id {first['id']}, telephone +44 20 7946 0018)" in str(refused.value)
    assert "allowDuplicate" in str(refused.value)
    assert "[contacts] reject reason=possible-duplicate" in caplog.text
    with pytest.raises(WriteRejected, match=first["id"]):
        await book.create(memory.caller, {"name": "J. Snow", "telephone": "(44) 20-7946-0018"})
    # Adding the email to someone known by name alone is an update, not a second person.
    with pytest.raises(WriteRejected, match=first["id"]):
        await book.create(memory.caller, {"name": "Jon Snow", "email": "jon@wall.example"})
    assert len(await people(memory)) == 1
    twin = await book.create(memory.caller, {"name": "Jon Snow"}, allow_duplicate=True)
    assert twin["created"] and twin["id"] != first["id"]
    # A person of the same name with another email is another person by definition.
    await book.create(memory.caller, {"name": "Ada", "email": "ada@one.example"})
    other = await book.create(memory.caller, {"name": "Ada", "email": "ada@two.example"})
    assert other["created"]


async def test_update_sets_clears_and_refuses_what_cannot_be(
    memory: Memory, book: Contacts
) -> None:
    anna = await book.create(
        memory.caller, {"name": "Anna", "email": "anna@example.com", "description": "Cellist"}
    )
    bo = await book.create(memory.caller, {"name": "Bo", "email": "bo@example.com"})
    done = await book.update(
        memory.caller,
        anna["id"],
        {"telephone": "+46 8 123 456", "description": "", "jobTitle": "x"},
    )
    assert done["created"] is False
    contact = done["contact"]
    assert contact["telephone"] == "+46 8 123 456" and contact["jobTitle"] == "x"
    assert "description" not in contact
    # A new email moves the key: the old one is free, the new one is taken.
    moved = await book.update(memory.caller, anna["id"], {"email": " Anna@New.Example "})
    assert moved["contact"]["email"] == "anna@new.example"
    (stored,) = await people(memory, id=anna["id"])
    assert stored["emailKey"] == "anna@new.example"
    fresh = await book.create(memory.caller, {"name": "Someone", "email": "anna@example.com"})
    assert fresh["created"]
    with pytest.raises(WriteRejected, match=f"Another contact \\(id {bo['id']}\\)"):
        await book.update(memory.caller, anna["id"], {"email": "BO@example.com"})
    with pytest.raises(WriteRejected, match="cannot be cleared"):
        await book.update(memory.caller, anna["id"], {"name": ""})
    with pytest.raises(WriteRejected, match="Nothing to update"):
        await book.update(memory.caller, anna["id"], {"name": None})
    # Clearing the email releases its key.
    await book.update(memory.caller, bo["id"], {"email": ""})
    (bo_stored,) = await people(memory, id=bo["id"])
    assert "email" not in bo_stored and "emailKey" not in bo_stored


async def test_unknown_foreign_and_deleted_ids_get_one_answer(
    memory: Memory, book: Contacts, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = Caller(account_id=memory.caller.account_id + "-other")
    theirs = await book.create(stranger, {"name": "Their friend", "email": "f@example.com"})
    mine = await book.create(memory.caller, {"name": "Gone", "email": "gone@example.com"})
    await soft_delete(memory.graph, memory.caller, "Person", mine["id"])
    note = await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "not a person"}))
    messages = []
    with caplog.at_level(logging.ERROR):
        for node_id in ("no-such-id", theirs["id"], mine["id"], note["id"]):
            with pytest.raises(WriteRejected) as refused:
                await book.update(memory.caller, node_id, {"description": "changed"})
            messages.append(str(refused.value).replace(node_id, "ID"))
    assert set(messages) == {
        "No contact with id ID in this account. Find it with contact-lookup or contact-list."
    }
    for reason in ("not-found", "invalid-account-id", "deleted"):
        assert f"[contacts] reject reason={reason}" in caplog.text
    (their_node,) = (await book.listing(stranger))["items"]
    assert "description" not in their_node


async def test_lookup_by_email_phone_or_name(memory: Memory, book: Contacts) -> None:
    anna = await book.create(
        memory.caller,
        {"name": "Anna Berg", "email": "anna@example.com", "telephone": "+46 70-123 45 67"},
    )
    annika = await book.create(memory.caller, {"name": "Annika Bergström"})
    await book.create(memory.caller, {"name": "Carl Holm", "email": "carl@example.com"})

    async def ids(**query: Any) -> list[str]:
        return [c["id"] for c in (await book.lookup(memory.caller, **query))["contacts"]]

    assert await ids(email=" ANNA@example.com") == [anna["id"]]
    assert await ids(telephone="+46 (70) 1234567") == [anna["id"]]
    assert await ids(name="berg") == [anna["id"], annika["id"]]
    assert await ids(name="anna berg") == [anna["id"]]
    assert await ids(name="BERG ANNA") == [anna["id"]]
    assert await ids(name="nobody") == []
    both = (await book.lookup(memory.caller, email="anna@example.com", name="Annika"))["contacts"]
    assert [(c["id"], c["matchedBy"]) for c in both] == [
        (anna["id"], ["email"]),
        (annika["id"], ["name"]),
    ]
    assert "emailKey" not in both[0] and "embedding" not in both[0]
    with pytest.raises(WriteRejected, match="Give an email, a telephone number or a name"):
        await book.lookup(memory.caller, name="  ")
    with pytest.raises(WriteRejected, match="is not an email address"):
        await book.lookup(memory.caller, email="anna")


async def test_list_pages_by_name(memory: Memory, book: Contacts) -> None:
    for name in ("delta", "Alpha", "charlie", "Bravo", "echo"):
        await book.create(memory.caller, {"name": name})
    first = await book.listing(memory.caller, page=1, page_size=2)
    assert [c["name"] for c in first["items"]] == ["Alpha", "Bravo"]
    assert (first["total"], first["page"], first["pageSize"]) == (5, 1, 2)
    last = await book.listing(memory.caller, page=3, page_size=2)
    assert [c["name"] for c in last["items"]] == ["echo"]
    beyond = await book.listing(memory.caller, page=9, page_size=500)
    assert beyond["items"] == [] and beyond["pageSize"] == 100 and beyond["total"] == 5


async def test_a_contact_is_found_by_memory_search(memory: Memory, book: Contacts) -> None:
    done = await book.create(
        memory.caller,
        {
            "name": "Greta Lindqvist",
            "email": "greta@lindqvist.example",
            "description": "Our family's piano teacher; lessons on Thursdays.",
        },
    )
    await book.create(memory.caller, {"name": "Olof Svensson", "jobTitle": "Roofer"})
    await memory.graph.run("CALL db.awaitIndexes(60)")
    assert (await found(memory, "Lindqvist"))[0] == done["id"]  # keyword: the name
    assert done["id"] in await found(memory, "greta@lindqvist.example")
    assert (await found(memory, "who teaches the children music"))[0] == done["id"]
    result = await memory.searcher.search(memory.caller, SearchRequest("Greta"))
    assert "emailKey" not in result.results[0].props
    # Another account's search never finds it.
    assert await found(memory, "Lindqvist", Caller(account_id="someone-else")) == []


async def test_soft_deleted_contacts_vanish_and_their_email_waits_for_restore(
    memory: Memory, book: Contacts
) -> None:
    gone = await book.create(memory.caller, {"name": "Eve Gone", "email": "eve@example.com"})
    kept = await book.create(memory.caller, {"name": "Eve Kept"})
    await soft_delete(memory.graph, memory.caller, "Person", gone["id"])
    assert [c["id"] for c in (await book.listing(memory.caller))["items"]] == [kept["id"]]
    assert (await book.lookup(memory.caller, email="eve@example.com"))["contacts"] == []
    assert [c["id"] for c in (await book.lookup(memory.caller, name="eve"))["contacts"]] == [
        kept["id"]
    ]
    with pytest.raises(WriteRejected, match=f"memory-restore \\(label Person, id {gone['id']}\\)"):
        await book.create(memory.caller, {"name": "Eve", "email": "EVE@example.com"})
    await restore(memory.graph, memory.caller, "Person", gone["id"])
    again = await book.create(memory.caller, {"name": "Eve Back", "email": "eve@example.com"})
    assert again["id"] == gone["id"] and again["contact"]["name"] == "Eve Back"


async def test_a_person_written_by_memory_write_is_adopted_not_doubled(
    memory: Memory, book: Contacts
) -> None:
    written = await memory.writer.write(
        memory.caller,
        WriteRequest("Person", {"name": "Kim", "email": " Kim@Example.com", "emailKey": "forged"}),
    )
    (node,) = await people(memory)
    assert "emailKey" not in node  # memory-write cannot set the key
    assert [
        c["id"] for c in (await book.lookup(memory.caller, email="kim@example.com"))["contacts"]
    ] == [written["id"]]
    merged = await book.create(memory.caller, {"name": "Kim Lee", "email": "kim@example.com"})
    assert merged["id"] == written["id"] and not merged["created"]
    (node,) = await people(memory)
    assert node["emailKey"] == "kim@example.com" and node["name"] == "Kim Lee"
    # memory-write changing the email releases the key: the old address is free again.
    await memory.writer.write(
        memory.caller,
        WriteRequest("Person", {"email": "kim@elsewhere.example"}, id=written["id"]),
    )
    (node,) = await people(memory)
    assert "emailKey" not in node
    other = await book.create(memory.caller, {"name": "New Kim", "email": "kim@example.com"})
    assert other["created"] and other["id"] != written["id"]


async def refused(call: Awaitable[Any]) -> None:
    with pytest.raises(WriteRejected, match="The contact book is the owner's"):
        await call


async def test_the_book_is_the_owners_alone(memory: Memory, book: Contacts) -> None:
    await book.create(memory.caller, {"name": "Private Person", "email": "p@example.com"})
    for scopes, agent in ((("public",), "bob"), (("public", "shared"), None)):
        visitor = memory.other(scopes=scopes, agent=agent)
        await refused(book.create(visitor, {"name": "Mallory"}))
        await refused(book.lookup(visitor, name="Private"))
        await refused(book.listing(visitor))
        await refused(book.update(visitor, "any", {"name": "x"}))
        assert await found(memory, "Private Person", visitor) == []
    assert len(await people(memory)) == 1
