"""The update pipeline on a 200-fact memory, LLM time excluded, and the prompt it sends.

Run: .venv/bin/python benchmarks/bench_updater.py

One update = load the memory from SQLite, build the prompt, parse a canned LLM reply (one fact
removed, one added, one section rewritten), apply it and save. Each step is timed next to a
plain ``json.dumps`` of the same memory in DeerFlow's shape, measured in the same run; the
ratios are the figures to watch. Then the prompt's size in tokens (``make_token_counter()``),
with the memory rendered as this prompt does and, for comparison, as indented JSON with every
string HTML-escaped (DeerFlow's ``<current_memory>``). Last, the staleness review's cost on a
1 000-fact memory (a third of it a year old): the prompt's tokens with the stale candidates
marked (and, separately, consolidation offered) against the same prompt without, and the time
:func:`memory_sql.update.review.offer` takes. Then the prompt of memories of 200 to 10 000
facts, whole against as the updater sends it (:mod:`memory_sql.update.prompt_facts`).
"""

from __future__ import annotations

import html
import json
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import fmt, median_seconds

from memory_sql import migrations
from memory_sql.config import MemoryConfig
from memory_sql.database import create_engine
from memory_sql.intake.filter import filter_messages_for_memory
from memory_sql.models import (
    Fact,
    MemoryDocument,
    utcnow,
)
from memory_sql.scope import Scope
from memory_sql.storage import open_storage
from memory_sql.tokens import make_token_counter
from memory_sql.update import review
from memory_sql.update.parser import parse_update
from memory_sql.update.prompt import build_update_prompt, format_memory
from memory_sql.update.prompt_facts import facts_for_prompt
from memory_sql.update.updater import PROMPT_MATCHES, apply_update

WORDS = [
    "prefers",
    "concise",
    "answers",
    "python",
    "postgres",
    "deploys",
    "kubernetes",
    "weekly",
    "reviews",
    "team",
    "lead",
    "billing",
    "service",
    "migration",
    "tests",
    "pytest",
    "asyncio",
    "喜欢",
    "简洁",
    "回答",
    "数据库",
    "部署",
    "测试",
]
CATEGORIES = ["preference", "knowledge", "context", "behavior", "goal", "correction"]
CONVERSATION = [
    {
        "role": "user",
        "content": "Can you refactor the billing module? I prefer small pure functions.",
    },
    {"role": "assistant", "content": "Here is a refactor into parse, price and render. " * 8},
    {"role": "user", "content": "不对，我们用 pnpm，不是 npm。以后都用 pnpm。"},
    {"role": "assistant", "content": "明白了，我会改用 pnpm。" * 5},
    {"role": "user", "content": "Perfect, that's exactly what I wanted."},
    {"role": "assistant", "content": "Great. Anything else for the billing service?"},
]
SCOPE = {"user_id": "bench-updater"}


def memory(rng: random.Random, facts: int) -> MemoryDocument:
    doc = MemoryDocument(
        facts=[
            Fact(
                content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))) + f" #{i}",
                category=rng.choice(CATEGORIES),
                confidence=round(rng.uniform(0.7, 1.0), 2),
                source_thread_id=f"thread-{rng.randint(1, 50)}",
            )
            for i in range(facts)
        ]
    )
    doc.user.work_context.summary = "Backend engineer; data pipelines in Python. " * 4
    doc.user.top_of_mind.summary = "Migrating a memory service to PostgreSQL. " * 3
    doc.history.recent_months.summary = "Shipped v2 of the ingestion service. " * 5
    return doc


_LABELS = {"scope": "user", "durability": "durable", "authority": "descriptive"}


def reply_for(doc: MemoryDocument, n: int) -> str:
    return json.dumps(
        {
            "user": {
                "topOfMind": {
                    "summary": f"Refactoring billing, round {n}.",
                    "shouldUpdate": True,
                    **_LABELS,
                }
            },
            "history": {},
            "newFacts": [
                {
                    "content": f"Deploys with pnpm, variant {n}",
                    "category": "correction",
                    "confidence": 0.95,
                    "sourceError": "suggested npm",
                    **_LABELS,
                }
            ],
            "factsToRemove": [doc.facts[0].id],
        }
    )


def deerflow_memory_json(doc: MemoryDocument) -> str:
    def escape(value: Any) -> Any:
        if isinstance(value, str):
            return html.escape(value, quote=False)
        if isinstance(value, dict):
            return {k: escape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [escape(v) for v in value]
        return value

    return json.dumps(escape(doc.to_deerflow()), indent=2, ensure_ascii=False)


def main() -> None:
    rng = random.Random(7)
    config = MemoryConfig(max_facts=200)
    conversation = filter_messages_for_memory(CONVERSATION)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        engine = create_engine(url)
        migrations.upgrade(engine)
        engine.dispose()
        store = open_storage(url)
        store.save(memory(rng, 200), **SCOPE)
        doc = store.load(**SCOPE)
        counter = iter(range(10**9))

        def yardstick() -> None:
            json.dumps(doc.to_deerflow())

        def prompt() -> None:
            build_update_prompt(doc, conversation, correction=True, reinforcement=False)

        text = reply_for(doc, 0)

        def parse() -> None:
            parse_update(text)

        update = parse_update(text)

        def apply() -> None:
            apply_update(doc, update, thread_id="t", config=config, now=utcnow())

        def pipeline() -> None:
            n = next(counter)
            current = store.load(**SCOPE)
            build_update_prompt(current, conversation, correction=True, reinforcement=False)
            parsed = parse_update(reply_for(current, n))
            new, _ = apply_update(current, parsed, thread_id="t", config=config, now=utcnow())
            store.save(new, **SCOPE, expected_version=current.version)

        base = median_seconds(yardstick, number=50)
        rows = [
            ("json.dumps(memory.to_deerflow())  [yardstick]", base),
            ("build_update_prompt", median_seconds(prompt, number=50)),
            ("parse_update", median_seconds(parse, number=200)),
            ("apply_update", median_seconds(apply, number=50)),
            ("load + prompt + parse + apply + save", median_seconds(pipeline, repeat=5, number=20)),
        ]
        final = store.load(**SCOPE)
        store.close()
    assert len(final.facts) == 200, len(final.facts)

    print("Update pipeline on a 200-fact memory, SQLite, LLM excluded (median per update)")
    for name, seconds in rows:
        print(f"  {name:<48} {fmt(seconds)}   {seconds / base:6.1f}x yardstick")

    tokens = make_token_counter()
    messages = build_update_prompt(final, conversation, correction=True, reinforcement=False)
    system, user = (m["content"] for m in messages)
    ours = format_memory(final)
    theirs = deerflow_memory_json(final)
    print(f"\nPrompt tokens per update ({tokens.name}), 200-fact memory, 6-turn conversation")
    print(f"  system message                                   {tokens.count(system):8d}")
    print(f"  user message                                     {tokens.count(user):8d}")
    print(f"    of which the memory (line format)              {tokens.count(ours):8d}")
    total = tokens.count(system) + tokens.count(user)
    print(f"  total                                            {total:8d}")
    print(
        f"  memory as indented escaped JSON (DeerFlow-like)  {tokens.count(theirs):8d}"
        f"   {tokens.count(theirs) / tokens.count(ours):.2f}x the line format"
    )

    review_cost(rng, conversation, tokens)
    large_memory_prompt(rng, conversation, tokens)


def large_memory_prompt(rng: random.Random, conversation: Any, tokens: Any) -> None:
    """The update prompt of a large memory: listed whole against what the updater lists within
    ``update_memory_max_tokens`` (the conversation's matches through SQLite's index, the
    newest), and the time that choice takes."""
    budget = MemoryConfig().update.memory_max_tokens
    print(
        f"\nUpdate prompt of a large memory, tokens ({tokens.name}); listed within"
        f" update_memory_max_tokens {budget}"
    )
    print(
        f"  {'facts':>6} {'whole memory':>13} {'as sent':>9} {'ratio':>7} {'listed':>8}"
        "  choice: first, again (line counts kept)"
    )
    for size in (200, 1000, 10_000):
        whole, sent, listed, seconds = _prompt_of(memory(rng, size), conversation, tokens, budget)
        print(
            f"  {size:>6,} {whole:>13,} {sent:>9,} {sent / whole:>6.2f}x {listed:>8,}"
            f"  {fmt(seconds[0]).strip()}, {fmt(seconds[1]).strip()}"
        )


def _prompt_of(doc: MemoryDocument, conversation: Any, tokens: Any, budget: int) -> tuple:
    """Prompt tokens whole and as sent, the facts listed, the seconds the choice takes (the
    first time, and again with its lines' token counts kept)."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'large.db'}"
        migrations.upgrade(url)
        store = open_storage(url)
        store.save(doc, **SCOPE)
        doc = store.load(**SCOPE)
        scope = Scope.of(**SCOPE)

        def choose() -> Any:
            return facts_for_prompt(
                doc,
                conversation,
                budget,
                tokens,
                lambda terms: store.match_facts(doc, scope, terms, limit=PROMPT_MATCHES),
            )

        started = time.perf_counter()
        shown = choose()
        cold = time.perf_counter() - started  # no line's tokens counted before
        seconds = (cold, median_seconds(choose, number=10))
        store.close()

    def prompt_tokens(listed: Any) -> int:
        messages = build_update_prompt(
            doc, conversation, correction=False, reinforcement=False, shown=listed
        )
        return sum(tokens.count(m["content"]) for m in messages)

    listed = len(doc.facts) if shown is None else len(shown)
    return prompt_tokens(None), prompt_tokens(shown), listed, seconds


def review_cost(rng: random.Random, conversation: Any, tokens: Any) -> None:
    """The prompt tokens the staleness review adds on a 1 000-fact memory."""
    doc = memory(rng, 1000)
    now = utcnow()
    year_ago = now - timedelta(days=400)
    doc.facts = [
        f.replace(created_at=year_ago) if i % 3 == 0 else f for i, f in enumerate(doc.facts)
    ]
    stale = len(review.stale_facts(doc, MemoryConfig(), now))

    def prompt_tokens(config: MemoryConfig) -> tuple[int, int]:
        offer = review.offer(doc, config, now, tokens)
        messages = build_update_prompt(
            doc, conversation, correction=False, reinforcement=False, review=offer.text
        )
        return sum(tokens.count(m["content"]) for m in messages), len(offer.stale)

    without, _ = prompt_tokens(MemoryConfig(staleness_review_enabled=False))
    print(
        f"\nStaleness review, 1 000-fact memory ({stale} facts past their validity), prompt "
        f"tokens ({tokens.name})"
    )
    print(f"  without the review                               {without:8d}")
    for label, config in (
        ("review, default budget (20 candidates, 600 tokens)", MemoryConfig()),
        (
            "review, 100 candidates, 3 000 tokens",
            MemoryConfig(staleness_max_candidates=100, staleness_prompt_tokens=3000),
        ),
        ("review + consolidation offered", MemoryConfig(consolidation_enabled=True)),
    ):
        with_review, offered = prompt_tokens(config)
        extra = with_review - without
        print(
            f"  {label:<52} {with_review:8d}  +{extra} ({with_review / without:.3f}x), "
            f"{offered} offered"
        )
    seconds = median_seconds(lambda: review.offer(doc, MemoryConfig(), now, tokens), number=20)
    print(f"  review.offer (select and fit the candidates)     {fmt(seconds)}")


if __name__ == "__main__":
    main()
