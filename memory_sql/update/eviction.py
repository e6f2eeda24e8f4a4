"""Which facts leave a memory that holds more than ``max_facts``.

Two policies (config ``eviction_policy``):

- ``confidence`` (the default, DeerFlow's first): the lowest confidence goes first, then the
  oldest; a fact of a guaranteed category goes only when no other is left to go.
- ``hybrid`` (DeerFlow's ``hybrid-v1``): each fact is worth

      eviction_confidence_weight · confidence
      + eviction_freshness_weight · 2 ** (−days since its last change / freshness half-life)
      + eviction_heat_weight · heat

  where heat is ``log(1 + times shown) / log(1 + most times any fact was shown)``, halved every
  30 days since it was last shown (:mod:`memory_sql.recall.heat` counts the showings). The
  least worth goes first, except that the best ``eviction_guaranteed_share`` of ``max_facts``
  facts of the guaranteed categories are kept whatever their worth.

With ranked recall the cap is what the memory holds, not what a prompt shows: a memory of
10 000 facts shows the ones its query needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime

from ..config import MemoryConfig
from ..models import Fact, MemoryDocument

HEAT_HALF_LIFE_DAYS = 30.0

Heat = Mapping[str, tuple[int, datetime | None]]
"""Fact id → (times shown, last shown)."""


def evict(
    doc: MemoryDocument, config: MemoryConfig, *, now: datetime, heat: Heat | None = None
) -> list[str]:
    """Remove from ``doc`` the facts beyond ``config.eviction.max_facts`` by the configured policy;
    returns their ids. ``heat`` (for ``hybrid``) defaults to none shown."""
    excess = len(doc.facts) - config.eviction.max_facts
    if excess <= 0:
        return []
    guaranteed = frozenset(config.recall.guaranteed_categories)
    if config.eviction.policy == "hybrid":
        order = _hybrid_order(doc.facts, config, guaranteed, now, heat or {})
    else:
        order = sorted(
            doc.facts, key=lambda f: (f.category in guaranteed, f.confidence, f.created_at, f.id)
        )
    evicted = [fact.id for fact in order[:excess]]
    gone = set(evicted)
    doc.facts = [fact for fact in doc.facts if fact.id not in gone]
    return evicted


def needs_heat(doc: MemoryDocument, config: MemoryConfig, incoming: int = 0) -> bool:
    """Whether eviction may run on ``doc`` (with ``incoming`` facts more) under a policy that
    reads the access heat."""
    return (
        config.eviction.policy == "hybrid" and len(doc.facts) + incoming > config.eviction.max_facts
    )


def _hybrid_order(
    facts: list[Fact],
    config: MemoryConfig,
    guaranteed: frozenset[str],
    now: datetime,
    heat: Heat,
) -> list[Fact]:
    """``facts``, the first to go first."""
    most = max((count for count, _ in heat.values()), default=0)
    scale = math.log1p(most) or 1.0
    freshness_life = config.eviction.freshness_half_life_days

    def worth(fact: Fact) -> float:
        changed = fact.updated_at or fact.created_at or now
        fresh = 2.0 ** (-_days(now, changed) / freshness_life)
        count, last = heat.get(fact.id, (0, None))
        hot = 0.0
        if count:
            hot = math.log1p(count) / scale
            if last is not None:
                hot *= 2.0 ** (-_days(now, last) / HEAT_HALF_LIFE_DAYS)
        return float(
            config.eviction.confidence_weight * fact.confidence
            + config.eviction.freshness_weight * fresh
            + config.eviction.heat_weight * hot
        )

    worths = {fact.id: worth(fact) for fact in facts}
    reserve = math.ceil(config.eviction.guaranteed_share * config.eviction.max_facts)
    protected = {
        fact.id
        for fact in sorted(
            (f for f in facts if f.category in guaranteed), key=lambda f: -worths[f.id]
        )[:reserve]
    }
    return sorted(facts, key=lambda f: (f.id in protected, worths[f.id], f.created_at, f.id))


def _days(now: datetime, then: datetime) -> float:
    return max((now - then).total_seconds(), 0.0) / 86_400
