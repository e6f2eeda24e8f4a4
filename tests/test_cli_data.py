"""``memory-sql facts | report | export | import | forget`` through Typer's runner, on SQLite and
PostgreSQL, checked against the tables with plain SQL."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from memory_sql import Fact, open_storage
from memory_sql.cli import app
from memory_sql.database import create_engine

runner = CliRunner()

TABLES = (
    "memory_scopes",
    "memory_sections",
    "memory_facts",
    "memory_pending_updates",
    "memory_fact_events",
)
DATA_COMMANDS = (
    ["facts", "list"],
    ["facts", "add"],
    ["facts", "remove"],
    ["facts", "search"],
    ["report"],
    ["export"],
    ["import"],
    ["forget"],
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    """A migrated database; on PostgreSQL one shared by the session (use unique ids)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database of this test's own (whole-database export needs one)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "own_pg_url")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def invoke(*args: str, code: int = 0, input: str | None = None) -> str:
    result = runner.invoke(app, list(args), input=input)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    return result.output


def rows(url: str, table: str, **where: str) -> int:
    """How many rows of ``table`` match ``where``, by plain SQL."""
    engine = create_engine(url)
    clause = " AND ".join(f"{name} = :{name}" for name in where) or "1 = 1"
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.text(f"SELECT count(*) FROM {table} WHERE {clause}"), where
            ).scalar_one()
    finally:
        engine.dispose()


def versions(url: str, tenant: str) -> dict[tuple[str, str], int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            result = conn.execute(
                sa.text(
                    "SELECT user_id, agent_name, version FROM memory_scopes WHERE tenant_id = :t"
                ),
                {"t": tenant},
            )
            return {(user, agent): version for user, agent, version in result}
    finally:
        engine.dispose()


def add_pending(url: str, tenant: str, user: str, thread: str, **values: object) -> None:
    now = datetime.now(timezone.utc)
    row = {
        "tenant_id": tenant,
        "user_id": user,
        "agent_name": "",
        "thread_id": thread,
        "kind": "turn",
        "messages": "[]",
        "correction": False,
        "reinforcement": False,
        "first_enqueued_at": now,
        "last_enqueued_at": now,
        "due_at": now,
        "generation": 1,
        "attempts": 0,
        "status": "pending",
        "last_error": None,
        "lease_owner": None,
        "lease_until": None,
        **values,
    }
    from memory_sql.schema import memory_pending_updates

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(memory_pending_updates), row)
    finally:
        engine.dispose()


def comparable(memory: dict) -> dict:
    """A memory.json without what the database stamps: its revision and last update, and
    each stored fact's updatedAt."""
    memory = {k: v for k, v in memory.items() if k not in ("revision", "lastUpdated")}
    memory["facts"] = [{k: v for k, v in f.items() if k != "updatedAt"} for f in memory["facts"]]
    return memory


def memory_json(*facts: tuple[str, str, float], summary: str = "Backend engineer") -> dict:
    def section(text: str = "", at: str = "") -> dict:
        return {"summary": text, "updatedAt": at}

    return {
        "version": "1.0",
        "revision": 0,
        "lastUpdated": "",
        "user": {
            "workContext": section(summary, "2026-01-02T03:04:05.000006Z"),
            "personalContext": section("住在柏林", "2026-01-03T00:00:00.000000Z"),
            "topOfMind": section(),
        },
        "history": {
            "recentMonths": section(),
            "earlierContext": section(),
            "longTermBackground": section("Studied physics", "2025-12-31T23:59:59.999999Z"),
        },
        "facts": [
            {
                "id": f"fact_{i:08d}",
                "content": content,
                "category": category,
                "confidence": confidence,
                "createdAt": f"2026-01-0{i + 1}T10:00:00.000000Z",
                "source": f"thread-{i}" if i % 2 else "unknown",
            }
            for i, (content, category, confidence) in enumerate(facts)
        ],
    }


# help ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", DATA_COMMANDS, ids=" ".join)
def test_every_data_command_has_help_with_an_example(command):
    output = invoke(*command, "--help")
    assert "Example:" in output and "memory-sql" in output
    assert "--url" in output


# facts -----------------------------------------------------------------------------------------


def test_facts_add_list_search_remove(url):
    user, other = unique("alice"), unique("bob")
    invoke("facts", "add", "--user", user, "Lives on Straße 5", "--url", url)
    invoke(
        "facts", "add", "--user", user, "喜欢用 Python 写后端", "--category", "preference",
        "--confidence", "0.95", "--url", url,
    )  # fmt: skip
    invoke("facts", "add", "--user", other, "--agent", "coder", "Uses Vim", "--url", url)

    duplicate = invoke("facts", "add", "--user", user, "LIVES ON STRASSE 5", "--url", url, code=1)
    assert "duplicates another fact" in duplicate and len(duplicate.strip().splitlines()) == 1
    bad = invoke("facts", "add", "--user", user, "x", "--confidence", "1.5", "--url", url, code=1)
    assert "confidence must be between 0 and 1" in bad
    bad_user = invoke("facts", "add", "--user", "../etc", "x", "--url", url, code=1)
    assert "invalid user_id" in bad_user

    listed = json.loads(invoke("facts", "list", "--user", user, "--json", "--url", url))
    assert [f["content"] for f in listed] == ["喜欢用 Python 写后端", "Lives on Straße 5"]
    assert listed[0]["confidence"] == 0.95 and listed[1]["category"] == "context"
    table = invoke("facts", "list", "--user", user, "--url", url)
    assert "Straße" in table and listed[0]["id"] in table

    def search(*args: str) -> list[str]:
        found = json.loads(invoke("facts", "search", *args, "--json", "--url", url))
        return [f["content"] for f in found]

    # casefold, not lower(): STRASSE finds Straße on both databases; CJK matches as written
    assert search("STRASSE", "--user", user) == ["Lives on Straße 5"]
    assert search("straße", "--user", user) == ["Lives on Straße 5"]
    assert search("python 写", "--user", user) == ["喜欢用 Python 写后端"]
    assert search("后端", "--user", user) == ["喜欢用 Python 写后端"]
    assert search("--user", user, "--category", "preference") == ["喜欢用 Python 写后端"]
    assert search("--user", user, "--min-confidence", "0.92") == ["喜欢用 Python 写后端"]
    assert search("--user", user, "--limit", "1") == ["喜欢用 Python 写后端"]
    assert search("vim", "--user", other, "--agent", "CODER") == ["Uses Vim"]
    assert search("vim", "--user", user) == []
    assert "Uses Vim" in invoke("facts", "search", "VIM", "--user", other, "--url", url)
    invoke("facts", "search", "--min-confidence", "2", "--url", url, code=1)

    removed = invoke("facts", "remove", "--user", user, listed[1]["id"], "--url", url)
    assert "removed" in removed and "Straße" in removed
    missing = invoke("facts", "remove", "--user", user, listed[1]["id"], "--url", url, code=1)
    assert "has no fact" in missing
    assert search("--user", user) == ["喜欢用 Python 写后端"]
    assert rows(url, "memory_fact_events", user_id=user, event="removed") == 1


def test_commands_refuse_a_database_not_at_head(tmp_path):
    (tmp_path / "empty.db").touch()  # an empty SQLite database
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    for args in (["facts", "list", "--user", "u"], ["report"], ["forget", "--user", "u", "-y"]):
        output = invoke(*args, "--url", url, code=1)
        assert "memory-sql db upgrade" in output, args


def test_the_url_can_come_from_a_config_file(sqlite_url, tmp_path):
    config = tmp_path / "memory.yaml"
    config.write_text(f"memory:\n  storage: {sqlite_url}\n")
    invoke("facts", "add", "--user", "cfg", "From the config", "--config", str(config))
    assert rows(sqlite_url, "memory_facts", user_id="cfg") == 1
    folder = tmp_path / "folder.yaml"
    folder.write_text(f"memory:\n  storage: {tmp_path / 'files'}\n")
    output = invoke("report", "--config", str(folder), code=1)
    assert "is not a database URL" in output


# export and import -----------------------------------------------------------------------------


def test_memory_json_round_trip_and_idempotent_import(url, tmp_path):
    user = unique("carol")
    source = memory_json(
        ("Prefers tabs", "preference", 0.9),
        ("工作在上海", "context", 0.8),
        ("Not a Java developer", "correction", 1.0),
    )
    source["facts"][2]["sourceError"] = "Said the user writes Java"
    path = tmp_path / "memory.json"
    path.write_text(json.dumps(source, ensure_ascii=False), encoding="utf-8")

    first = invoke("import", str(path), "--user", user, "--agent", "coder", "--url", url)
    assert "version 0 → 1" in first
    exported = tmp_path / "out.json"
    invoke("export", "--user", user, "--agent", "coder", "-o", str(exported), "--url", url)
    assert comparable(json.loads(exported.read_text(encoding="utf-8"))) == comparable(source)
    printed = invoke("export", "--user", user, "--agent", "coder", "--url", url)
    assert json.loads(printed) == json.loads(exported.read_text(encoding="utf-8"))

    again = invoke("import", str(path), "--user", user, "--agent", "coder", "--url", url)
    assert "unchanged at version 1" in again
    # the export itself imports as a no-op too
    invoke("import", str(exported), "--user", user, "--agent", "coder", "--url", url)
    assert versions(url, "default")[(user, "coder")] == 1
    assert rows(url, "memory_fact_events", user_id=user) == 3

    # a changed file replaces the memory: one fact gone, one changed, one new
    source["facts"] = [
        {**source["facts"][0], "confidence": 0.95},
        {"id": "fact_new", "content": "Runs on PostgreSQL", "category": "context"},
    ]
    path.write_text(json.dumps(source), encoding="utf-8")
    assert "version 1 → 2" in invoke(
        "import", str(path), "--user", user, "--agent", "coder", "--url", url
    )
    after = json.loads(invoke("export", "--user", user, "--agent", "coder", "--url", url))
    assert {f["id"]: f["confidence"] for f in after["facts"]} == {
        "fact_00000000": 0.95,
        "fact_new": 0.5,
    }


def test_jsonl_round_trip_of_a_whole_database_and_of_a_tenant(fresh_url, tmp_path):
    lines = [
        {"tenant_id": "acme", "user_id": "u1", "agent_name": None,
         "memory": memory_json(("Likes tea", "preference", 0.7))},
        {"tenant_id": "acme", "user_id": "u1", "agent_name": "coder",
         "memory": memory_json(("写 Rust", "knowledge", 0.85), ("Uses Linux", "context", 0.6))},
        {"tenant_id": "acme", "user_id": "u2@example.com", "agent_name": None,
         "memory": memory_json(summary="Designer")},
        {"tenant_id": "globex", "user_id": "u1", "agent_name": "writer",
         "memory": memory_json(("Writes in German", "preference", 1.0))},
    ]  # fmt: skip
    source = tmp_path / "all.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    output = invoke("import", "--jsonl", str(source), "--url", fresh_url)
    assert "imported 4 memories" in output and "4 changed, 0 unchanged" in output
    before = {t: versions(fresh_url, t) for t in ("acme", "globex")}
    assert set(before["acme"].values()) == {1}

    everything = tmp_path / "everything.jsonl"
    assert "exported 4 memories" in invoke("export", "--jsonl", str(everything), "--url", fresh_url)
    exported = [json.loads(line) for line in everything.read_text(encoding="utf-8").splitlines()]
    assert [(e["tenant_id"], e["user_id"], e["agent_name"]) for e in exported] == [
        (line["tenant_id"], line["user_id"], line["agent_name"]) for line in lines
    ]
    for got, want in zip(exported, lines, strict=True):
        assert comparable(got["memory"]) == comparable(want["memory"])

    again = invoke("import", "--jsonl", str(everything), "--url", fresh_url)
    assert "0 changed, 4 unchanged" in again
    invoke("import", "--jsonl", str(source), "--url", fresh_url)
    assert {t: versions(fresh_url, t) for t in ("acme", "globex")} == before

    globex = tmp_path / "globex.jsonl"
    invoke("export", "--tenant", "globex", "--jsonl", str(globex), "--url", fresh_url)
    only = [json.loads(line) for line in globex.read_text(encoding="utf-8").splitlines()]
    assert [(e["tenant_id"], e["user_id"]) for e in only] == [("globex", "u1")]


MALFORMED = {
    "bad JSON on line 3": ('{"tenant_id": "t", "user_id": "u3", "memory": {', 3, "not JSON"),
    "confidence 'high' on line 2": (None, 2, "confidence"),
    "invalid user id on line 2": (None, 2, "invalid user_id"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_jsonl_import_writes_nothing_and_names_the_line(url, tmp_path, case):
    tenant = unique("t")
    good = {"tenant_id": tenant, "user_id": "u1", "memory": memory_json(("Fine", "context", 0.9))}
    second = {"tenant_id": tenant, "user_id": "u2", "memory": memory_json(("Ok", "context", 0.8))}
    if case.startswith("confidence"):
        second["memory"]["facts"][0]["confidence"] = "high"
    if case.startswith("invalid user"):
        second["user_id"] = "../etc/passwd"
    third, line, message = MALFORMED[case]
    text = json.dumps(good) + "\n" + json.dumps(second) + "\n"
    text += (third or json.dumps({**good, "user_id": "u3"})) + "\n"
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")

    output = invoke("import", "--jsonl", str(path), "--url", url, code=1)
    assert f"line {line}:" in output and message in output and str(path) in output
    assert len(output.strip().splitlines()) == 1
    for table in TABLES:
        assert rows(url, table, tenant_id=tenant) == 0, table


def test_a_malformed_memory_json_writes_nothing_and_says_where(url, tmp_path):
    user = unique("dave")
    path = tmp_path / "memory.json"
    path.write_text('{\n  "facts": [\n    {"content": "x",}\n  ]\n}\n', encoding="utf-8")
    output = invoke("import", str(path), "--user", user, "--url", url, code=1)
    assert f"{path}, line 3: not JSON" in output

    bad = memory_json(("Fine", "context", 0.9), ("Sure", "context", 0.9))
    bad["facts"][1]["confidence"] = "high"
    path.write_text(json.dumps(bad), encoding="utf-8")
    output = invoke("import", str(path), "--user", user, "--url", url, code=1)
    assert "facts[1].confidence" in output and "'high'" in output
    assert rows(url, "memory_scopes", user_id=user) == 0

    output = invoke("import", str(tmp_path / "missing.json"), "--user", user, "--url", url, code=1)
    assert "missing.json" in output
    output = invoke("import", str(path), "--url", url, code=1)
    assert "--user" in output


def test_an_export_matching_nothing_leaves_the_target_unchanged(fresh_url, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    kept = folder / "existing.jsonl"
    kept.write_text('{"a good": "export"}\n', encoding="utf-8")
    memory = folder / "memory.json"
    memory.write_text('{"facts": []}\n', encoding="utf-8")
    nosuch = unique("nosuch")

    output = invoke("export", "--jsonl", str(kept), "--tenant", nosuch, "--url", fresh_url, code=1)
    assert f"no memory matched --tenant {nosuch} in " in output
    assert f"{kept} left unchanged" in output and output.count("\n") == 1
    output = invoke("export", "--jsonl", str(kept), "--url", fresh_url, code=1)  # empty database
    assert "no memory matched in " in output and f"{kept} left unchanged" in output
    output = invoke("export", "--user", nosuch, "-o", str(memory), "--url", fresh_url, code=1)
    assert f"no memory matched default/{nosuch}/- in " in output
    assert f"{memory} left unchanged" in output

    assert kept.read_text(encoding="utf-8") == '{"a good": "export"}\n'
    assert memory.read_text(encoding="utf-8") == '{"facts": []}\n'
    assert sorted(p.name for p in folder.iterdir()) == ["existing.jsonl", "memory.json"]
    # what matched still replaces the file
    tenant = unique("t")
    line = {"tenant_id": tenant, "user_id": "u1", "memory": memory_json(("Fine", "context", 0.9))}
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps(line) + "\n", encoding="utf-8")
    invoke("import", "--jsonl", str(source), "--url", fresh_url)
    invoke("export", "--jsonl", str(kept), "--tenant", tenant, "--url", fresh_url)
    assert [json.loads(x)["user_id"] for x in kept.read_text().splitlines()] == ["u1"]
    assert sorted(p.name for p in folder.iterdir()) == ["existing.jsonl", "memory.json"]


def test_a_failed_export_names_the_target_not_its_temporary_file(url, tmp_path):
    tenant, user = unique("t"), unique("erin")
    invoke("facts", "add", "--user", user, "--tenant", tenant, "Likes tea", "--url", url)
    folder = tmp_path / "out"
    (folder / "taken.jsonl").mkdir(parents=True)  # os.replace cannot put a file there
    (folder / "taken.json").mkdir()
    for args, target in (
        (["--jsonl", str(folder / "taken.jsonl"), "--tenant", tenant], folder / "taken.jsonl"),
        (
            ["--user", user, "--tenant", tenant, "-o", str(folder / "taken.json")],
            folder / "taken.json",
        ),
        (["--jsonl", str(tmp_path / "nofolder" / "x.jsonl")], tmp_path / "nofolder" / "x.jsonl"),
    ):
        output = invoke("export", *args, "--url", url, code=1)
        assert f"cannot write {target}:" in output, output
        assert ".tmp" not in output and output.count("\n") == 1, output
    assert sorted(p.name for p in folder.iterdir()) == ["taken.json", "taken.jsonl"]


# forget ----------------------------------------------------------------------------------------


def _seed_user(url: str, tenant: str, user: str) -> None:
    with open_storage(url) as storage:
        for agent in (None, "coder"):
            doc = storage.load(user_id=user, agent_name=agent, tenant_id=tenant)
            doc.user.work_context.summary = f"{user} works"
            doc.facts = [
                Fact(content=f"{user} fact {i}", confidence=0.5 + i / 10) for i in range(3)
            ]
            storage.save(doc, user_id=user, agent_name=agent, tenant_id=tenant)
            doc = storage.load(user_id=user, agent_name=agent, tenant_id=tenant)
            doc.facts = doc.facts[1:]
            storage.save(doc, user_id=user, agent_name=agent, tenant_id=tenant)
    add_pending(url, tenant, user, "thread-1")
    add_pending(url, tenant, user, "thread-2", status="failed", attempts=5)


def test_forget_deletes_every_row_of_the_user_and_nothing_else(url):
    tenant, elsewhere = unique("t"), unique("t")
    user, other = unique("erin"), unique("frank")
    _seed_user(url, tenant, user)
    _seed_user(url, tenant, other)
    _seed_user(url, elsewhere, user)  # the same user id in another tenant
    keep = {
        (t, u): {table: rows(url, table, tenant_id=t, user_id=u) for table in TABLES}
        for t, u in ((tenant, other), (elsewhere, user))
    }
    assert all(count > 0 for counts in keep.values() for count in counts.values())

    declined = invoke("forget", "--user", user, "--tenant", tenant, "--url", url, code=1, input="n")
    assert "Delete every row of user" in declined
    # 4 live facts and the 2 removed ones, kept closed (revision 0015)
    assert rows(url, "memory_facts", tenant_id=tenant, user_id=user) == 6

    output = invoke("forget", "--user", user, "--tenant", tenant, "--url", url, input="y\n")
    expected = {
        "memory_scopes": 2,
        "memory_sections": 2,
        "memory_facts": 6,  # closed facts too
        "memory_pending_updates": 2,
        "memory_fact_events": 8,  # 3 added + 1 removed, per agent
    }
    for table, count in expected.items():
        assert f"{table}: {count}" in output
    assert f"{sum(expected.values())} rows" in output
    for table in TABLES:
        assert rows(url, table, tenant_id=tenant, user_id=user) == 0, table
    for (t, u), counts in keep.items():
        assert {table: rows(url, table, tenant_id=t, user_id=u) for table in TABLES} == counts

    again = invoke("forget", "--user", user, "--tenant", tenant, "--yes", "--url", url)
    assert "0 rows" in again
    invoke("forget", "--user", "bad/user", "--yes", "--url", url, code=1)


# report ----------------------------------------------------------------------------------------


def test_report_numbers_match_the_seeded_database(url):
    tenant = unique("t")
    seeded = {  # user: [(content, category, confidence)]
        "u1": [("a", "preference", 0.0), ("b", "preference", 0.7), ("c", "context", 1.0)],
        "u2": [("d", "preference", 0.95), ("e", "knowledge", 0.35), ("f", "context", 0.79)],
        "u3": [("g", "context", 0.1)],
    }
    with open_storage(url) as storage:
        for user, facts in seeded.items():
            doc = storage.load(user_id=user, tenant_id=tenant)
            doc.facts = [Fact(content=c, category=k, confidence=x) for c, k, x in facts]
            doc.user.top_of_mind.summary = "busy" if user == "u2" else ""
            storage.save(doc, user_id=user, tenant_id=tenant)
        doc = storage.load(user_id="u3", tenant_id=tenant)  # one removed, one updated
        doc.facts = []
        storage.save(doc, user_id="u3", tenant_id=tenant)
        doc = storage.load(user_id="u1", tenant_id=tenant)
        doc.facts = [doc.facts[0].replace(confidence=0.05), *doc.facts[1:]]
        storage.save(doc, user_id="u1", tenant_id=tenant)
    soon = datetime.now(timezone.utc) + timedelta(minutes=5)
    add_pending(url, tenant, "u1", "t1", due_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
    add_pending(url, tenant, "u1", "t2", lease_owner="w1", lease_until=soon, attempts=1)
    add_pending(url, tenant, "u2", "t3", status="failed", attempts=5)

    data = json.loads(invoke("report", "--tenant", tenant, "--json", "--url", url))
    assert data["totals"] == {
        "facts": 6,
        "memories": 3,
        "pending_updates": 2,
        "failed_updates": 1,
        "llm_calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "rejected_items": 0,
        "held_over_budget": 0,
        "redactions": 0,
    }
    assert data["llm_usage"] == [] and data["llm_rejections"] == [] and data["redactions"] == []
    categories = {row["category"]: row for row in data["categories"]}
    assert [row["category"] for row in data["categories"]] == ["preference", "context", "knowledge"]
    assert categories["preference"]["facts"] == 3
    assert categories["preference"]["avg_confidence"] == pytest.approx((0.05 + 0.7 + 0.95) / 3)
    assert categories["preference"]["min_confidence"] == 0.05
    assert categories["context"]["max_confidence"] == 1.0
    assert categories["knowledge"] == {
        "category": "knowledge", "facts": 1, "avg_confidence": 0.35,
        "min_confidence": 0.35, "max_confidence": 0.35,
    }  # fmt: skip
    buckets = {row["bucket"]: row["facts"] for row in data["confidence"]}
    assert len(buckets) == 10 and sum(buckets.values()) == 6
    # 0.05 | 0.35 | 0.7, 0.79 (0.7 is not in 0.6-0.7) | 0.95, 1.0 (1.0 is in the last bucket)
    assert {b: n for b, n in buckets.items() if n} == {
        "0.0-0.1": 1, "0.3-0.4": 1, "0.7-0.8": 2, "0.9-1.0": 2,
    }  # fmt: skip
    assert len(data["activity"]) == 14
    totals = {k: sum(day[k] for day in data["activity"]) for k in ("added", "updated", "removed")}
    assert totals == {"added": 7, "updated": 1, "removed": 1}
    assert [(m["user_id"], m["facts"], m["sections"], m["version"]) for m in data["largest"]] == [
        ("u1", 3, 0, 2),
        ("u2", 3, 1, 1),
        ("u3", 0, 0, 2),
    ]
    assert data["queue"]["pending"]["updates"] == 2
    assert data["queue"]["pending"]["leased"] == 1
    assert data["queue"]["pending"]["oldest_due"] == "2026-01-01T00:00:00.000000Z"
    assert data["queue"]["failed"] == {
        "updates": 1, "oldest_due": data["queue"]["failed"]["oldest_due"],
        "max_attempts": 5, "leased": 0,
    }  # fmt: skip

    top = json.loads(invoke("report", "--tenant", tenant, "--top", "1", "--json", "--url", url))
    assert [m["user_id"] for m in top["largest"]] == ["u1"]
    drawn = invoke("report", "--tenant", tenant, "--days", "3", "--url", url)
    assert "Confidence" in drawn and "█" in drawn and "Largest memories" in drawn

    # the README's query, in plain SQL, on both databases
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            result = conn.execute(
                sa.text(
                    "SELECT category, facts, round(avg_confidence * 100) AS pct "
                    "FROM memory_report_categories WHERE tenant_id = :t ORDER BY facts DESC, "
                    "category"
                ),
                {"t": tenant},
            ).all()
    finally:
        engine.dispose()
    assert [(category, facts) for category, facts, _ in result] == [
        ("preference", 3),
        ("context", 2),
        ("knowledge", 1),
    ]
    assert [int(pct) for _, _, pct in result][::2] == [57, 35]
