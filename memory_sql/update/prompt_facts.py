"""Which facts of a memory the update prompt shows.

A memory whose fact lines fit ``update_memory_max_tokens`` is shown whole: every memory of the
default ``max_facts`` is. A larger one (recall ranks memories of up to 10 000 facts, a prompt of
some 400 000 tokens whole) shows what fits of, in this order:

1. the stale facts the review offers (their review lines name only ids);
2. the facts the user's words in the conversation find through the full-text index, best BM25
   first (those the user may repeat, confirm, contradict or correct), in half the budget;
3. the newest facts, by their last change;
4. more of the conversation's matches, in what is left.

The prompt says how many of the memory's facts it shows. The model can name only ids it was
shown; a new fact is still checked against every live fact by its casefold key, so a repeat of
a fact not shown is counted as a confirmation, never stored twice.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone

from ..intake.messages import Message
from ..models import Fact, MemoryDocument
from ..text_search import query_terms
from ..tokens import TokenCounter
from .prompt import fact_line

LINE_TOKENS = 4
"""Fewer tokens than any fact's line has (``- <id> | <category> | 0.80 | <content>``)."""

Matcher = Callable[[list[str]], Sequence[tuple[str, float]]]
"""Fact ids (with scores, best first) of the memory that hold any of the given terms."""


def facts_for_prompt(
    memory: MemoryDocument,
    conversation: Sequence[Message],
    budget: int,
    counter: TokenCounter,
    match: Matcher,
    *,
    first: Iterable[str] = (),
) -> tuple[Fact, ...] | None:
    """The facts of ``memory`` the update prompt shows, in the memory's order, within
    ``budget`` tokens of fact lines; None when all of them fit. ``first`` are ids shown before
    any other (the review's candidates); ``match`` is asked only when not all fit."""
    costs: dict[str, int] = {}

    def cost(fact: Fact) -> int:
        known = costs.get(fact.id)
        if known is None:
            known = costs[fact.id] = _line_cost(counter, fact_line(fact))
        return known

    used = 0
    for fact in memory.facts:
        used += cost(fact)
        if used > budget:
            break
    else:
        return None

    by_id = {fact.id: fact for fact in memory.facts}
    # a line is at least LINE_TOKENS tokens: the newest beyond these could not fit
    newest = [f.id for f in heapq.nlargest(budget // LINE_TOKENS + 1, memory.facts, key=_changed)]
    matched = [fact_id for fact_id, _ in match(_terms(conversation))] if conversation else []
    chosen: dict[str, None] = {}
    used = 0

    def take(ids: Iterable[str], limit: int) -> None:
        nonlocal used
        for fact_id in ids:
            fact = by_id.get(fact_id)
            if fact is None or fact_id in chosen:
                continue
            if used + cost(fact) > limit:
                return
            used += cost(fact)
            chosen[fact_id] = None

    take(first, budget)
    take(matched, max(used, budget // 2))
    take(newest, budget)
    take(matched, budget)
    return tuple(fact for fact in memory.facts if fact.id in chosen)


def _terms(conversation: Sequence[Message]) -> list[str]:
    """The search terms of the conversation's user turns, the newest turns' first (the terms
    are capped; the assistant's turns mostly echo and acknowledge)."""
    texts = [m.text for m in reversed(conversation) if m.role == "user"]
    return query_terms("\n".join(texts))


@functools.lru_cache(maxsize=50_000)
def _line_cost(counter: TokenCounter, line: str) -> int:
    """The tokens of one fact's line, kept across updates (a worker updates the same memories
    again and again, and most of their lines are unchanged)."""
    return counter.count(line + "\n")


_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def _changed(fact: Fact) -> tuple[datetime, datetime]:
    """Newest first by the last change, then by creation (facts saved together)."""
    created = fact.created_at or _NEVER
    return (fact.updated_at or created, created)
