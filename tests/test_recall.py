"""Ranked recall through the database's full-text index, on SQLite, PostgreSQL and the file store:
what a query brings into the block, what it never does (raise, inject, drop corrections), and
the index kept in step with every write."""

from __future__ import annotations

import unicodedata
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_sql import Fact, MemoryConfig, MemoryDocument, MemoryService, Scope, text_search
from memory_sql.models import utcnow
from memory_sql.recall.context import Recall
from memory_sql.recall.ranking import RankingWeights, query_text, rank_facts
from memory_sql.storage import SQLStorage
from memory_sql.storage.search import rebuild_sqlite_index, scope_term
from memory_sql.text_search import query_terms, search_text
from memory_sql.tokens import make_token_counter

FILLER = [
    "Fact {i}: enjoys the number {i} and the colour blue",
    "Fact {i}: went to a meeting about budget {i}",
    "Fact {i}: owns item {i} of the collection",
]
NEEDLES = {
    "pnpm": Fact(content="Deploys with pnpm, never npm", category="preference", confidence=0.7),
    "coffee": Fact(content="我每天早上喝咖啡", category="preference", confidence=0.7),
    "street": Fact(
        content="Lives on the Straße do Sol in Porto", category="context", confidence=0.7
    ),
    "kana": Fact(content="コーヒーよりお茶が好き", category="preference", confidence=0.7),
}
HOSTILE = [
    "!!!",
    "   ",
    '" OR 1=1 --',
    "'; DROP TABLE memory_facts; --",
    "NEAR(a b) AND NOT c* ^d {e f}:g",
    "a & b | !c <-> d:* ''",
    "\\' \\\\ %s %(x)s :name",
    "\x00",
    "x" * 5000,
    "日本" * 600,
]


def _memory(facts: int) -> MemoryDocument:
    doc = MemoryDocument()
    for i in range(facts):
        text = FILLER[i % len(FILLER)].format(i=i)
        doc.facts.append(Fact(content=text, category="context", confidence=0.8 + (i % 20) / 100))
    doc.facts.extend(NEEDLES.values())
    doc.facts.append(
        Fact(
            content="Never suggest npm",
            category="correction",
            confidence=0.95,
            source_error="suggested npm",
        )
    )
    return doc


@pytest.fixture
def service(target, scope):
    with MemoryService(
        MemoryConfig(storage=target, injected_memory_max_tokens=150, max_facts=10_000),
        start=False,
    ) as made:
        made.storage.save(_memory(300), **scope)
        yield made


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("how should I deploy this?", "pnpm"),
        ("DEPLOYING with PNPM", "pnpm"),
        ("咖啡", "coffee"),
        ("我早上喝什么", "coffee"),
        ("strasse", "street"),
        ("Where does the user live? Porto?", "street"),
        ("お茶", "kana"),
    ],
)
def test_a_query_brings_its_fact_into_a_small_budget(service, scope, query, needle):
    content = NEEDLES[needle].content
    assert content not in service.memory_context(**scope)  # unranked: 300 others outrank it
    block = service.memory_context(**scope, query=query)
    assert content in block
    assert "Never suggest npm" in block  # the guaranteed category still goes first
    assert block.index("Never suggest npm") < block.index(content)


def test_a_conversation_is_a_query_of_its_last_user_turns(service, scope):
    messages = [
        {"role": "user", "content": "I like the colour blue"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "How do I deploy?"},
        {"role": "user", "content": "with pnpm maybe"},
    ]
    assert query_text(messages) == "How do I deploy?\nwith pnpm maybe"
    assert NEEDLES["pnpm"].content in service.memory_context(**scope, query=messages)


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_or_empty_queries_never_raise_and_fall_back_to_the_usual_order(
    service, scope, query
):
    plain = service.memory_context(**scope)
    block = service.memory_context(**scope, query=query)
    assert block.startswith("<system-reminder>") and "Never suggest npm" in block
    if not query_terms(query):
        assert block == plain
    assert service.status()["problems"] == 0
    assert len(service.storage.load(**scope).facts) == 305  # nothing stored changed


def test_terms_are_words_only_so_no_syntax_reaches_the_index():
    for text in HOSTILE + ["Straße ＰＹＴＨＯＮ 咖啡 deploying"]:
        for term in query_terms(text) + search_text(text).split():
            assert term.isalnum(), term
    assert search_text("Straße ＰＹＴＨＯＮ 咖啡 deploying") == "strass python 咖 啡 deploy"
    assert query_terms("what is the deploy?") == ["deploy"]
    assert query_terms("the and of") == ["the", "and", "of"]  # only function words: kept


# Letters of each path the tokenizer takes: ASCII, Latin with accents (composed and not),
# CJK, kana with a separate voicing mark, Hangul, Thai, Devanagari, Hebrew points, Greek,
# full-width forms, a ligature, a zero-width space and the letters that fold oddly.
_MIXED = (
    "aZ9 -_.,'", "Café", "e\u0301", "ø", "ß", "İı", "ﬁ", "Ｐｶ", "喜欢", "が", "\u3099",
    "\u302a", "한국", "กาแฟ", "हिन्दी", "\u0591", "ά", "\u200b", "\U00020000", "\ufe20", "\u1dc0",
    "\U00011000",
)  # fmt: skip


@given(st.lists(st.sampled_from(_MIXED), max_size=10), st.randoms())
@settings(max_examples=500, deadline=None)
def test_the_tokenizers_quick_paths_cut_as_the_general_one(pieces, rng):
    text = "".join(rng.sample(pieces, len(pieces)))
    folded = unicodedata.normalize("NFKC", text).casefold()
    assert text_search.fold(text) == text_search._without_diacritics(folded)
    assert text_search._terms(text) == text_search._clustered_terms(text_search.fold(text))


def test_near_duplicates_are_moved_behind_the_others():
    now = utcnow()
    facts = [
        Fact(content="Prefers dark mode in every editor", confidence=0.9, updated_at=now),
        Fact(content="Prefers dark mode in every editor app", confidence=0.9, updated_at=now),
        Fact(content="Uses a dark theme for the terminal", confidence=0.9, updated_at=now),
    ]
    matches = [(facts[0].id, 3.0), (facts[1].id, 2.9), (facts[2].id, 1.0)]
    assert rank_facts(facts, matches) == [facts[0].id, facts[2].id, facts[1].id]
    spread_off = RankingWeights(duplicate_overlap=1.0)
    assert rank_facts(facts, matches, spread_off) == [f.id for f in facts]


def test_the_score_blends_relevance_confidence_and_recency():
    now = utcnow()
    old = Fact(content="likes tea", confidence=0.7, updated_at=now - timedelta(days=720))
    new = Fact(content="likes green tea", confidence=0.7, updated_at=now)
    sure = Fact(content="likes black tea", confidence=1.0, updated_at=now - timedelta(days=720))
    matches = [(old.id, 1.0), (new.id, 1.0), (sure.id, 1.0)]  # equal text relevance
    assert rank_facts([old, new, sure], matches, now=now) == [new.id, sure.id, old.id]
    only_text = RankingWeights(confidence=0, recency=0)
    assert rank_facts([old, new], [(old.id, 2.0), (new.id, 1.0)], only_text) == [old.id, new.id]


def test_the_index_follows_every_change(storage, scope):
    """Insert, reword, move to another memory by forgetting, delete: the index answers as the
    table does, on every backend."""
    config = MemoryConfig(max_facts=10_000, recall_expansion_weight=0)
    recall = Recall(config.recall, storage, make_token_counter(False))
    try:
        ranked = recall.ranking
        checked = Scope.of(**scope)
        doc = storage.load(**scope)
        doc.facts = [Fact(content="Plays the cello"), Fact(content="Plays chess")]
        storage.save(doc, **scope)
        doc = storage.load(**scope)
        cello = next(f for f in doc.facts if "cello" in f.content)
        assert ranked(doc, checked, "cello") == [cello.id]
        doc.facts = [
            f.replace(content="Plays the viola") if f.id == cello.id else f for f in doc.facts
        ]
        storage.save(doc, **scope)
        doc = storage.load(**scope)
        assert ranked(doc, checked, "cello") == [] and ranked(doc, checked, "viola") == [cello.id]
        doc.facts = [f.replace(confidence=0.99) for f in doc.facts]  # no text change
        storage.save(doc, **scope)
        doc = storage.load(**scope)
        assert ranked(doc, checked, "viola") == [cello.id]
        doc.facts = [f for f in doc.facts if f.id != cello.id]
        storage.save(doc, **scope)
        doc = storage.load(**scope)
        assert ranked(doc, checked, "viola") == [] and len(ranked(doc, checked, "chess")) == 1
        other = Scope.of(user_id=scope["user_id"] + "-other", agent_name="coder")
        assert ranked(storage.load(**other.arguments()), other, "chess") == []
    finally:
        recall.close()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_rebuild_refills_the_index_after_a_vacuum(storage, scope):
    doc = storage.load(**scope)
    doc.facts = [Fact(content=f"owns bicycle number {i}") for i in range(51)]
    version = storage.save(doc, **scope)
    doc = storage.load(**scope)
    closed = doc.facts.pop()  # removed: its row is kept, closed
    storage.save(doc, expected_version=version, **scope)
    checked = Scope.of(**scope)
    with storage.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO memory_facts_fts (memory_facts_fts) VALUES ('delete-all')"
        )
    doc = storage.load(**scope)
    assert storage.match_facts(doc, checked, ["bicycl"]) == []
    assert rebuild_sqlite_index(storage.engine) >= 51
    found = storage.match_facts(doc, checked, ["bicycl"])
    assert len(found) == 50 and closed.id not in {fact_id for fact_id, _ in found}
    with storage.engine.connect() as conn:
        hex_key = conn.exec_driver_sql(
            "SELECT lower('s' || hex(tenant_id || char(31) || user_id || char(31) || agent_name))"
            " FROM memory_scopes WHERE user_id = ?",
            (scope["user_id"],),
        ).scalar_one()
    assert hex_key == scope_term(checked)


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_access_heat_is_written_in_the_background_not_on_the_turn(service, scope):
    checked = Scope.of(**scope)
    pnpm = NEEDLES["pnpm"].id
    before = service.storage.access_heat(checked)
    for _ in range(3):
        assert NEEDLES["pnpm"].content in service.memory_context(**scope, query="pnpm")
    assert service.storage.access_heat(checked) == before  # nothing written yet
    assert service.recall.heat.flush() >= 1
    count, last = service.storage.access_heat(checked)[pnpm]
    assert count == 3 and abs((utcnow() - last).total_seconds()) < 60
    doc = service.storage.load(**scope)
    assert doc.version == service.storage.load(**scope).version  # heat moves no version


def test_the_file_store_keeps_no_access_heat(tmp_path, scope):
    from memory_sql.storage import FileStorage

    storage = FileStorage(tmp_path / "files")
    storage.save(_memory(5), **scope)
    storage.record_access({(Scope.of(**scope), NEEDLES["pnpm"].id): (3, utcnow())})
    assert storage.access_heat(Scope.of(**scope)) == {}


def test_hybrid_eviction_keeps_hot_facts_and_the_reserved_corrections(target, scope):
    config = MemoryConfig(
        storage=target, max_facts=10, eviction_policy="hybrid", eviction_guaranteed_share=0.2
    )
    from memory_sql.update.eviction import evict

    now = utcnow()
    doc = MemoryDocument()
    for i in range(12):
        doc.facts.append(Fact(content=f"plain fact {i}", confidence=0.8, updated_at=now))
    low = [
        Fact(content=f"correction {i}", category="correction", confidence=0.1, updated_at=now)
        for i in range(3)
    ]
    doc.facts.extend(low)
    hot = doc.facts[0]
    heat = {hot.id: (50, now)}
    evicted = evict(doc, config, now=now, heat=heat)
    assert len(evicted) == 5 and len(doc.facts) == 10
    kept = {f.id for f in doc.facts}
    assert hot.id in kept
    assert sum(f.id in kept for f in low) == 2  # 20 % of 10 reserved; the third competes
    plain = MemoryConfig(storage=target, max_facts=10)
    again = MemoryDocument(
        facts=[*(f.replace() for f in low), *(Fact(content=f"x {i}") for i in range(10))]
    )
    assert not set(evict(again, plain, now=now)) & {f.id for f in low}  # confidence policy


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_ten_thousand_facts_are_stored_and_ranked(target):
    user = f"u-{uuid.uuid4().hex[:8]}"
    with MemoryService(
        MemoryConfig(storage=target, max_facts=10_000, injected_memory_max_tokens=300), start=False
    ) as service:
        doc = MemoryDocument(
            facts=[Fact(content=f"note {i} about topic{i % 97} and thing{i}") for i in range(9_999)]
        )
        doc.facts.append(Fact(content="Allergic to peanuts", category="context", confidence=0.7))
        service.storage.save(doc, user_id=user)
        block = service.memory_context(user_id=user, query="any food allergies? peanuts?")
        assert "Allergic to peanuts" in block
        assert "topic13 " in service.memory_context(user_id=user, query="topic13")
        if isinstance(service.storage, SQLStorage):
            with service.storage.engine.connect() as conn:
                count = conn.execute(
                    sa.text("SELECT count(*) FROM memory_facts WHERE user_id = :u"), {"u": user}
                ).scalar_one()
            assert count == 10_000


def test_the_context_command_takes_a_query(sqlite_url, scope):
    from typer.testing import CliRunner

    from memory_sql.cli import app

    with MemoryService(MemoryConfig(storage=sqlite_url, max_facts=10_000), start=False) as made:
        made.storage.save(_memory(300), **scope)
    runner = CliRunner(env={"MEMORY_SQL_INJECTED_MEMORY_MAX_TOKENS": "150"})
    base = ["context", "--user", scope["user_id"], "--agent", "coder", "--url", sqlite_url]
    plain = runner.invoke(app, base)
    asked = runner.invoke(app, [*base, "--query", "how do I deploy with pnpm?"])
    assert plain.exit_code == asked.exit_code == 0, (plain.output, asked.output)
    assert "pnpm, never npm" not in plain.output and "pnpm, never npm" in asked.output


def test_a_second_lookup_follows_the_best_matchs_own_terms(target, scope):
    """ "Has the notification service had incidents?" shares no word with "Zephyr went down";
    the best match names Zephyr, and the second lookup by its terms finds the outage."""
    doc = MemoryDocument(
        facts=[
            Fact(content="Zephyr is the notification service of the company", confidence=0.8),
            Fact(content="Zephyr went down on 3 May because of an expired certificate"),
            *(Fact(content=f"Attended standup number {n}", confidence=0.99) for n in range(80)),
        ]
    )
    for weight, expected in ((0.05, True), (0.0, False)):
        config = MemoryConfig(
            storage=target, recall_expansion_weight=weight, injected_memory_max_tokens=100
        )
        with MemoryService(config, start=False) as service:
            if weight:
                service.storage.save(doc, **scope)
            block = service.memory_context(
                **scope, query="Has the notification service had incidents?"
            )
            assert "Zephyr is the notification service" in block
            assert ("Zephyr went down" in block) is expected


# The lexical rule (issue #31): accents fold, one matching rule for the context and search, a
# rare term outweighs a common one, scripts without spaces between words.
LEXICAL = [
    Fact(content="Meets friends at Café Luzeiro on Sundays", confidence=0.6),
    Fact(content="The cafe near the office opens at seven", confidence=0.6),
    Fact(content="Zorblax zorblax meeting bot notes", confidence=0.5),
    Fact(content="Meeting meeting zorblax desk plans", confidence=0.9),
    Fact(content="ชอบกาแฟเย็นตอนเช้า", confidence=0.6),  # likes iced coffee in the morning
    Fact(content="हिन्दी सीख रहा है", confidence=0.6),  # is learning Hindi
    Fact(content="Codes in Python at work", confidence=0.6),
    *(
        Fact(content=f"Weekly meeting number {n} about the budget", confidence=0.99)
        for n in range(40)
    ),
]
CAFE_FACTS = {"Meets friends at Café Luzeiro on Sundays", "The cafe near the office opens at seven"}


@pytest.fixture
def lexical(target, scope):
    config = MemoryConfig(storage=target, max_facts=10_000, recall_expansion_weight=0)
    with MemoryService(config, start=False) as service:
        service.storage.save(MemoryDocument(facts=list(LEXICAL)), **scope)
        yield service


def _in_context(service: MemoryService, scope: dict[str, str], query: str) -> list[str]:
    doc = service.storage.load(**scope)
    by_id = {fact.id: fact.content for fact in doc.facts}
    return [by_id[i] for i in service.recall.ranking(doc, Scope.of(**scope), query)]


def _searched(service: MemoryService, scope: dict[str, str], query: str) -> list[str]:
    from memory_sql.ops import search_facts

    found = search_facts(service.storage.engine, query, user_id=scope["user_id"], limit=None)
    return [record.fact.content for record in found]


@pytest.mark.parametrize("query", ["cafe", "café", "CAFÉ", "Cafés", "cafe\u0301"])
def test_accents_fold_both_ways_in_the_context(lexical, scope, query):
    assert set(_in_context(lexical, scope, query)) == CAFE_FACTS


@pytest.mark.parametrize("query", ["cafe", "café", "CAFÉS"])
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_accents_fold_both_ways_in_search(lexical, scope, query):
    assert set(_searched(lexical, scope, query)) == CAFE_FACTS


@pytest.mark.parametrize(
    "query", ["cafe", "café", "pyth", "python", "zorblax", "meeting", "กาแฟ", "हिन्दी", "luz"]
)
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_the_context_and_search_match_the_same_facts(lexical, scope, query):
    """One rule: a query term matches the words it starts, after the same folding. Search
    wants every term, the context any, so a query of one term finds the same facts in both
    (a Thai word is several pairs of characters: search's facts are among the context's)."""
    searched, ranked = (
        set(_searched(lexical, scope, query)),
        set(_in_context(lexical, scope, query)),
    )
    assert searched and searched <= ranked
    if len(query_terms(query)) == 1:
        assert searched == ranked


def test_a_rare_term_outranks_a_common_one_in_the_context(lexical, scope):
    """ "meeting" is in 42 facts, "zorblax" in 2: the fact that says zorblax twice comes before
    the one that says meeting twice, though its confidence is lower."""
    ranked = _in_context(lexical, scope, "meeting zorblax")
    assert ranked[:2] == [
        "Zorblax zorblax meeting bot notes",
        "Meeting meeting zorblax desk plans",
    ]


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_rare_term_outranks_a_common_one_in_search(lexical, scope):
    """Both facts hold both terms, as often; without weighing the terms by their rarity
    (PostgreSQL's ``ts_rank`` alone) they tie and the higher confidence would go first."""
    assert _searched(lexical, scope, "meeting zorblax") == [
        "Zorblax zorblax meeting bot notes",
        "Meeting meeting zorblax desk plans",
    ]


def test_scripts_without_spaces_and_with_combining_marks_are_cut_into_terms():
    assert search_text("Café NAÏVE Ærøskøbing Łódź") == "caf naiv aeroskob lodz"
    assert query_terms("café") == query_terms("cafe") == ["caf"]
    assert search_text("กาแฟ") == "กา าแ แฟ"  # Thai: pairs of characters, marks kept
    assert search_text("ฉันกิน") == "ฉัน นกิ กิน"
    assert search_text("हिन्दी") == "हिन्दी"  # vowel signs and virama stay in the word
    assert search_text("が好き 한국어") == "が 好 き 한 국 어"  # kana keeps its voicing mark
    assert search_text("ёлка Ελλάδα") == "елка ελλαδα"
    assert search_text("كَتَبَ الدَّرْسَ") == search_text("كتب الدرس") == "كتب الدرس"  # harakat
    assert search_text("שָׁלוֹם") == search_text("שלום") == "שלום"  # niqqud
