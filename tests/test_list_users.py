"""``ops.list_users``: a tenant's users with their agents and fact counts, newest first,
searchable by id, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from memory_sql import ops
from memory_sql.database import create_engine
from memory_sql.errors import InvalidScopeError
from memory_sql.storage import SQLStorage


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    engine = create_engine(url)
    yield engine
    engine.dispose()


def test_users_of_a_tenant_with_their_agents_and_facts(engine):
    tenant, other = f"t{uuid.uuid4().hex[:8]}", f"o{uuid.uuid4().hex[:8]}"
    storage = SQLStorage(engine)
    ops.add_fact(storage, "A", user_id="Alice_1", agent_name="coder", tenant_id=tenant)
    ops.add_fact(storage, "B", user_id="Alice_1", agent_name="coder", tenant_id=tenant)
    ops.add_fact(storage, "C", user_id="Alice_1", tenant_id=tenant)
    ops.add_fact(storage, "D", user_id="bob", tenant_id=tenant)
    ops.add_fact(storage, "E", user_id="alice_2", tenant_id=other)
    storage.close()

    users = ops.list_users(engine, tenant_id=tenant)
    assert [(u.user_id, u.agents, u.facts) for u in users] == [
        ("bob", (None,), 1),  # changed last
        ("Alice_1", (None, "coder"), 3),
    ]
    assert [u.user_id for u in ops.list_users(engine, tenant_id=tenant, contains="ALICE")] == [
        "Alice_1"
    ]
    # LIKE's wildcards are plain text: "_1" is found, "%" matches nothing.
    assert [u.user_id for u in ops.list_users(engine, tenant_id=tenant, contains="e_1")] == [
        "Alice_1"
    ]
    assert ops.list_users(engine, tenant_id=tenant, contains="%") == []
    assert [u.user_id for u in ops.list_users(engine, tenant_id=tenant, limit=1)] == ["bob"]
    assert [u.user_id for u in ops.list_users(engine, tenant_id=tenant, user_id="bob")] == ["bob"]
    assert ops.list_users(engine, tenant_id=f"n{uuid.uuid4().hex[:8]}") == []
    with pytest.raises(ValueError, match="limit"):
        ops.list_users(engine, tenant_id=tenant, limit=0)
    with pytest.raises(InvalidScopeError):
        ops.list_users(engine, tenant_id="no/slash")
