"""A full-text index of facts kept by the database, and the access heat of each fact.

``memory_facts.search_text`` holds the searchable form of a fact's content
(:func:`memory_sql.text_search.search_text`: casefolded terms, CJK characters one term each,
written by the storage with the content). The database indexes it:

- PostgreSQL: ``search_vector``, a ``tsvector`` column generated from it and from a term of
  its memory (``'s' || md5(tenant, user, agent)``, so that the GIN index alone finds one
  memory's facts, whatever the planner knows of the table), and the GIN index
  ``ix_memory_facts_search``, without GIN's pending list (``fastupdate = off``): with it,
  every search read all the entries not yet merged into the index, and facts are written a
  few at a time. The text search configuration is ``simple`` (the terms are
  already normalised for every language: no stemmer or stop words apply twice), or the one
  named when this revision runs (``memory-sql db upgrade --text-search-config``,
  ``memory_sql.upgrade(text_search_config=)``, or ``$MEMORY_SQL_TEXT_SEARCH_CONFIG``), which
  must exist in ``pg_ts_config``; queries read it back from the
  column (:func:`memory_sql.storage.search.text_search_config`).
- SQLite: ``memory_facts_fts``, a contentless FTS5 table (``unicode61``) whose rows share the
  facts' rowids, with a ``scope_key`` column holding one term per memory
  (``'s' || hex(tenant, user, agent)``), so that a query reads only the postings of its own
  memory; three triggers keep it in step with every insert, delete and change of text or scope
  (an update that leaves both as they were, a new confidence say, does not touch it).

``access_count`` and ``last_accessed_at`` count how often a fact was shown in a ranked context
(written in the background, see :mod:`memory_sql.recall.heat`), for the hybrid eviction policy.

Existing facts get their ``search_text`` here, computed by the live ``search_text``: the index
must hold what the current tokenizer makes of a text, since queries are cut by it. A later change
of the tokenizer comes with a revision that recomputes the column. A later revision that rebuilds
``memory_facts`` on SQLite (Alembic's batch mode copies the table) must rebuild the FTS table and
its triggers too (:func:`memory_sql.storage.search.rebuild_sqlite_index`); so must a ``VACUUM``,
which may renumber the rowids of a table without an integer primary key.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import op

from memory_sql.errors import ConfigError
from memory_sql.text_search import search_text

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BATCH_SIZE = 1000

_SCOPE_KEY = (
    "'s' || hex({row}.tenant_id || char(31) || {row}.user_id || char(31) || {row}.agent_name)"
)
_FTS_INSERT = (
    "INSERT INTO memory_facts_fts (rowid, search_text, scope_key) "
    "VALUES (new.rowid, new.search_text, " + _SCOPE_KEY.format(row="new") + ");"
)
_FTS_DELETE = (
    "INSERT INTO memory_facts_fts (memory_facts_fts, rowid, search_text, scope_key) "
    "VALUES ('delete', old.rowid, old.search_text, " + _SCOPE_KEY.format(row="old") + ");"
)
SQLITE_OBJECTS = (
    "CREATE VIRTUAL TABLE memory_facts_fts USING fts5("
    "search_text, scope_key, content='', tokenize='unicode61 remove_diacritics 0')",
    f"CREATE TRIGGER memory_facts_fts_insert AFTER INSERT ON memory_facts BEGIN {_FTS_INSERT} END",
    f"CREATE TRIGGER memory_facts_fts_delete AFTER DELETE ON memory_facts BEGIN {_FTS_DELETE} END",
    "CREATE TRIGGER memory_facts_fts_update "
    "AFTER UPDATE OF search_text, tenant_id, user_id, agent_name ON memory_facts "
    "WHEN old.search_text IS NOT new.search_text OR old.tenant_id IS NOT new.tenant_id "
    "OR old.user_id IS NOT new.user_id OR old.agent_name IS NOT new.agent_name "
    f"BEGIN {_FTS_DELETE} {_FTS_INSERT} END",
    "INSERT INTO memory_facts_fts (rowid, search_text, scope_key) "
    "SELECT rowid, search_text, " + _SCOPE_KEY.format(row="memory_facts") + " FROM memory_facts",
)
CONFIG_ENV = "MEMORY_SQL_TEXT_SEARCH_CONFIG"
POSTGRESQL_OBJECTS = (
    "ALTER TABLE memory_facts ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    "to_tsvector('{config}'::regconfig, search_text) || CAST('s' || md5(tenant_id || chr(31) "
    "|| user_id || chr(31) || agent_name) AS tsvector)) STORED",
    "CREATE INDEX ix_memory_facts_search ON memory_facts USING gin (search_vector) "
    "WITH (fastupdate = off)",
)

_facts = sa.table(
    "memory_facts",
    sa.column("tenant_id", sa.String()),
    sa.column("user_id", sa.String()),
    sa.column("agent_name", sa.String()),
    sa.column("fact_id", sa.String()),
    sa.column("content", sa.Text()),
    sa.column("search_text", sa.Text()),
)
_KEY = ("tenant_id", "user_id", "agent_name", "fact_id")


def upgrade() -> None:
    op.add_column(
        "memory_facts",
        sa.Column(
            "search_text",
            sa.Text(),
            nullable=False,
            server_default="",
            comment="the searchable form of content (memory_sql.text_search.search_text)",
        ),
    )
    op.add_column(
        "memory_facts",
        sa.Column(
            "access_count",
            sa.Integer(),
            nullable=False,
            server_default="0",
            comment="times shown in a ranked context (written in the background, lossy)",
        ),
    )
    op.add_column(
        "memory_facts",
        sa.Column("last_accessed_at", sa.DateTime(timezone=True), nullable=True),
    )
    _fill_search_text()
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        for statement in SQLITE_OBJECTS:
            op.execute(statement)
        return
    chosen = op.get_context().config.attributes.get("text_search_config")
    config = (chosen or os.environ.get(CONFIG_ENV, "")).strip() or "simple"
    known = bind.execute(
        sa.text("SELECT 1 FROM pg_ts_config WHERE cfgname = :name"), {"name": config}
    ).first()
    if known is None:
        raise ConfigError(
            f"text_search_config: {config!r} is not a text search configuration of this "
            "database (SELECT cfgname FROM pg_ts_config lists them)",
            key="text_search_config",
        )
    for statement in POSTGRESQL_OBJECTS:
        op.execute(statement.format(config=config))


def _fill_search_text() -> None:
    bind = op.get_bind()
    columns = [getattr(_facts.c, name) for name in _KEY]
    read = sa.select(*columns, _facts.c.content).order_by(*columns).limit(BATCH_SIZE)
    write = (
        sa.update(_facts)
        .where(*(getattr(_facts.c, name) == sa.bindparam(f"k_{name}") for name in _KEY))
        .values(search_text=sa.bindparam("text"))
    )
    after: tuple[str, ...] | None = None
    while True:
        statement = read if after is None else read.where(sa.tuple_(*columns) > after)
        rows = bind.execute(statement).all()
        if not rows:
            return
        bind.execute(
            write,
            [
                {
                    **{f"k_{name}": row[i] for i, name in enumerate(_KEY)},
                    "text": search_text(row[4]),
                }
                for row in rows
            ],
        )
        after = tuple(rows[-1][:4])


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_memory_facts_search")
        op.execute("ALTER TABLE memory_facts DROP COLUMN IF EXISTS search_vector")
    else:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS memory_facts_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS memory_facts_fts")
    # SQLite drops a column in place (3.35 and later): no batch copy of the table, whose views
    # would stop it.
    for column in ("last_accessed_at", "access_count", "search_text"):
        op.drop_column("memory_facts", column)
