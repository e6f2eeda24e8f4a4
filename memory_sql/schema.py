"""The SQL schema as SQLAlchemy Core tables. Alembic creates it (alembic/versions/); nothing else.

Every table carries ``tenant_id`` and ``user_id`` and every primary key, unique constraint and
foreign key includes them, so the tables can be distributed on ``(tenant_id, user_id)`` by a
sharded PostgreSQL and filtered by row-level security without a schema rewrite. ``agent_name`` is
the empty string for the memory of unnamed agents (a valid agent name is never empty).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Dialect,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on both databases (SQLite keeps no zone: stored as UTC).

    Told apart by what the driver hands over, not by the database's name: a database that
    keeps a zone (PostgreSQL) returns an aware ``datetime``; SQLite returns the naive UTC text
    its ``DATETIME`` wrote (the zone, already UTC, left out of the text by that type's own
    bind processing), parsed here in one C-level call."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        # A naive value is UTC, as it is read back: never the machine's local time.
        value = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value
        return value.astimezone(timezone.utc)

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        return _utc_of

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return _utc_of(value)


def _utc_of(value: str | datetime | None) -> datetime | None:
    """A stored timestamp as an aware UTC ``datetime``: SQLite's naive UTC text, or a driver's
    ``datetime`` (naive: UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value + "+00:00")
        except ValueError:  # written with an offset of its own, by another writer
            value = datetime.fromisoformat(value)
    if value.tzinfo is timezone.utc:
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _scope_columns() -> list[Column[Any]]:
    return [
        Column("tenant_id", String(64), primary_key=True),
        Column("user_id", String(128), primary_key=True),
        Column("agent_name", String(64), primary_key=True),
    ]


def _scope_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["tenant_id", "user_id", "agent_name"],
        ["memory_scopes.tenant_id", "memory_scopes.user_id", "memory_scopes.agent_name"],
        ondelete="CASCADE",
    )


memory_scopes = Table(
    "memory_scopes",
    metadata,
    *_scope_columns(),
    Column("version", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    CheckConstraint("version >= 1", name="version_positive"),
    comment="One row per memory; version counts its saves (optimistic concurrency).",
)

SECTION_NAMES = (
    "work_context",
    "personal_context",
    "top_of_mind",
    "recent_months",
    "earlier_context",
    "long_term_background",
)

memory_sections = Table(
    "memory_sections",
    metadata,
    *_scope_columns(),
    Column("section", String(32), primary_key=True),
    Column("summary", Text, nullable=False),
    Column("updated_at", UTCDateTime, nullable=True),
    _scope_fk(),
    CheckConstraint(
        "section IN (" + ", ".join(f"'{name}'" for name in SECTION_NAMES) + ")",
        name="section_name",
    ),
    comment="User-context and history summaries; a missing row is an empty section.",
)

memory_facts = Table(
    "memory_facts",
    metadata,
    *_scope_columns(),
    Column("fact_id", String(64), primary_key=True),
    Column("content", Text, nullable=False),
    Column(
        "content_key",
        String(64),
        nullable=False,
        comment="SHA-256 of the casefold key (memory_sql.fact_key) of content",
    ),
    Column("category", String(32), nullable=False),
    Column("confidence", Float, nullable=False),
    Column("source_thread_id", String(256), nullable=True),
    Column("source_error", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column(
        "search_text",
        Text,
        nullable=False,
        server_default="",
        comment="the searchable form of content (memory_sql.text_search.search_text)",
    ),
    Column(
        "access_count",
        Integer,
        nullable=False,
        server_default="0",
        comment="times shown in a ranked context (written in the background, lossy)",
    ),
    Column("last_accessed_at", UTCDateTime, nullable=True),
    Column(
        "expected_valid_days",
        Integer,
        nullable=True,
        comment="how long the fact is expected to hold from its last confirmation (the LLM's "
        "figure, else its category's default)",
    ),
    Column("confirmed_at", UTCDateTime, nullable=True, comment="last confirmed by the user"),
    Column("confirmation_count", Integer, nullable=False, server_default="0"),
    Column(
        "valid_from",
        UTCDateTime,
        nullable=True,
        comment="believed true from then; NULL: from created_at",
    ),
    Column(
        "valid_to",
        UTCDateTime,
        nullable=True,
        comment="closed (superseded, removed, evicted) then; NULL: live",
    ),
    Column(
        "superseded_by", String(64), nullable=True, comment="the fact that took its place, if any"
    ),
    _scope_fk(),
    CheckConstraint("confidence >= 0 AND confidence <= 1", name="confidence_range"),
    CheckConstraint("expected_valid_days > 0", name="expected_valid_days_positive"),
    Index("ix_memory_facts_tenant_category", "tenant_id", "category"),
    comment="Durable facts about a user; duplicates (casefold) are impossible per scope.",
)

LIVE = memory_facts.c.valid_to.is_(None)
"""The condition of a live fact (what the partial indexes below cover)."""

# Casefold duplicates are impossible among live facts (closed ones keep their key); the index
# also finds a scope's live facts for a load.
Index(
    "uq_memory_facts_live_content_key",
    memory_facts.c.tenant_id,
    memory_facts.c.user_id,
    memory_facts.c.agent_name,
    memory_facts.c.content_key,
    unique=True,
    sqlite_where=LIVE,
    postgresql_where=LIVE,
)
# Closed facts by when they were closed: the retention purge and the superseded report.
Index(
    "ix_memory_facts_tenant_valid_to",
    memory_facts.c.tenant_id,
    memory_facts.c.valid_to,
    sqlite_where=memory_facts.c.valid_to.is_not(None),
    postgresql_where=memory_facts.c.valid_to.is_not(None),
)

FACT_COLUMNS = (
    memory_facts.c.fact_id,
    memory_facts.c.content,
    memory_facts.c.category,
    memory_facts.c.confidence,
    memory_facts.c.source_thread_id,
    memory_facts.c.source_error,
    memory_facts.c.created_at,
    memory_facts.c.updated_at,
    memory_facts.c.expected_valid_days,
    memory_facts.c.confirmed_at,
    memory_facts.c.confirmation_count,
    memory_facts.c.valid_from,
)
"""The columns a live :class:`~memory_sql.Fact` is read from (a closed one adds ``valid_to``
and ``superseded_by``)."""

memory_pending_updates = Table(
    "memory_pending_updates",
    metadata,
    *_scope_columns(),
    Column("thread_id", String(256), primary_key=True),
    Column(
        "kind",
        String(8),
        primary_key=True,
        comment="'turn': debounced after a conversation; 'flush': before summarization",
    ),
    Column("messages", Text, nullable=False, comment="the filtered conversation, as JSON"),
    Column("correction", Boolean, nullable=False),
    Column("reinforcement", Boolean, nullable=False),
    Column("first_enqueued_at", UTCDateTime, nullable=False),
    Column("last_enqueued_at", UTCDateTime, nullable=False),
    Column("due_at", UTCDateTime, nullable=False),
    Column("generation", Integer, nullable=False, comment="+1 on every enqueue of this key"),
    Column("attempts", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("last_error", Text, nullable=True),
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", UTCDateTime, nullable=True),
    Column(
        "reply",
        Text,
        nullable=True,
        comment="the parsed LLM reply of a run that gave up on version conflicts, "
        "applied again by the next run instead of asking the LLM",
    ),
    CheckConstraint("kind IN ('turn', 'flush')", name="kind"),
    CheckConstraint("status IN ('pending', 'failed')", name="status"),
    Index("ix_memory_pending_updates_status_due_at", "status", "due_at"),
    Index("ix_memory_pending_updates_lease_until", "lease_until"),
    comment="Conversations waiting for a memory update: one row per key, durable across crashes.",
)

memory_fact_events = Table(
    "memory_fact_events",
    metadata,
    *_scope_columns(),
    Column("version", Integer, primary_key=True, comment="the memory version the save made"),
    Column("fact_id", String(64), primary_key=True),
    Column("event", String(8), nullable=False),
    Column("category", String(32), nullable=False),
    Column("confidence", Float, nullable=False),
    Column("occurred_at", UTCDateTime, nullable=False),
    Column("content_before", Text, nullable=True, comment="the text before (updated, removed)"),
    Column("content_after", Text, nullable=True, comment="the text after (added, updated)"),
    Column("superseded_by", String(64), nullable=True, comment="removed: what took its place"),
    CheckConstraint("event IN ('added', 'updated', 'removed')", name="event"),
    comment="Append-only log of fact changes, written by each save, for reporting over time.",
)

memory_fact_vectors = Table(
    "memory_fact_vectors",
    metadata,
    *_scope_columns(),
    Column("fact_id", String(64), primary_key=True),
    Column("model", String(128), primary_key=True),
    Column(
        "content_digest", String(64), nullable=False, comment="SHA-256 (hex) of the text embedded"
    ),
    Column("dimensions", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False, comment="little-endian float32, unit length"),
    Column("created_at", UTCDateTime, nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "user_id", "agent_name", "fact_id"],
        [
            "memory_facts.tenant_id",
            "memory_facts.user_id",
            "memory_facts.agent_name",
            "memory_facts.fact_id",
        ],
        ondelete="CASCADE",
    ),
    CheckConstraint("dimensions > 0", name="dimensions_positive"),
    comment="Per fact and embedding model, the fact's vector (semantic recall).",
)

LLM_CALL_OUTCOMES = (
    "ok",
    "llm_error",
    "invalid_reply",
    "save_failed",
    "conflicted",
    "length",
)
"""How a memory-LLM call ended: ``ok`` (saved, or nothing to change), the LLM call failing, its
reply unusable, the save failing, every save losing to another writer, or (``length``,
revision 0014) the reply cut at ``max_tokens`` before it held a usable update."""

memory_llm_calls = Table(
    "memory_llm_calls",
    metadata,
    *_scope_columns(),
    Column("call_id", String(32), primary_key=True, comment="a random id (uuid4 hex)"),
    Column("thread_id", String(256), nullable=False),
    Column("model", String(256), nullable=False, comment="as the endpoint answered, else asked"),
    Column("called_at", UTCDateTime, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column(
        "tokens_counted",
        Boolean,
        nullable=False,
        comment="true: counted by memory_sql (the endpoint reported no usage)",
    ),
    Column("latency_ms", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("error", Text, nullable=True),
    Column(
        "stale_offered",
        Integer,
        nullable=False,
        server_default="0",
        comment="stale facts the prompt offered for review",
    ),
    Column("stale_removed", Integer, nullable=False, server_default="0"),
    Column("stale_extended", Integer, nullable=False, server_default="0"),
    Column(
        "facts_merged",
        Integer,
        nullable=False,
        server_default="0",
        comment="source facts consolidated into merged ones",
    ),
    CheckConstraint(
        "outcome IN (" + ", ".join(f"'{name}'" for name in LLM_CALL_OUTCOMES) + ")",
        name="outcome",
    ),
    CheckConstraint(
        "prompt_tokens >= 0 AND completion_tokens >= 0 AND latency_ms >= 0", name="non_negative"
    ),
    Index("ix_memory_llm_calls_tenant_called_at", "tenant_id", "called_at"),
    comment="One row per memory-LLM call of an update (failed ones too), for cost reporting; "
    "no foreign key: usage outlives a deleted memory.",
)

memory_llm_rejections = Table(
    "memory_llm_rejections",
    metadata,
    *_scope_columns(),
    Column("call_id", String(32), primary_key=True, comment="the memory_llm_calls row"),
    Column("reason", String(32), primary_key=True, comment="memory_sql.update.rejections"),
    Column("items", Integer, nullable=False),
    CheckConstraint("items > 0", name="positive"),
    comment="Per memory-LLM call, the parts of its reply refused (facts, removals, sections), "
    "counted by reason; no foreign key, like the usage rows.",
)

memory_llm_budget_holds = Table(
    "memory_llm_budget_holds",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("day", Date, primary_key=True, comment="the UTC day"),
    Column("holds", Integer, nullable=False),
    Column("last_held_at", UTCDateTime, nullable=False),
    Column("last_reason", Text, nullable=False),
    CheckConstraint("holds > 0", name="positive"),
    comment="Per tenant and UTC day, the updates held back by the daily memory-LLM budget "
    "(each hold and re-check counted); they wait, they are not lost.",
)

memory_redactions = Table(
    "memory_redactions",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("day", Date, primary_key=True, comment="the UTC day"),
    Column("kind", String(40), primary_key=True, comment="memory_sql.intake.redact.KINDS"),
    Column(
        "stage",
        String(16),
        primary_key=True,
        comment="intake (a conversation queued), write (a memory saved), scrub (db scrub)",
    ),
    Column("redactions", Integer, nullable=False),
    CheckConstraint("redactions > 0", name="positive"),
    CheckConstraint("stage IN ('intake', 'write', 'scrub')", name="stage"),
    comment="Per tenant, UTC day, kind of secret and stage, how many secrets were replaced "
    "by placeholders (never the secrets themselves).",
)

memory_watermarks = Table(
    "memory_watermarks",
    metadata,
    *_scope_columns(),
    Column("thread_id", String(256), primary_key=True),
    Column(
        "message_key",
        String(64),
        nullable=False,
        comment="the last message learned from: id:<message id> or sha256:<role and text>",
    ),
    Column("position", Integer, nullable=False, comment="its index in the conversation"),
    Column("updated_at", UTCDateTime, nullable=False),
    comment="Per thread, the last message a successful memory update learned from; only "
    "later messages go to the memory LLM.",
)

API_KEY_ROLES = ("read", "write", "admin")
"""What an HTTP service key may do: ``read`` memories, also ``write`` them, or ``admin`` (also
forget users and manage the queue; an admin key of the operator tenant may act for any)."""

memory_api_keys = Table(
    "memory_api_keys",
    metadata,
    Column("key_id", String(32), primary_key=True, comment="the public part of the key"),
    Column("tenant_id", String(64), nullable=False, comment="the tenant every request acts for"),
    Column("role", String(8), nullable=False),
    Column(
        "secret_sha256",
        String(64),
        nullable=False,
        comment="hex SHA-256 of the secret part; the secret itself is never stored",
    ),
    Column("description", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("last_used_at", UTCDateTime, nullable=True, comment="to the minute"),
    Column("revoked_at", UTCDateTime, nullable=True),
    CheckConstraint(
        "role IN (" + ", ".join(f"'{name}'" for name in API_KEY_ROLES) + ")", name="role"
    ),
    Index("ix_memory_api_keys_tenant_id", "tenant_id"),
    comment="Keys of the HTTP service, each bound to one tenant; read before the tenant is "
    "known, so not under row-level security.",
)
