"""docs/citus-distribution.sql against the schema Alembic makes on a real PostgreSQL.

Citus is not installed here, so its three functions are stand-ins that record their calls; the
file is run as it is (every table it names must exist, every call must parse), and then the
rules Citus enforces when it distributes are checked on the real catalog: every table of the
schema is placed once; a distributed table's every unique index (primary keys, the partial
unique index of live facts) contains, and here starts with, ``tenant_id``; foreign keys
between distributed tables include ``tenant_id`` at the same place on both sides; no reference
or local table points at a distributed one; colocated tables have the same ``tenant_id`` type.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from memory_sql.database import create_engine

pytestmark = pytest.mark.postgres

DDL = Path(__file__).resolve().parent.parent / "docs" / "citus-distribution.sql"

STAND_INS = """
CREATE TABLE citus_placement (relation regclass PRIMARY KEY, kind text NOT NULL,
                              column_name text, colocate_with text);
CREATE FUNCTION create_distributed_table(relation regclass, column_name text,
                                         colocate_with text DEFAULT 'default')
RETURNS void LANGUAGE sql AS
$$ INSERT INTO citus_placement VALUES (relation, 'distributed', column_name, colocate_with) $$;
CREATE FUNCTION create_reference_table(relation regclass) RETURNS void LANGUAGE sql AS
$$ INSERT INTO citus_placement VALUES (relation, 'reference', NULL, NULL) $$;
CREATE FUNCTION citus_add_local_table_to_metadata(relation regclass) RETURNS void
LANGUAGE sql AS $$ INSERT INTO citus_placement VALUES (relation, 'local', NULL, NULL) $$;
"""


def _statements(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]


@pytest.fixture
def placed(
    own_pg_url: str,
) -> Iterator[tuple[sa.Engine, dict[str, tuple[str, str | None, str | None]]]]:
    """The schema at head with the DDL run on it: each table's (kind, column, colocate_with)."""
    engine = create_engine(own_pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(STAND_INS)
        for statement in _statements(DDL.read_text(encoding="utf-8")):
            conn.exec_driver_sql(statement)
        rows = conn.execute(
            sa.text("SELECT relation::text, kind, column_name, colocate_with FROM citus_placement")
        ).all()
    placement = {row[0]: (row[1], row[2], row[3]) for row in rows}
    for name in re.findall(r"^-- local: (\w+)$", DDL.read_text(encoding="utf-8"), re.M):
        placement[name] = ("coordinator", None, None)
    yield engine, placement
    engine.dispose()


def _tables(conn: sa.Connection) -> set[str]:
    return set(
        conn.execute(
            sa.text(
                "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
                "AND relkind IN ('r', 'p') AND relname <> 'citus_placement'"
            )
        ).scalars()
    )


def test_every_table_of_the_schema_is_placed_once(placed) -> None:
    engine, placement = placed
    with engine.connect() as conn:
        tables = _tables(conn)
    assert set(placement) == tables
    kinds = {name: kind for name, (kind, _, _) in placement.items()}
    assert kinds["memory_api_keys"] == "reference"
    assert kinds["memory_pending_updates"] == "local"
    assert kinds["alembic_version"] == "coordinator"
    distributed = {name for name, kind in kinds.items() if kind == "distributed"}
    assert len(distributed) == len(tables) - 3
    # Every distributed table is by tenant_id, in one colocation group anchored on scopes.
    for name in distributed:
        _, column, colocate = placement[name]
        assert column == "tenant_id", name
        assert colocate == ("default" if name == "memory_scopes" else "memory_scopes"), name


def test_every_unique_index_of_a_distributed_table_starts_with_tenant_id(placed) -> None:
    engine, placement = placed
    distributed = [name for name, (kind, _, _) in placement.items() if kind == "distributed"]
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, i.indexrelid::regclass::text, "
                "       (SELECT array_agg(a.attname ORDER BY k.n) "
                "          FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) "
                "          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum) "
                "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
                "WHERE i.indisunique AND c.relname = ANY(:names)"
            ),
            {"names": distributed},
        ).all()
    by_table: dict[str, list[str]] = {}
    for table, index, columns in rows:
        assert columns[0] == "tenant_id", (table, index, columns)
        by_table.setdefault(table, []).append(index)
    assert set(by_table) == set(distributed)  # each has its primary key at least
    assert "uq_memory_facts_live_content_key" in by_table["memory_facts"]


def test_foreign_keys_stay_within_a_tenant_and_the_group_shares_a_type(placed) -> None:
    engine, placement = placed
    kind = {name: k for name, (k, _, _) in placement.items()}
    with engine.connect() as conn:
        keys = conn.execute(
            sa.text(
                "SELECT conrelid::regclass::text, confrelid::regclass::text, "
                "       (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(conkey) "
                "          WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a "
                "          ON a.attrelid = conrelid AND a.attnum = k.attnum), "
                "       (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(confkey) "
                "          WITH ORDINALITY AS k(attnum, n) JOIN pg_attribute a "
                "          ON a.attrelid = confrelid AND a.attnum = k.attnum) "
                "FROM pg_constraint WHERE contype = 'f' "
                "AND connamespace = 'public'::regnamespace"
            )
        ).all()
        types = dict(
            conn.execute(
                sa.text(
                    "SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "JOIN pg_class c ON c.oid = a.attrelid WHERE a.attname = 'tenant_id' "
                    "AND c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
                )
            ).all()
        )
    assert len(keys) >= 3
    for table, referenced, columns, referenced_columns in keys:
        if kind[referenced] == "distributed":
            assert kind[table] == "distributed", (table, referenced)
            position = columns.index("tenant_id")
            assert referenced_columns[position] == "tenant_id", (table, referenced)
    group = {types[name] for name, k in kind.items() if k == "distributed"}
    assert len(group) == 1, group
