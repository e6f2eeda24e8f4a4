"""A memory too large for the update prompt: the prompt lists the facts the conversation's words
find and the newest within ``update_memory_max_tokens``, through a real LLM server, on every
backend; what the model was not shown is still deduplicated against."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

from llm_server import LABELS, llm_config, update_reply

from memory_sql.models import Fact, MemoryDocument
from memory_sql.tokens import make_token_counter
from memory_sql.update.updater import MemoryUpdater

START = datetime.now(timezone.utc) - timedelta(days=40)  # none past its validity (90 days)
TOPICS = ["gardening", "chess", "cycling", "baking", "astronomy", "sailing", "pottery", "jazz"]


def _large_memory(count: int, start: datetime = START) -> MemoryDocument:
    facts = [
        Fact(
            id=f"fact_{n:04d}",
            content=f"Keeps notes on {TOPICS[n % len(TOPICS)]} session number {n} of the year",
            category="context",
            confidence=0.8,
            created_at=start + timedelta(hours=n),
        )
        for n in range(count)
    ]
    facts.insert(
        count // 3,
        Fact(
            id="fact_lisbon",
            content="Lives in Lisbon near the river",
            category="context",
            confidence=0.9,
            created_at=start - timedelta(days=30),  # the oldest: only the index finds it
        ),
    )
    return MemoryDocument(facts=facts)


def _listed(prompt: str) -> list[str]:
    return re.findall(r"^- (fact_\w+) \|", prompt.split("<conversation>")[0], flags=re.M)


def test_a_large_memory_shows_what_the_conversation_touches_and_the_newest(storage, scope, llm):
    storage.save(_large_memory(600), **scope, expected_version=0)
    reply = update_reply(
        newFacts=[
            {"content": "Lives in Porto", "category": "context", "confidence": 0.95, **LABELS},
            # a fact the prompt did not list, said again: a confirmation, not a second copy
            {
                "content": "keeps notes on chess session number 9 of the year",
                "category": "context",
                "confidence": 0.9,
                **LABELS,
            },
        ],
        factsToRemove=["fact_lisbon"],
    )
    llm.reply(json.dumps(reply))
    config = llm_config(llm, max_facts=2000, update_memory_max_tokens=2000)
    updater = MemoryUpdater(config, storage)
    try:
        conversation = [
            {"role": "user", "content": "I moved from Lisbon to Porto last month."},
            {"role": "assistant", "content": "Noted, Porto it is."},
        ]
        result = updater.update_memory(conversation, thread_id="t-move", **scope)
    finally:
        updater.close()
    assert result.ok, result.error

    prompt = llm.requests[0]["messages"][1]["content"]
    listed = _listed(prompt)
    assert "fact_lisbon" in listed  # found by the index, though the oldest
    assert "fact_0599" in listed and "fact_0009" not in listed  # the newest, not the oldest
    assert 10 < len(listed) < 100
    assert f"Facts ({len(listed)} of the memory's 601:" in prompt
    memory = prompt.split("<current_memory>")[1].split("</current_memory>")[0]
    lines = "\n".join(line for line in memory.splitlines() if line.startswith("- fact_"))
    assert make_token_counter().count(lines) <= 2000

    doc = storage.load(**scope)
    contents = [fact.content for fact in doc.facts]
    assert "Lives in Porto" in contents and "Lives in Lisbon near the river" not in contents
    assert len(doc.facts) == 601  # one closed, one added, the repeat not stored
    repeated = next(f for f in doc.facts if f.id == "fact_0009")
    assert repeated.confirmation_count == 1


def test_a_memory_that_fits_is_listed_whole(storage, scope, llm):
    storage.save(_large_memory(30), **scope, expected_version=0)
    llm.reply(json.dumps(update_reply()))
    updater = MemoryUpdater(llm_config(llm, update_memory_max_tokens=2000), storage)
    try:
        conversation = [{"role": "user", "content": "I prefer Python for scripts."}]
        assert updater.update_memory(conversation, thread_id="t-1", **scope).ok
    finally:
        updater.close()
    prompt = llm.requests[0]["messages"][1]["content"]
    assert len(_listed(prompt)) == 31
    assert "Facts (id | category | confidence | content):" in prompt


def test_the_reviews_stale_candidates_are_listed_first(storage, scope, llm):
    storage.save(_large_memory(600, START - timedelta(days=400)), **scope, expected_version=0)
    llm.reply(json.dumps(update_reply()))
    config = llm_config(llm, max_facts=2000, update_memory_max_tokens=2000)
    updater = MemoryUpdater(config, storage)
    try:
        conversation = [{"role": "user", "content": "I moved from Lisbon to Porto."}]
        assert updater.update_memory(conversation, thread_id="t-1", **scope).ok
    finally:
        updater.close()
    prompt = llm.requests[0]["messages"][1]["content"]
    offered = re.findall(r"^- (fact_\w+) \| .* expected valid", prompt, flags=re.M)
    assert len(offered) >= 3
    assert set(offered) <= set(_listed(prompt)) and "fact_lisbon" in _listed(prompt)
