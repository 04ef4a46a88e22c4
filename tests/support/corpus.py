"""A synthetic two-account memory graph for benchmarks: its words, nodes, edges and Neo4j.

``neo4j_server(home)`` starts a private Neo4j with the card's memory (image/build.py's heap and
page cache); ``Corpus`` generates node rows of 19 labels (the real-model embedding of one of ~2,000
pool texts plus small Gaussian noise, re-normalised: embedding 100k texts would take ~10
minutes) split between two accounts 80/20, with scoped, soft-deleted and agent-tagged nodes;
``load`` writes them and ~2 edges per node with batched UNWIND CREATE; :func:`fill_account`
loads them with the schema and hands the big account's nodes to a real account (an engine only
serves its own). ``QUERY_TEMPLATES`` and :func:`distinct` make queries of the same words. Used by
tests/bench/bench_search.py, tests/bench/bench_load.py and tests/bench/bench_memory.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from appliance.core.config import load_settings
from appliance.graphdb.instance import Neo4jInstance, running
from appliance.memory.embedder import Embedder, Vector
from appliance.memory.graph import Graph
from appliance.memory.schema import apply_schema
from tests.support.processes import base_environ

POOL_SIZE = 2_000
NOISE_SIGMA = 0.015  # per dimension: cosine to the pool text stays ~0.96
BATCH = 5_000
BIG_SHARE = 0.8  # two accounts: the first 80 %, the second 20 %
ACCOUNTS = ("bench-big", "bench-small")
DOC_LABELS = {"KnowledgeDocument", "DigitalDocument", "CreativeWork", "Report", "Section"}
TEXT_LABELS = {"Chunk", "Message"}
Rule = tuple[str, str, str]  # (source label, relationship type, target label)

W: dict[str, list[str]] = {
    k: v.split(",")
    for k, v in {
        "first": "Alice,Ben,Chloe,David,Emma,Farid,Grace,Hugo,Ines,Jonas,"
        "Kasia,Liam,Maya,Noah,Priya",
        "last": "Moreno,Fischer,Okafor,Nguyen,Kowalski,Haddad,Rossi,Tanaka,Dubois,Silva,Novak,Ali",
        "trade": "plumber,electrician,dentist,piano teacher,accountant,"
        "gardener,vet,roofer,mechanic",
        "biz": "bakery,garage,dental clinic,hardware store,pharmacy,"
        "florist,bike shop,cafe,pet shop",
        "adj": "Green,Corner,Old Town,Sunrise,Riverside,Harbour,Maple,Golden,Northside,Oak",
        "town": "Lyon,Ghent,Porto,Utrecht,Leeds,Graz,Malmo,Bologna,Cork,Bern,Aarhus,Nantes",
        "street": "Station Road,Mill Lane,Church Street,Park Avenue,High Street,Canal Walk",
        "service": "boiler repair,teeth cleaning,haircut,tyre change,"
        "tax return,lawn mowing,eye test,"
        "piano lesson,dog grooming,window cleaning,bike service,massage",
        "thing": "the boiler,the car,the roof,the fence,the dishwasher,the passport,the insurance,"
        "the school trip form,the bathroom tap,the wifi router,the bike",
        "verb": "fix,renew,book,call about,pay for,clean,replace,check,order,cancel,schedule",
        "day": "Monday,Tuesday,Wednesday,Thursday,Friday,Saturday,Sunday,next week,the weekend",
        "topic": "home insurance,kids school,vegetable garden,heating,holiday in Portugal,taxes,"
        "car maintenance,family health,birthday party,kitchen renovation,savings,recipes",
        "event": "parents evening,dentist appointment,birthday dinner,football match,concert,"
        "book club,team meeting,yoga class,wedding,flu shot",
        "hobby": "plays chess,runs on Sundays,keeps bees,sings in a choir,collects vinyl,climbs",
        "feel": "Great,Friendly,Slow but careful,Excellent,Disappointing,Reliable,Quick,Pricey",
        "price": "25,40,55,60,75,90,120,150,35,80",
        "pref": "oat milk,early appointments,vegetarian food,window seats,quiet cafes,train travel",
    }.items()
}
# label -> (weight, name template, body template); bodies come from the embedded pool.
LABELS: dict[str, tuple[int, str, str]] = {
    "Person": (7, "{first} {last}", "{trade} from {town} who {hobby}"),
    "LocalBusiness": (4, "{adj} {biz}", "{biz} on {street} in {town}, good for {service}"),
    "Service": (3, "{service}", "{service} offered by the {biz} near {street}, about {price} eur"),
    "PriceSpecification": (2, "{service} price", "{service} costs {price} euros per visit"),
    "Review": (3, "Review of {adj} {biz}", "{feel} {service} at the {biz}, would go again"),
    "Question": (3, "How much is {service}?", "asked whether the {trade} can do {service}"),
    "DefinedTerm": (2, "{topic}", "what {topic} means for us, a note about {thing}"),
    "Task": (6, "{verb} {thing}", "{verb} {thing} before {day}, ask the {trade}"),
    "CreativeWork": (2, "{feel} notes on {topic}", "a short piece about {topic} and {thing}"),
    "DigitalDocument": (3, "{topic} letter", "scanned letter about {topic} and {thing}"),
    "KnowledgeDocument": (3, "Guide to {topic}", "everything we know about {topic} in {town}"),
    "Section": (6, "{topic}: {service}", "section on {service} for {topic}, see the {biz}"),
    "Chunk": (20, "", "We talked about {topic}; the {trade} will {verb} {thing} on {day}."),
    "Conversation": (4, "Chat about {topic}", "conversation about {topic} and the {event}"),
    "Message": (16, "", "Can you {verb} {thing} before the {event} on {day}?"),
    "Event": (5, "{event} in {town}", "{event} on {day} at the {adj} {biz}"),
    "Workflow": (2, "{day} routine", "every {day}: {verb} {thing}, then {service}"),
    "Preference": (2, "Prefers {pref}", "likes {pref} and {service} on {day}"),
    "Report": (2, "Weekly {topic} report", "{topic} this week: {verb} {thing}, {event} done"),
}
QUERY_TEMPLATES = (
    "who is our {trade} in {town}|how much did the {service} cost|when is the {event}|"
    "{verb} {thing}|notes about {topic}|the {biz} on {street}|reviews of the {biz}|"
    "what did we say about {topic}|{event} on {day}|does {first} like {pref}"
).split("|")
# "Source>REL>Target": one edge per rule and node (~2 per node), within the node's account.
RULES: list[Rule] = [
    (r[0], r[1], r[2])
    for r in (
        rule.split(">")
        for rule in (
            "Person>WORKS_AT>LocalBusiness Person>KNOWS>Person LocalBusiness>OFFERS>Service "
            "LocalBusiness>NEAR>LocalBusiness "
            "Service>HAS_PRICE>PriceSpecification Service>BY>Person "
            "PriceSpecification>PART_OF>Service Review>ABOUT>LocalBusiness Review>ABOUT>Service "
            "Question>ABOUT>DefinedTerm Question>ASKED_IN>Conversation "
            "DefinedTerm>IN>KnowledgeDocument "
            "Task>ASSIGNED_TO>Person Task>RELATES_TO>Event CreativeWork>AUTHORED_BY>Person "
            "DigitalDocument>MENTIONS>Person DigitalDocument>MENTIONS>LocalBusiness "
            "KnowledgeDocument>MENTIONS>Person "
            "Section>PART_OF>KnowledgeDocument Chunk>PART_OF>Section "
            "Chunk>MENTIONS>Person Conversation>WITH>Person Message>PART_OF>Conversation "
            "Message>MENTIONS>Person Event>AT>LocalBusiness Event>ATTENDED_BY>Person "
            "Workflow>TRIGGERS>Task Preference>ABOUT>Service Report>SUMMARISES>Conversation "
            "Report>MENTIONS>Task"
        ).split()
    )
]


def fill(template: str, rng: random.Random) -> str:
    """Fill ``{slot}`` placeholders with random words, the same word for a repeated slot."""

    chosen: dict[str, str] = {}
    text = re.sub(r"\{(\w+)\}", lambda m: chosen.setdefault(m[1], rng.choice(W[m[1]])), template)
    return text[0].upper() + text[1:]


def distinct(template: str, count: int, rng: random.Random, seen: set[str]) -> list[str]:
    """Up to ``count`` fills of ``template`` not in ``seen`` (bounded attempts)."""
    out: list[str] = []
    for _ in range(count * 50):
        if len(out) < count and (text := fill(template, rng)) not in seen:
            seen.add(text)
            out.append(text)
    return out


def embed_cached(embedder: Embedder, texts: list[str], cache_dir: Path) -> dict[str, Vector]:
    """Embed ``texts`` with the real model, reusing an earlier run's vectors from the cache."""
    key = hashlib.sha256("\n".join([embedder.model_name, *texts]).encode()).hexdigest()[:16]
    path = cache_dir / f"bench-search-{key}.npy"
    if path.is_file():
        matrix = np.load(path)
    else:
        matrix = np.stack(embedder.embed_many(texts))
        cache_dir.mkdir(parents=True, exist_ok=True)
        np.save(path, matrix)
    return dict(zip(texts, matrix, strict=True))


class Corpus:
    """The embedded text pool and the generator of node and edge rows."""

    def __init__(
        self,
        embedder: Embedder,
        rng: random.Random,
        cache_dir: Path,
        accounts: tuple[str, str] = ACCOUNTS,
    ) -> None:
        self.rng, self.np_rng, self.model = rng, np.random.default_rng(7), embedder.model_name
        self.accounts = accounts  # (the big account, the small one)
        seen: set[str] = set()
        self.pool = {lb: distinct(t[2], POOL_SIZE // 19 + 1, rng, seen) for lb, t in LABELS.items()}
        texts = [t for lb in LABELS for t in self.pool[lb]]
        self.vectors = embed_cached(embedder, texts, cache_dir)
        self.ids: dict[tuple[str, str], list[str]] = defaultdict(list)  # (account, label) -> ids
        self.count = 0

    def nodes(self, n: int) -> dict[str, list[dict[str, Any]]]:
        """``n`` new node rows by label: text, noisy pool embedding, guard properties."""
        labels = list(LABELS)
        weights = [LABELS[lb][0] for lb in labels]
        rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
        noise = self.np_rng.normal(0.0, NOISE_SIGMA, size=(n, 384)).astype(np.float32)
        for i in range(n):
            label = self.rng.choices(labels, weights)[0]
            account = self.accounts[0 if self.rng.random() < BIG_SHARE else 1]
            body = self.rng.choice(self.pool[label])
            vec = self.vectors[body] + noise[i]
            row: dict[str, Any] = {
                "id": f"bench-{self.count}",
                "accountId": account,
                "contentHash": f"h{self.count}",
                "embedding": vec / np.linalg.norm(vec),  # a list only per batch: saves memory
                "embeddingModel": self.model,
                ("text" if label in TEXT_LABELS else "description"): body,
            }
            if LABELS[label][1]:
                row["title" if label in DOC_LABELS else "name"] = fill(LABELS[label][1], self.rng)
            roll = self.rng.random()  # 8 % admin, 7 % shared, 3 % deleted, 5 % agent-tagged
            if roll < 0.15:
                row["scope"] = "admin" if roll < 0.08 else "shared"
            if self.rng.random() < 0.03:
                row["deletedAt"] = "2026-01-01T00:00:00Z"
            if self.rng.random() < 0.05:
                row["agents"] = ["concierge"]
            rows[label].append(row)
            self.ids[(account, label)].append(row["id"])
            self.count += 1
        return rows

    def edges(self, rows: dict[str, list[dict[str, Any]]]) -> dict[Rule, list[list[str]]]:
        """One edge per rule (~2 per node) to a random node of the same account."""
        out: dict[Rule, list[list[str]]] = defaultdict(list)
        for label, rel, target in RULES:
            for row in rows.get(label, []):
                pool = self.ids[(row["accountId"], target)]
                if pool and (other := self.rng.choice(pool)) != row["id"]:
                    out[(label, rel, target)].append([row["id"], other])
        return out


async def load(graph: Graph, corpus: Corpus, n: int) -> float:
    """Add ``n`` nodes and their edges with batched UNWIND CREATE; wait for the indexes."""
    started = time.monotonic()
    rows = corpus.nodes(n)
    for label, batch in rows.items():
        for i in range(0, len(batch), BATCH):
            chunk = [{**r, "embedding": r["embedding"].tolist()} for r in batch[i : i + BATCH]]
            await graph.run(f"UNWIND $rows AS r CREATE (n:`{label}`) SET n = r", {"rows": chunk})
    for (src, rel, dst), pairs in corpus.edges(rows).items():
        cypher = (
            f"UNWIND $rows AS r MATCH (a:`{src}` {{id: r[0]}}) MATCH (b:`{dst}` {{id: r[1]}}) "
            f"CREATE (a)-[:{rel}]->(b)"
        )
        for i in range(0, len(pairs), BATCH):
            await graph.run(cypher, {"rows": pairs[i : i + BATCH]})
    await graph.run("CALL db.awaitIndexes(300)")
    return time.monotonic() - started


async def fill_account(
    embedder: Embedder, uri: str, password: str, cache_dir: Path, n: int, account: str
) -> float:
    """The schema and ``n`` nodes, the big account's given to ``account``; seconds taken."""
    graph = Graph(uri, "neo4j", password, timeout=120.0)
    try:
        await apply_schema(graph, embedder.dimension)
        seconds = await load(graph, Corpus(embedder, random.Random(42), cache_dir), n)
        while True:
            rows, _ = await graph.run(
                "MATCH (n) WHERE n.accountId = 'bench-big' WITH n LIMIT 5000 "
                "SET n.accountId = $account RETURN count(n) AS moved",
                {"account": account},
            )
            if not rows[0]["moved"]:
                return seconds
    finally:
        await graph.close()


@contextlib.contextmanager
def neo4j_server(home: Path) -> Iterator[tuple[str, str]]:
    """A private Neo4j started as tests/conftest.py does, with the card's memory: what a search
    measured here meets on the device."""
    from image.build import NEO4J_HEAP, NEO4J_PAGECACHE

    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(home), MAXY_NEO4J_HEAP=NEO4J_HEAP, MAXY_NEO4J_PAGECACHE=NEO4J_PAGECACHE
    )
    env["MAXY_NEO4J_URI"] = "bolt://127.0.0.1:0"  # it binds a free port
    settings = load_settings(env)
    instance = Neo4jInstance.from_settings(settings, env)
    with running(instance):
        yield instance.uri(), instance.password_file.read_text().strip()
