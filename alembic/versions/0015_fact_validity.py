"""Facts that age and are superseded: validity, confirmations, closed rows, texts in the log.

``memory_facts`` gains ``expected_valid_days``, ``confirmed_at``, ``confirmation_count``,
``valid_from`` (NULL: from ``created_at``), ``valid_to`` (NULL: the fact is live) and
``superseded_by``. A removed fact is closed (``valid_to`` set) rather than deleted, so the
casefold key is unique among live facts only: the unique constraint becomes the partial unique
index ``uq_memory_facts_live_content_key`` (``WHERE valid_to IS NULL``), which also serves a
load's live rows; the confidence index and PostgreSQL's GIN index become partial too (closed
rows cost neither the hot path nor recall's full-text matching), and closed rows get an index
by ``(tenant_id, valid_to)`` for the retention purge and the superseded report.

On SQLite the constraint lives in the table's definition, so the table is rebuilt (Alembic's
batch copy): the views are dropped first and made again after (revision 0004), and the FTS5
table is refilled with new triggers (revision 0011), whose ``scope_key`` term is
``'c' || …`` instead of ``'s' || …`` for a closed fact, so a memory's query term matches only
its live facts.

``memory_fact_events`` gains ``content_before``, ``content_after`` and ``superseded_by`` (the
text of each change); ``memory_llm_calls`` gains the staleness review's and consolidation's
counts, summed by ``memory_report_llm_usage``. The views that count facts count live ones, and
``memory_report_superseded`` counts closed facts per tenant and day.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_FACT_COLUMNS = (
    (
        "expected_valid_days",
        sa.Integer(),
        True,
        None,
        "how long the fact is expected to hold from its last confirmation (the LLM's figure, "
        "else its category's default)",
    ),
    ("confirmed_at", sa.DateTime(timezone=True), True, None, "last confirmed by the user"),
    ("confirmation_count", sa.Integer(), False, "0", None),
    (
        "valid_from",
        sa.DateTime(timezone=True),
        True,
        None,
        "believed true from then; NULL: from created_at",
    ),
    (
        "valid_to",
        sa.DateTime(timezone=True),
        True,
        None,
        "closed (superseded, removed, evicted) then; NULL: live",
    ),
    ("superseded_by", sa.String(64), True, None, "the fact that took its place, if any"),
)
_EVENT_COLUMNS = (
    ("content_before", sa.Text(), "the text before (updated, removed)"),
    ("content_after", sa.Text(), "the text after (added, updated)"),
    ("superseded_by", sa.String(64), "removed: what took its place"),
)
_CALL_COLUMNS = ("stale_offered", "stale_removed", "stale_extended", "facts_merged")
_CALL_COMMENTS = {
    "stale_offered": "stale facts the prompt offered for review",
    "facts_merged": "source facts consolidated into merged ones",
}
_SCOPE = ("tenant_id", "user_id", "agent_name")
_LIVE = "valid_to IS NULL"

# The FTS5 triggers of revision 0011, the scope term now telling live ('s') from closed ('c').
_KEY = (
    "CASE WHEN {row}.valid_to IS NULL THEN 's' ELSE 'c' END || "
    "hex({row}.tenant_id || char(31) || {row}.user_id || char(31) || {row}.agent_name)"
)
_OLD_KEY = (
    "'s' || hex({row}.tenant_id || char(31) || {row}.user_id || char(31) || {row}.agent_name)"
)


def _fts_objects(key: str, closes: bool) -> tuple[str, ...]:
    insert = (
        "INSERT INTO memory_facts_fts (rowid, search_text, scope_key) "
        "VALUES (new.rowid, new.search_text, " + key.format(row="new") + ");"
    )
    delete = (
        "INSERT INTO memory_facts_fts (memory_facts_fts, rowid, search_text, scope_key) "
        "VALUES ('delete', old.rowid, old.search_text, " + key.format(row="old") + ");"
    )
    columns = "search_text, tenant_id, user_id, agent_name" + (", valid_to" if closes else "")
    changed = (
        "old.search_text IS NOT new.search_text OR old.tenant_id IS NOT new.tenant_id "
        "OR old.user_id IS NOT new.user_id OR old.agent_name IS NOT new.agent_name"
    )
    if closes:
        changed += " OR (old.valid_to IS NULL) IS NOT (new.valid_to IS NULL)"
    return (
        "INSERT INTO memory_facts_fts (memory_facts_fts) VALUES ('delete-all')",
        f"CREATE TRIGGER memory_facts_fts_insert AFTER INSERT ON memory_facts BEGIN {insert} END",
        f"CREATE TRIGGER memory_facts_fts_delete AFTER DELETE ON memory_facts BEGIN {delete} END",
        f"CREATE TRIGGER memory_facts_fts_update AFTER UPDATE OF {columns} ON memory_facts "
        f"WHEN {changed} BEGIN {delete} {insert} END",
        "INSERT INTO memory_facts_fts (rowid, search_text, scope_key) "
        "SELECT rowid, search_text, " + key.format(row="memory_facts") + " FROM memory_facts",
    )


def _day(dialect: str, column: str) -> str:
    if dialect == "postgresql":
        return f"CAST({column} AT TIME ZONE 'UTC' AS DATE)"
    return f"date({column})"


def _usage_view(dialect: str, counts: bool) -> str:
    """The usage view (revision 0007's) with this revision's counts when ``counts``, and with
    revision 0012's ``held_over_budget`` when its table is there, in whichever order the two
    revisions ran."""
    body = _plain_usage_view(dialect, counts)
    if not sa.inspect(op.get_bind()).has_table("memory_llm_budget_holds"):
        return body
    extra = "".join(f", usage.{name}" for name in _CALL_COLUMNS) if counts else ""
    return f"""
        SELECT usage.tenant_id, usage.day, usage.model, usage.calls, usage.prompt_tokens,
               usage.completion_tokens, usage.failures, usage.p50_latency_ms,
               coalesce(holds.holds, 0) AS held_over_budget{extra}
        FROM ({body.strip()}) AS usage
        LEFT JOIN memory_llm_budget_holds AS holds
               ON holds.tenant_id = usage.tenant_id AND holds.day = usage.day
    """


def _plain_usage_view(dialect: str, counts: bool) -> str:
    day = _day(dialect, "called_at")
    extra = "".join(f", sum({name}) AS {name}" for name in _CALL_COLUMNS) if counts else ""
    inner = "".join(f", {name}" for name in _CALL_COLUMNS) if counts else ""
    return f"""
        SELECT tenant_id, day, model,
               count(*) AS calls,
               sum(prompt_tokens) AS prompt_tokens,
               sum(completion_tokens) AS completion_tokens,
               sum(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 END) AS failures,
               CAST(avg(CASE WHEN rank_in_day IN ((n + 1) / 2, (n + 2) / 2)
                             THEN latency_ms END) AS FLOAT) AS p50_latency_ms{extra}
        FROM (SELECT tenant_id, {day} AS day, model, prompt_tokens, completion_tokens,
                     outcome, latency_ms{inner},
                     row_number() OVER (PARTITION BY tenant_id, {day}, model
                                        ORDER BY latency_ms, call_id) AS rank_in_day,
                     count(*) OVER (PARTITION BY tenant_id, {day}, model) AS n
              FROM memory_llm_calls) AS ranked
        GROUP BY tenant_id, day, model
    """


_BUCKET = (
    "CASE"
    + "".join(f" WHEN confidence < 0.{i + 1} THEN '0.{i}-0.{i + 1}'" for i in range(9))
    + " ELSE '0.9-1.0' END"
)


def _fact_views(dialect: str, live: bool) -> dict[str, str]:
    """The views of revisions 0004 and 0007 that read ``memory_facts`` (only live facts when
    ``live``), the usage view, and (``live``) the superseded report."""
    where = f" WHERE {_LIVE}" if live else ""
    also = f" AND f.{_LIVE}" if live else ""
    views = {
        "memory_report_categories": f"""
            SELECT tenant_id, category,
                   count(*) AS facts,
                   avg(confidence) AS avg_confidence,
                   min(confidence) AS min_confidence,
                   max(confidence) AS max_confidence
            FROM memory_facts{where}
            GROUP BY tenant_id, category
        """,
        "memory_report_confidence": f"""
            SELECT tenant_id, bucket, count(*) AS facts
            FROM (SELECT tenant_id, {_BUCKET} AS bucket FROM memory_facts{where}) AS bucketed
            GROUP BY tenant_id, bucket
        """,
        "memory_report_largest": f"""
            SELECT s.tenant_id, s.user_id, s.agent_name,
                   (SELECT count(*) FROM memory_facts f
                    WHERE f.tenant_id = s.tenant_id AND f.user_id = s.user_id
                      AND f.agent_name = s.agent_name{also}) AS facts,
                   (SELECT count(*) FROM memory_sections m
                    WHERE m.tenant_id = s.tenant_id AND m.user_id = s.user_id
                      AND m.agent_name = s.agent_name AND m.summary <> '') AS sections,
                   s.version, s.updated_at
            FROM memory_scopes s
        """,
        "memory_report_llm_usage": _usage_view(dialect, live),
    }
    if live:
        views["memory_report_superseded"] = f"""
            SELECT tenant_id, {_day(dialect, "valid_to")} AS day,
                   count(*) AS closed,
                   sum(CASE WHEN superseded_by IS NOT NULL THEN 1 ELSE 0 END) AS superseded
            FROM memory_facts
            WHERE valid_to IS NOT NULL
            GROUP BY tenant_id, {_day(dialect, "valid_to")}
        """
    return views


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    saved = _drop_views(dialect)
    for name, type_, nullable, default, comment in _FACT_COLUMNS:
        column = sa.Column(name, type_, nullable=nullable, server_default=default, comment=comment)
        op.add_column("memory_facts", column)
    check = ("ck_memory_facts_expected_valid_days_positive", "expected_valid_days > 0")
    if dialect == "postgresql":
        op.drop_constraint("uq_memory_facts_content_key", "memory_facts", type_="unique")
        op.drop_index("ix_memory_facts_scope_confidence", "memory_facts")
        op.create_check_constraint(check[0], "memory_facts", check[1])
        op.execute("DROP INDEX IF EXISTS ix_memory_facts_search")
        op.execute(
            "CREATE INDEX ix_memory_facts_search ON memory_facts USING gin (search_vector) "
            f"WITH (fastupdate = off) WHERE {_LIVE}"
        )
    else:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS memory_facts_fts_{trigger}")
        with op.batch_alter_table("memory_facts", recreate="always") as batch:
            batch.drop_constraint("uq_memory_facts_content_key", type_="unique")
            batch.drop_index("ix_memory_facts_scope_confidence")
            batch.create_check_constraint(*check)
        for statement in _fts_objects(_KEY, closes=True):
            op.execute(statement)
    live = sa.text(_LIVE)
    op.create_index(
        "uq_memory_facts_live_content_key",
        "memory_facts",
        [*_SCOPE, "content_key"],
        unique=True,
        sqlite_where=live,
        postgresql_where=live,
    )
    _confidence_index(live=True)
    closed = sa.text("valid_to IS NOT NULL")
    op.create_index(
        "ix_memory_facts_tenant_valid_to",
        "memory_facts",
        ["tenant_id", "valid_to"],
        sqlite_where=closed,
        postgresql_where=closed,
    )
    for name, type_, comment in _EVENT_COLUMNS:
        op.add_column("memory_fact_events", sa.Column(name, type_, nullable=True, comment=comment))
    for name in _CALL_COLUMNS:
        column = sa.Column(
            name,
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment=_CALL_COMMENTS.get(name),
        )
        op.add_column("memory_llm_calls", column)
    _create_views(dialect, saved, live=True)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    saved = _drop_views(dialect)
    # Closed facts were deleted facts before this revision.
    op.execute("DELETE FROM memory_facts WHERE valid_to IS NOT NULL")
    for name in (
        "uq_memory_facts_live_content_key",
        "ix_memory_facts_tenant_valid_to",
        "ix_memory_facts_scope_confidence",
    ):
        op.drop_index(name, "memory_facts")
    for name in reversed(_CALL_COLUMNS):
        op.drop_column("memory_llm_calls", name)
    for name, *_ in reversed(_EVENT_COLUMNS):
        op.drop_column("memory_fact_events", name)
    check = "ck_memory_facts_expected_valid_days_positive"
    if dialect == "postgresql":
        op.drop_constraint(check, "memory_facts", type_="check")
        op.execute("DROP INDEX IF EXISTS ix_memory_facts_search")
        op.execute(
            "CREATE INDEX ix_memory_facts_search ON memory_facts USING gin (search_vector) "
            "WITH (fastupdate = off)"
        )
        for name, *_ in reversed(_FACT_COLUMNS):
            op.drop_column("memory_facts", name)
        op.create_unique_constraint(
            "uq_memory_facts_content_key", "memory_facts", [*_SCOPE, "content_key"]
        )
    else:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS memory_facts_fts_{trigger}")
        with op.batch_alter_table("memory_facts", recreate="always") as batch:
            batch.drop_constraint(check, type_="check")
            for name, *_ in reversed(_FACT_COLUMNS):
                batch.drop_column(name)
            batch.create_unique_constraint("uq_memory_facts_content_key", [*_SCOPE, "content_key"])
        for statement in _fts_objects(_OLD_KEY, closes=False):
            op.execute(statement)
    _confidence_index(live=False)
    _create_views(dialect, saved, live=False)


def _confidence_index(*, live: bool) -> None:
    where = sa.text(_LIVE) if live else None
    op.create_index(
        "ix_memory_facts_scope_confidence",
        "memory_facts",
        [*_SCOPE, sa.text("confidence DESC")],
        sqlite_where=where,
        postgresql_where=where,
    )


def _drop_views(dialect: str) -> dict[str, str]:
    """Drop the reporting views this revision defines again; on SQLite every view (SQLite
    re-checks them all when a table is renamed), keeping the SQL of the others by name."""
    bind = op.get_bind()
    saved: dict[str, str] = {}
    if dialect == "postgresql":
        names = [*_fact_views(dialect, live=True)]
    else:
        rows = bind.execute(sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
        saved = {row[0]: row[1] for row in rows}
        names = list(saved)
    for name in names:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    return saved


def _create_views(dialect: str, saved: dict[str, str], *, live: bool) -> None:
    ours = _fact_views(dialect, live)
    for name, sql in saved.items():
        if name not in ours and name != "memory_report_superseded":
            op.execute(sql)
    for name, query in ours.items():
        op.execute(f"CREATE VIEW {name} AS {query.strip()}")
        # As revision 0010 made the views it found: read with the caller's rights.
        if dialect == "postgresql" and _invoker_views():
            op.execute(f"ALTER VIEW {name} SET (security_invoker = true)")


def _invoker_views() -> bool:
    version = op.get_bind().exec_driver_sql("SHOW server_version_num").scalar()
    return int(version) >= 150000
