"""Reading the reporting views (Alembic revision 0004) into one JSON-ready summary.

The views are plain SQL over the tables and can be queried directly (see docs/tables.md):

- ``memory_report_categories``: tenant_id, category, facts, avg_confidence, min_confidence,
  max_confidence;
- ``memory_report_confidence``: tenant_id, bucket (``'0.0-0.1'`` … ``'0.9-1.0'``, the last
  including 1.0; empty buckets have no row), facts;
- ``memory_report_activity``: tenant_id, day (UTC), added, updated, removed (fact events);
- ``memory_report_largest``: tenant_id, user_id, agent_name, facts, sections (non-empty),
  version, updated_at — one row per memory;
- ``memory_report_queue``: tenant_id, status (``pending``/``failed``), updates, oldest_due,
  max_attempts, leased (claimed by a worker right now);
- ``memory_report_llm_usage`` (revision 0007): tenant_id, day (UTC), model, calls,
  prompt_tokens, completion_tokens, failures (calls whose update did not end ``ok``),
  p50_latency_ms (the median, computed in the view's SQL the same way on both databases: the
  middle call by latency, or the mean of the two middle ones), and (revision 0012)
  held_over_budget: the tenant's updates held back that day by its daily LLM budget (each
  hold and re-check; shown on each of the day's model rows); since revision 0015 also
  stale_offered, stale_removed, stale_extended (the staleness review's counts) and
  facts_merged (facts consolidated into others);
- ``memory_report_llm_rejections`` (revision 0014): tenant_id, day (UTC), model, reason,
  calls (calls whose reply had parts refused for that reason), items (parts refused): what the
  memory LLM answered that was not stored, and why (:mod:`memory_sql.update.rejections`).
- ``memory_report_superseded`` (revision 0015): tenant_id, day (UTC), closed (facts closed
  that day and still kept: superseded, removed, evicted), superseded (of those, replaced by
  another fact). The fact views above count live facts only.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..database import database_errors
from ..models import format_timestamp
from ..schema import UTCDateTime
from ..scope import Scope

# The views, described for SQLAlchemy Core; deliberately not in schema.metadata, which Alembic
# compares with the tables.
_views = sa.MetaData()
categories_view = sa.Table(
    "memory_report_categories",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("category", sa.String),
    sa.Column("facts", sa.Integer),
    sa.Column("avg_confidence", sa.Float),
    sa.Column("min_confidence", sa.Float),
    sa.Column("max_confidence", sa.Float),
)
confidence_view = sa.Table(
    "memory_report_confidence",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("bucket", sa.String),
    sa.Column("facts", sa.Integer),
)
activity_view = sa.Table(
    "memory_report_activity",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("day", sa.Date),
    sa.Column("added", sa.Integer),
    sa.Column("updated", sa.Integer),
    sa.Column("removed", sa.Integer),
)
largest_view = sa.Table(
    "memory_report_largest",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("user_id", sa.String),
    sa.Column("agent_name", sa.String),
    sa.Column("facts", sa.Integer),
    sa.Column("sections", sa.Integer),
    sa.Column("version", sa.Integer),
    sa.Column("updated_at", UTCDateTime),
)
queue_view = sa.Table(
    "memory_report_queue",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("status", sa.String),
    sa.Column("updates", sa.Integer),
    sa.Column("oldest_due", UTCDateTime),
    sa.Column("max_attempts", sa.Integer),
    sa.Column("leased", sa.Integer),
)

llm_usage_view = sa.Table(
    "memory_report_llm_usage",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("day", sa.Date),
    sa.Column("model", sa.String),
    sa.Column("calls", sa.Integer),
    sa.Column("prompt_tokens", sa.Integer),
    sa.Column("completion_tokens", sa.Integer),
    sa.Column("failures", sa.Integer),
    sa.Column("p50_latency_ms", sa.Float),
    sa.Column("held_over_budget", sa.Integer),
    sa.Column("stale_offered", sa.Integer),
    sa.Column("stale_removed", sa.Integer),
    sa.Column("stale_extended", sa.Integer),
    sa.Column("facts_merged", sa.Integer),
)
superseded_view = sa.Table(
    "memory_report_superseded",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("day", sa.Date),
    sa.Column("closed", sa.Integer),
    sa.Column("superseded", sa.Integer),
)
_REVIEW_COUNTS = ("stale_offered", "stale_removed", "stale_extended", "facts_merged")

llm_rejections_view = sa.Table(
    "memory_report_llm_rejections",
    _views,
    sa.Column("tenant_id", sa.String),
    sa.Column("day", sa.Date),
    sa.Column("model", sa.String),
    sa.Column("reason", sa.String),
    sa.Column("calls", sa.Integer),
    sa.Column("items", sa.Integer),
)

BUCKETS = tuple(f"0.{i}-0.{i + 1}" for i in range(9)) + ("0.9-1.0",)


def _int(expression: Any) -> Any:
    # PostgreSQL's sum() of integers is numeric (a Decimal in Python): cast it back.
    return sa.cast(sa.func.coalesce(sa.func.sum(expression), 0), sa.Integer)


def build_report(
    engine: Engine,
    *,
    tenant_id: str | None = None,
    days: int = 14,
    largest: int = 10,
    today: date | None = None,
) -> dict[str, Any]:
    """Everything ``memory-sql report`` shows, from the views, for one tenant or (None) all.

    - ``categories``: per category, facts and confidence (average, min, max), most facts first;
    - ``confidence``: the ten buckets in order, each with its fact count (zero included);
    - ``activity``: the last ``days`` UTC days ending ``today``, oldest first, each with facts
      added, updated and removed (zero included);
    - ``largest``: the ``largest`` memories by facts;
    - ``queue``: per status, waiting updates, the oldest due time, most attempts, leased now;
    - ``llm_usage``: per UTC day of the last ``days`` and model, newest first, the memory
      LLM's calls, prompt and completion tokens, failures and median latency (ms); only days
      with calls. Across tenants (no ``tenant_id``) the median is the one of the tenant with
      the most calls that day, as medians do not add up;
    - ``llm_rejections``: per reason over the last ``days``, most parts first, the calls whose
      reply had parts refused for it and the parts refused;
    - ``superseded``: the last ``days`` UTC days, oldest first, each with the facts closed
      that day (still kept) and how many of them another fact superseded;
    - ``totals``: facts, memories, pending and failed updates, LLM calls and tokens, reply
      parts refused (over ``days``).

    Raises:
        InvalidScopeError: ``tenant_id`` is malformed.
        ValueError: ``days`` or ``largest`` below 1.
        StorageError: the database failed (for instance, the views are missing: upgrade it).
    """
    for name, value in (("days", days), ("largest", largest)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    tenant = Scope.of(tenant_id=tenant_id).tenant_id if tenant_id is not None else None
    today = today or datetime.now(timezone.utc).date()
    start = today - timedelta(days=days - 1)

    def where(view: sa.Table) -> Any:
        return view.c.tenant_id == tenant if tenant is not None else sa.true()

    c, b, a, g, q = categories_view, confidence_view, activity_view, largest_view, queue_view
    facts_sum = sa.func.sum(c.c.facts)
    categories = (
        sa.select(
            c.c.category,
            _int(c.c.facts).label("facts"),
            sa.cast(sa.func.sum(c.c.avg_confidence * c.c.facts), sa.Float).label("weighted"),
            sa.func.min(c.c.min_confidence).label("min_confidence"),
            sa.func.max(c.c.max_confidence).label("max_confidence"),
        )
        .where(where(c))
        .group_by(c.c.category)
        .order_by(facts_sum.desc(), c.c.category)
    )
    buckets = (
        sa.select(b.c.bucket, _int(b.c.facts).label("facts")).where(where(b)).group_by(b.c.bucket)
    )
    activity = (
        sa.select(
            a.c.day,
            _int(a.c.added).label("added"),
            _int(a.c.updated).label("updated"),
            _int(a.c.removed).label("removed"),
        )
        .where(where(a), a.c.day >= start, a.c.day <= today)
        .group_by(a.c.day)
    )
    top = (
        sa.select(g)
        .where(where(g))
        .order_by(g.c.facts.desc(), g.c.version.desc(), g.c.tenant_id, g.c.user_id)
        .limit(largest)
    )
    memories = sa.select(sa.func.count()).select_from(g).where(where(g))
    queue = (
        sa.select(
            q.c.status,
            _int(q.c.updates).label("updates"),
            sa.func.min(q.c.oldest_due).label("oldest_due"),
            sa.func.max(q.c.max_attempts).label("max_attempts"),
            _int(q.c.leased).label("leased"),
        )
        .where(where(q))
        .group_by(q.c.status)
        .order_by(q.c.status)
    )

    u = llm_usage_view
    usage = (
        sa.select(u)
        .where(where(u), u.c.day >= start, u.c.day <= today)
        .order_by(u.c.day.desc(), u.c.model, u.c.calls.desc(), u.c.tenant_id)
    )
    r = llm_rejections_view
    refused = (
        sa.select(r.c.reason, _int(r.c.calls).label("calls"), _int(r.c["items"]).label("items"))
        .where(where(r), r.c.day >= start, r.c.day <= today)
        .group_by(r.c.reason)
        .order_by(sa.func.sum(r.c["items"]).desc(), r.c.reason)
    )

    x = superseded_view
    superseded = (
        sa.select(x.c.day, _int(x.c.closed).label("closed"), _int(x.c.superseded).label("sup"))
        .where(where(x), x.c.day >= start, x.c.day <= today)
        .group_by(x.c.day)
    )

    with database_errors(engine, "report"), engine.connect() as conn:
        category_rows = conn.execute(categories).all()
        bucket_rows = dict(conn.execute(buckets).all())
        activity_rows = {row.day: row for row in conn.execute(activity)}
        largest_rows = conn.execute(top).all()
        memory_count = conn.execute(memories).scalar_one()
        queue_rows = conn.execute(queue).all()
        usage_rows = conn.execute(usage).all()
        superseded_rows = {_day(row.day): row for row in conn.execute(superseded)}
        refused_rows = conn.execute(refused).all()

    report_categories = [
        {
            "category": row.category,
            "facts": row.facts,
            "avg_confidence": row.weighted / row.facts if row.facts else None,
            "min_confidence": row.min_confidence,
            "max_confidence": row.max_confidence,
        }
        for row in category_rows
    ]
    report_activity = []
    for offset in range(days):
        day = start + timedelta(days=offset)
        row = activity_rows.get(day)
        report_activity.append(
            {
                "day": day.isoformat(),
                "added": row.added if row else 0,
                "updated": row.updated if row else 0,
                "removed": row.removed if row else 0,
            }
        )
    report_queue = {
        row.status: {
            "updates": row.updates,
            "oldest_due": format_timestamp(row.oldest_due) or None,
            "max_attempts": row.max_attempts,
            "leased": row.leased,
        }
        for row in queue_rows
    }
    report_usage = _usage(usage_rows)
    report_superseded = []
    for offset in range(days):
        day = start + timedelta(days=offset)
        closed = superseded_rows.get(day)
        report_superseded.append(
            {
                "day": day.isoformat(),
                "closed": closed.closed if closed else 0,
                "superseded": closed.sup if closed else 0,
            }
        )
    return {
        "tenant_id": tenant,
        "totals": {
            "facts": sum(row["facts"] for row in report_categories),
            "memories": memory_count,
            "pending_updates": report_queue.get("pending", {}).get("updates", 0),
            "failed_updates": report_queue.get("failed", {}).get("updates", 0),
            "llm_calls": sum(row["calls"] for row in report_usage),
            "prompt_tokens": sum(row["prompt_tokens"] for row in report_usage),
            "completion_tokens": sum(row["completion_tokens"] for row in report_usage),
            "rejected_items": sum(row.items for row in refused_rows),
            "held_over_budget": _held(usage_rows),
        },
        "categories": report_categories,
        "confidence": [{"bucket": name, "facts": bucket_rows.get(name, 0)} for name in BUCKETS],
        "activity": report_activity,
        "largest": [
            {
                "tenant_id": row.tenant_id,
                "user_id": row.user_id,
                "agent_name": row.agent_name or None,
                "facts": row.facts,
                "sections": row.sections,
                "version": row.version,
                "updated_at": format_timestamp(row.updated_at),
            }
            for row in largest_rows
        ],
        "queue": report_queue,
        "llm_usage": report_usage,
        "llm_rejections": [
            {"reason": row.reason, "calls": row.calls, "items": row.items} for row in refused_rows
        ],
        "superseded": report_superseded,
    }


def _day(value: Any) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def _held(rows: Any) -> int:
    """The updates held by the LLM budget: each tenant's day once (the view repeats it on the
    rows of each model called that day)."""
    days = {(row.tenant_id, str(row.day)): int(row.held_over_budget or 0) for row in rows}
    return sum(days.values())


def _usage(rows: Any) -> list[dict[str, Any]]:
    """The view's rows summed per (day, model); rows arrive busiest tenant first."""
    merged: dict[tuple[Any, str], dict[str, Any]] = {}
    for row in rows:
        day = row.day if isinstance(row.day, date) else date.fromisoformat(str(row.day))
        entry = merged.get((day, row.model))
        if entry is None:
            merged[(day, row.model)] = {
                "day": day.isoformat(),
                "model": row.model,
                "calls": int(row.calls),
                "prompt_tokens": int(row.prompt_tokens or 0),
                "completion_tokens": int(row.completion_tokens or 0),
                "failures": int(row.failures or 0),
                "p50_latency_ms": float(row.p50_latency_ms)
                if row.p50_latency_ms is not None
                else None,
                "held_over_budget": int(row.held_over_budget or 0),
                **{name: int(getattr(row, name) or 0) for name in _REVIEW_COUNTS},
            }
            continue
        entry["held_over_budget"] += int(row.held_over_budget or 0)
        for name in _REVIEW_COUNTS:
            entry[name] += int(getattr(row, name) or 0)
        entry["calls"] += int(row.calls)
        entry["prompt_tokens"] += int(row.prompt_tokens or 0)
        entry["completion_tokens"] += int(row.completion_tokens or 0)
        entry["failures"] += int(row.failures or 0)
    return list(merged.values())


VIEW_NAMES = tuple(sorted(_views.tables))
"""Every reporting view (what a read-only role needs SELECT on)."""

__all__ = ["BUCKETS", "VIEW_NAMES", "build_report"]
