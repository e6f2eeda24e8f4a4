"""Facts that age, inside the regular update: validity, the staleness review, confirmations and
consolidation, with no LLM call of their own.

Validity. A fact is expected to hold :func:`valid_days` days after its last confirmation (or,
never confirmed, after it became believed): the LLM's ``expectedValidDays`` for it, bounded
as DeerFlow bounds it (at most ``staleness_age_days`` × ``staleness_max_lifetime_multiplier``),
else its category's default (``staleness_category_days``), else ``staleness_age_days``.

The review. :func:`offer` picks the stale candidates of a memory: live facts past their
validity, never of ``staleness_protected_categories``, most overdue first, at most
``staleness_max_candidates`` and as many as fit ``staleness_prompt_tokens``; fewer than
``staleness_min_candidates`` are not offered at all. They are marked in the update's prompt
(:func:`review_block`). The reply may name them in ``staleFactsToRemove`` and
``staleFactsToExtend``; :func:`apply_review` refuses every id that was not offered (a
protected fact, one not stale, one the LLM made up), removes at most
``staleness_max_removals_per_cycle`` (the lowest confidence first; the rest are refused) and
extends the others: ``expected_valid_days`` becomes the days since the fact's last
confirmation plus ``extend_by_days``, at most ``staleness_max_extension_days``. Removed facts
are closed, not erased (see :class:`~memory_sql.MemoryDocument`).

Confirmations. A fact the reply lists in ``factsToReinforce`` (the user confirmed it), or
proposes again as a new fact in other words, gets ``confirmed_at = now`` and one more
``confirmation_count``; so does its validity, which counts from then.

Consolidation (``consolidation_enabled``). Categories with at least
``consolidation_min_facts`` live facts are offered for merging; ``factsToConsolidate`` lists
groups of 2 to ``consolidation_max_sources`` live facts of the memory and the fact that
replaces them, at most ``consolidation_max_groups_per_cycle`` groups, no fact in two groups,
none of a protected category. The merged fact keeps the highest confidence of its sources and
the earliest ``valid_from``, their confirmations and longest validity; the sources are closed
with ``superseded_by`` pointing at it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    WithJsonSchema,
    field_validator,
)

from ..config import MemoryConfig
from ..models import (
    MAX_VALID_DAYS,
    Fact,
    MemoryDocument,
    check_text,
    clean_category,
    fact_key,
)
from ..tokens import TokenCounter

MAX_EXTENSION_DAYS = MAX_VALID_DAYS


# The reply's fields -----------------------------------------------------------------------


FACT_CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal", "correction")
"""The categories the prompt names (the JSON Schema's enum); the parser takes any short label."""
MAX_FACT_CHARS = 400
"""The longest fact text a reply may propose (the JSON Schema's ``maxLength``)."""
MAX_REASON_CHARS = 300
"""A reason's text kept for the log (longer ones are cut, not refused)."""
MAX_SOURCES = 20
"""Facts one consolidation group may name in the reply (``consolidation_max_sources`` bounds
what is applied)."""

_Id = Annotated[StrictStr, Field(min_length=1, max_length=64)]
_Reason = Annotated[StrictStr | None, Field(max_length=MAX_REASON_CHARS)]


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    @field_validator("reason", mode="before", check_fields=False)
    @classmethod
    def _short_reason(cls, value: Any) -> Any:
        return value[:MAX_REASON_CHARS] if isinstance(value, str) else value


class StaleRemoval(_Item):
    """A stale fact the LLM would remove."""

    id: _Id
    reason: _Reason = None


class StaleExtension(_Item):
    """A stale fact the LLM says still holds, for ``extend_by_days`` more days."""

    id: _Id
    extend_by_days: int = Field(
        ge=1,
        le=MAX_EXTENSION_DAYS,
        validation_alias=AliasChoices("extend_by_days", "extendByDays"),
    )
    reason: _Reason = None

    @field_validator("extend_by_days", mode="before")
    @classmethod
    def _days(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return value  # refused: not a number
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                return value
        if not math.isfinite(value):
            return value
        return min(max(int(value), 1), MAX_EXTENSION_DAYS)


class ConsolidatedFact(_Item):
    """The fact that replaces a group of near-duplicates."""

    content: StrictStr = Field(min_length=1, max_length=MAX_FACT_CHARS)
    category: Annotated[
        StrictStr | None,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "enum": list(FACT_CATEGORIES)},
                    {"type": "null"},
                ]
            }
        ),
    ] = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        return check_text(value).strip()  # blank: refused by the parser (empty)

    @field_validator("category", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        return None if value is None else clean_category(value)


class Consolidation(_Item):
    """Facts of one memory to merge, and what they become."""

    source_ids: list[_Id] = Field(
        validation_alias=AliasChoices("sourceIds", "source_ids"), max_length=MAX_SOURCES
    )
    consolidated: ConsolidatedFact


def read_ids(value: Any) -> Any:
    """A list of fact ids given as strings or as ``{"id": …}`` objects (None: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        return value
    ids = []
    for item in value:
        if isinstance(item, dict):
            item = item.get("id", item.get("factId", item.get("fact_id")))
        if not isinstance(item, str):
            raise ValueError(f"a fact id must be a string, not {type(item).__name__}")
        ids.append(item.strip())
    return ids


def read_valid_days(value: Any) -> int | None:
    """The LLM's ``expectedValidDays``: a whole number of days (a number or a string holding
    one) from 1 up, else None (not given, or unusable: the category's default then applies)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        return None
    return min(int(value), MAX_VALID_DAYS)


# Validity and the offer -------------------------------------------------------------------


def max_valid_days(config: MemoryConfig) -> int:
    """The most ``expected_valid_days`` the LLM may give a new fact."""
    return min(config.staleness.age_days * config.staleness.max_lifetime_multiplier, MAX_VALID_DAYS)


def valid_days(fact: Fact, config: MemoryConfig) -> int:
    """How many days ``fact`` is expected to hold after its last confirmation (its start)."""
    if fact.expected_valid_days is not None:
        return fact.expected_valid_days
    return config.staleness.category_days.get(fact.category, config.staleness.age_days)


def overdue_days(fact: Fact, config: MemoryConfig, now: datetime) -> float:
    """Days past the fact's validity (negative: still valid)."""
    base = fact.confirmed_at or fact.since
    return (now - base).total_seconds() / 86400 - valid_days(fact, config)


@dataclass(frozen=True)
class Offer:
    """What one update's prompt offers for review: stale candidates (ids, most overdue first)
    and the categories open to consolidation."""

    stale: tuple[str, ...] = ()
    merge_categories: tuple[str, ...] = ()
    text: str = ""

    def __bool__(self) -> bool:
        return bool(self.stale or self.merge_categories)


def stale_facts(memory: MemoryDocument, config: MemoryConfig, now: datetime) -> list[Fact]:
    """The memory's facts past their validity that the review may offer, most overdue first."""
    if not config.staleness.review_enabled:
        return []
    protected = set(config.staleness.protected_categories)
    due = [
        (overdue, fact)
        for fact in memory.facts
        if fact.category not in protected and (overdue := overdue_days(fact, config, now)) > 0
    ]
    due.sort(key=lambda pair: (-pair[0], pair[1].id))
    return [fact for _, fact in due]


def offer(
    memory: MemoryDocument,
    config: MemoryConfig,
    now: datetime,
    counter: TokenCounter | None = None,
    *,
    review_only: bool = False,
) -> Offer:
    """The review offer of ``memory`` at ``now``, with its prompt text (:func:`review_block`)
    within ``staleness_prompt_tokens`` as ``counter`` counts them (None: no budget)."""
    stale = stale_facts(memory, config, now)
    if len(stale) < config.staleness.min_candidates:
        stale = []
    stale = stale[: config.staleness.max_candidates]
    categories: list[str] = []
    if config.consolidation.enabled:
        protected = set(config.staleness.protected_categories)
        counts: dict[str, int] = {}
        for fact in memory.facts:
            counts[fact.category] = counts.get(fact.category, 0) + 1
        categories = sorted(
            name
            for name, count in counts.items()
            if count >= config.consolidation.min_facts and name not in protected
        )
    if not stale and not categories:
        return Offer()
    lines = [_stale_line(fact, config, now) for fact in stale]
    kept = len(lines)
    if counter is not None:
        budget = config.staleness.prompt_tokens - counter.count(
            review_block([""] if lines else [], categories, review_only)
        )
        used = kept = 0
        for line in lines:
            used += counter.count(line + "\n")
            if used > budget:
                break
            kept += 1
    if stale and kept < config.staleness.min_candidates:
        kept = 0
    offered = tuple(fact.id for fact in stale[:kept])
    if not offered and not categories:
        return Offer()
    text = review_block(lines[:kept], categories, review_only)
    return Offer(stale=offered, merge_categories=tuple(categories), text=text)


def _stale_line(fact: Fact, config: MemoryConfig, now: datetime) -> str:
    base = fact.confirmed_at or fact.since
    age = max(0, (now - base).days)
    confirmed = "confirmed" if fact.confirmed_at else "since"
    return (
        f"- {fact.id} | {fact.category} | {fact.confidence:.2f} | {confirmed} "
        f"{base.date().isoformat()} ({age} days) | expected valid {valid_days(fact, config)} days"
    )


def review_block(lines: Sequence[str], categories: Sequence[str], review_only: bool) -> str:
    """The ``<review>`` part of the update prompt's user message."""
    parts = ["<review>"]
    if review_only:
        parts.append(
            "No new conversation: only review the memory as asked below (every shouldUpdate "
            "false and newFacts empty)."
        )
    if lines:
        parts.append(
            "Stale facts: these facts of the current memory are past their expected validity "
            "(id | category | confidence | since or last confirmed | expected validity):"
        )
        parts.extend(lines)
        parts.append(
            'List in "staleFactsToRemove" ({"id", "reason"}) those probably no longer true, '
            'in "staleFactsToExtend" ({"id", "extend_by_days", "reason"}) those that still '
            "hold, and leave out the ones you cannot judge. Only these ids may be named there."
        )
    if categories:
        parts.append(
            "Consolidation: the categories " + ", ".join(categories) + " hold many facts. "
            'You may merge facts of one category that say the same thing in "factsToConsolidate"'
            ': [{"sourceIds": ["id", "id"], "consolidated": {"content": "...", "category": '
            '"...", "confidence": 0.9}}]; merge only true near-duplicates.'
        )
    parts.append("</review>")
    return "\n".join(parts)


# Applying the reply -----------------------------------------------------------------------


@dataclass
class ReviewOutcome:
    """What :func:`apply_review` and :func:`confirm` changed in a document."""

    confirmed: list[str] = field(default_factory=list)
    stale_removed: list[str] = field(default_factory=list)
    stale_extended: list[str] = field(default_factory=list)
    stale_refused: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    consolidated: list[str] = field(default_factory=list)


def confirm(doc: MemoryDocument, ids: Sequence[str], now: datetime, outcome: ReviewOutcome) -> None:
    """Confirm the facts of ``doc`` with ``ids`` (others ignored), each once."""
    wanted = {i for i in ids if i not in outcome.confirmed}
    if not wanted:
        return
    for position, fact in enumerate(doc.facts):
        if fact.id in wanted:
            doc.facts[position] = fact.replace(
                confirmed_at=now, confirmation_count=fact.confirmation_count + 1
            )
            outcome.confirmed.append(fact.id)


def apply_review(
    doc: MemoryDocument,
    removals: Sequence[StaleRemoval],
    extensions: Sequence[StaleExtension],
    offered: Sequence[str],
    config: MemoryConfig,
    now: datetime,
    outcome: ReviewOutcome,
) -> None:
    """The staleness part of a reply applied to ``doc`` (see the module docstring)."""
    held = {fact.id: fact for fact in doc.facts}
    allowed = set(offered) & held.keys()
    named = list(dict.fromkeys(r.id for r in removals))
    valid = [i for i in named if i in allowed]
    outcome.stale_refused.extend(i for i in named if i not in allowed)
    valid.sort(key=lambda i: (held[i].confidence, i))
    cap = config.staleness.max_removals_per_cycle
    removed, over = valid[:cap], valid[cap:]
    outcome.stale_refused.extend(over)
    outcome.stale_removed.extend(removed)
    gone = set(removed)
    extended: dict[str, int] = {}
    for extension in extensions:
        if extension.id in gone or extension.id in extended or extension.id in over:
            continue
        if extension.id not in allowed:
            outcome.stale_refused.append(extension.id)
            continue
        fact = held[extension.id]
        since = (now - (fact.confirmed_at or fact.since)).days
        extended[fact.id] = max(
            1, min(since + extension.extend_by_days, config.staleness.max_extension_days)
        )
    facts = []
    for fact in doc.facts:
        if fact.id in gone:
            continue
        if fact.id in extended:
            fact = fact.replace(expected_valid_days=extended[fact.id])
            outcome.stale_extended.append(fact.id)
        facts.append(fact)
    doc.facts = facts


def consolidate(
    doc: MemoryDocument,
    groups: Sequence[Consolidation],
    offered: Sequence[str],
    config: MemoryConfig,
    now: datetime,
    outcome: ReviewOutcome,
) -> list[str]:
    """The merges of a reply applied to ``doc`` (see the module docstring); returns the
    ``(reason)`` of each group refused, for the log."""
    refused: list[str] = []
    if not groups or not config.consolidation.enabled:
        return [f"consolidation is off: {len(groups)} groups"] if groups else []
    open_categories = set(offered)
    protected = set(config.staleness.protected_categories)
    held = {fact.id: fact for fact in doc.facts}
    consumed: set[str] = set()
    merged_facts: list[Fact] = []
    for group in groups:
        if len(merged_facts) >= config.consolidation.max_groups_per_cycle:
            refused.append("over consolidation_max_groups_per_cycle")
            break
        ids = list(dict.fromkeys(group.source_ids))
        sources = [held[i] for i in ids if i in held and i not in consumed]
        if len(sources) != len(ids) or not 2 <= len(ids) <= config.consolidation.max_sources:
            refused.append(f"sources {ids} not 2 to {config.consolidation.max_sources} live facts")
            continue
        if any(f.category in protected or f.category not in open_categories for f in sources):
            refused.append(f"sources {ids} of a protected or unoffered category")
            continue
        key = fact_key(group.consolidated.content)
        clash = any(
            f.key == key for f in doc.facts if f.id not in ids and f.id not in consumed
        ) or any(f.key == key for f in merged_facts)
        if clash:
            refused.append(f"merged text of {ids} duplicates another fact")
            continue
        confirmed = [f.confirmed_at for f in sources if f.confirmed_at is not None]
        days = [f.expected_valid_days for f in sources if f.expected_valid_days is not None]
        errors = [f.source_error for f in sources if f.source_error]
        merged = Fact(
            content=group.consolidated.content,
            category=group.consolidated.category or sources[0].category,
            confidence=max(f.confidence for f in sources),
            source_thread_id="consolidation",
            source_error=" / ".join(dict.fromkeys(errors)) or None,
            created_at=now,
            updated_at=now,
            valid_from=min(f.since for f in sources),
            confirmed_at=max(confirmed) if confirmed else None,
            confirmation_count=sum(f.confirmation_count for f in sources),
            expected_valid_days=max(days) if days else None,
        )
        consumed.update(ids)
        merged_facts.append(merged)
        for i in ids:
            doc.superseded[i] = merged.id
        outcome.merged.append(merged.id)
        outcome.consolidated.extend(ids)
    if consumed:
        doc.facts = [f for f in doc.facts if f.id not in consumed] + merged_facts
    return refused
