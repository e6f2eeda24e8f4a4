"""``memory-sql import --deerflow-dir`` on DeerFlow folders built here in both layouts (June:
a memory.json per memory; August: user summaries plus a Markdown file per fact), on SQLite and
PostgreSQL: the right memories, sources and times kept, idempotent, what is not memory
skipped with its reason, and a corrupt file reported with nothing written."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from deerflow_gateway import check_document
from typer.testing import CliRunner

from memory_sql import open_storage
from memory_sql.cli import app
from memory_sql.integrations.deerflow import folders

runner = CliRunner()
SUMMARIES = {
    "workContext": {"summary": "Data engineer.", "updatedAt": "2026-08-01T09:00:00.000000Z"},
    "personalContext": {"summary": "", "updatedAt": ""},
    "topOfMind": {"summary": "Moving to DuckDB.", "updatedAt": "2026-08-02T09:00:00.000000Z"},
}
HISTORY = {
    "recentMonths": {"summary": "Built the ETL.", "updatedAt": "2026-08-01T09:00:00.000000Z"},
    "earlierContext": {"summary": "", "updatedAt": ""},
    "longTermBackground": {"summary": "", "updatedAt": ""},
}


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")


def june_memory(*facts: dict[str, Any], summary: str = "Data engineer.") -> dict[str, Any]:
    user = {**SUMMARIES, "workContext": {"summary": summary, "updatedAt": ""}}
    return {
        "version": "1.0",
        "lastUpdated": "2026-06-20T10:00:00.000000Z",
        "user": user,
        "history": HISTORY,
        "facts": list(facts),
    }


def fact(fact_id: str, content: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": fact_id,
        "content": content,
        "category": "preference",
        "confidence": 0.9,
        "createdAt": "2026-06-01T08:00:00.000000Z",
        "source": "thread-june",
        **fields,
    }


def write_fact_md(user_dir: Path, agent: str, metadata: dict[str, Any], content: str) -> Path:
    """A fact as DeerMem v2 writes it: front matter, closing ---, a # title, the content."""
    fact_id = metadata["id"]
    shard = hashlib.sha256(fact_id.encode()).hexdigest()[:2]
    path = user_dir / "agents" / agent / "facts" / shard / f"{fact_id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    front = yaml.safe_dump(metadata, allow_unicode=True, sort_keys=False).strip()
    title = content.splitlines()[0][:160]
    path.write_text(f"---\n{front}\n---\n\n# {title}\n\n{content}\n", encoding="utf-8")
    return path


def md_fact(fact_id: str, user_id: str, agent: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": fact_id,
        "category": "preference",
        "confidence": 0.9,
        "status": "active",
        "topics": ["tools"],
        "revision": 1,
        "createdAt": "2026-08-01T08:00:00.000000Z",
        "updatedAt": "2026-08-01T08:00:00.000000Z",
        "schemaVersion": 2,
        "source": {"type": "conversation", "threadId": "thread-aug"},
        "user_id": user_id,
        "agent_name": agent,
        **fields,
    }


def build_june(root: Path) -> None:
    write_json(root / "memory.json", june_memory(fact("fact_g1", "Global fact")))
    write_json(
        root / "agents" / "researcher" / "memory.json",
        june_memory(fact("fact_r1", "Cites sources", source="manual")),
    )
    (root / "agents" / "researcher" / "config.yaml").write_text("name: researcher\n")
    (root / "agents" / "researcher" / "SOUL.md").write_text("Be curious.\n")
    write_json(
        root / "users" / "alice" / "memory.json",
        june_memory(
            fact("fact_a1", "Prefers tabs"),
            fact("fact_a2", "PREFERS TABS", confidence=0.5),  # a casefold duplicate
            summary="Alice builds pipelines.",
        ),
    )
    write_json(
        root / "users" / "alice" / "agents" / "coder" / "memory.json",
        june_memory(
            fact("fact_c1", "Uses pnpm", category="correction", sourceError="suggested npm"),
            fact("fact_c2", "Likes Rust", source="import", createdAt=""),
            summary="Alice codes in Rust.",
        ),
    )
    (root / "users" / "alice" / "memory.json.tmp").write_text("{")


def build_august(root: Path) -> None:
    bob = root / "users" / "bob"
    write_json(
        bob / "memory.json",
        {
            "version": "2.0",
            "revision": 7,
            "lastUpdated": "2026-08-03T09:00:00.000000Z",
            "user": SUMMARIES,
            "history": HISTORY,
        },
    )
    (bob / ".memory.journal.json").write_text("{}")
    (bob / "memory.json.v1.bak").write_text("{}")
    write_fact_md(bob, "__default__", md_fact("fact_d1", "bob", None), "Uses DuckDB")
    write_fact_md(
        bob,
        "coder",
        md_fact("fact_k1", "bob", "coder", source={"type": "manual", "threadId": None}),
        "Prefers uv over pip",
    )
    write_fact_md(
        bob,
        "coder",
        md_fact(
            "fact_k2",
            "bob",
            "coder",
            category="other",
            categoryExtension="knowledge",
            sourceError="assumed Poetry",
            confidence=0.75,
        ),
        "Knows the Polars API\nwell, across versions",
    )
    metadata = bob / "agents" / "coder" / ".metadata"
    metadata.mkdir()
    (metadata / "fact-usage.json").write_text("{}")
    (bob / "agents" / "coder" / "facts" / "zz").mkdir()
    (bob / "agents" / "coder" / "facts" / "zz" / "fact_x.md.tmp").write_text("---")
    # A user id with characters outside [A-Za-z0-9_-]: the folder is a digest of it.
    raw = "carol@example.com"
    carol = root / "users" / folders.safe_user_id(raw)
    write_fact_md(carol, "__default__", md_fact("fact_e1", raw, None), "Writes Go")


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["import", *args], catch_exceptions=False)


def memories(url: str, tenant: str = "default") -> dict[tuple[str, str | None], dict[str, Any]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            keys = conn.execute(
                sa.text("SELECT user_id, agent_name FROM memory_scopes WHERE tenant_id = :t"),
                {"t": tenant},
            ).all()
    finally:
        engine.dispose()
    with open_storage(url) as storage:
        return {
            (user, agent or None): storage.load(
                user_id=user, agent_name=agent or None, tenant_id=tenant
            ).to_deerflow()
            for user, agent in keys
        }


def test_the_june_layout(tmp_path: Path, own_database: str) -> None:
    root = tmp_path / "deer-flow"
    build_june(root)
    done = invoke("--deerflow-dir", str(root), "--url", own_database)
    assert done.exit_code == 0, done.output
    assert (
        f"imported 4 memories from {root}: 2 users, 2 agents, 5 facts; 4 changed, 0 unchanged"
        in done.stdout
    )
    assert "users/alice/memory.json: fact fact_a2 duplicates fact fact_a1" in done.stdout
    assert "agents/researcher/config.yaml: the agent's definition, not memory" in done.stdout
    assert "users/alice/memory.json.tmp: a temporary file" in done.stdout

    stored = memories(own_database)
    assert set(stored) == {
        ("default", None),
        ("default", "researcher"),
        ("alice", None),
        ("alice", "coder"),
    }
    coder = stored[("alice", "coder")]
    check_document(coder)
    assert coder["user"]["workContext"]["summary"] == "Alice codes in Rust."
    by_id = {f["id"]: f for f in coder["facts"]}
    assert by_id["fact_c1"]["source"] == "thread-june"
    assert by_id["fact_c1"]["sourceError"] == "suggested npm"
    assert by_id["fact_c1"]["createdAt"] == "2026-06-01T08:00:00.000000Z"
    assert by_id["fact_c2"]["source"] == "import" and by_id["fact_c2"]["createdAt"]
    assert stored[("default", "researcher")]["facts"][0]["source"] == "manual"
    assert [f["content"] for f in stored[("alice", None)]["facts"]] == ["Prefers tabs"]

    again = invoke("--deerflow-dir", str(root), "--url", own_database)
    assert again.exit_code == 0, again.output
    assert "4 memories" in again.stdout and "0 changed, 4 unchanged" in again.stdout
    assert memories(own_database) == stored  # versions and times as they were


def test_the_august_layout(tmp_path: Path, own_database: str) -> None:
    root = tmp_path / "deer-flow"
    build_august(root)
    done = invoke("--deerflow-dir", str(root), "--url", own_database, "--tenant", "acme")
    assert done.exit_code == 0, done.output
    assert "3 memories" in done.stdout and "2 users, 1 agent, 4 facts" in done.stdout
    out = done.stdout
    assert "users/bob/.memory.journal.json: a journal of an unfinished DeerFlow write" in out
    assert "users/bob/memory.json.v1.bak: a backup" in out
    assert "users/bob/agents/coder/.metadata: DeerMem's usage and audit sidecar" in out
    assert "fact_x.md.tmp: a temporary file" in out

    stored = memories(own_database, tenant="acme")
    assert set(stored) == {("bob", None), ("bob", "coder"), ("carol@example.com", None)}
    for document in stored.values():
        check_document(document)
    bob, coder = stored[("bob", None)], stored[("bob", "coder")]
    # the user's summaries go with the memory of no agent and with each agent's
    for document in (bob, coder):
        assert document["user"]["workContext"] == SUMMARIES["workContext"]
        assert document["history"]["recentMonths"]["summary"] == "Built the ETL."
    assert [(f["id"], f["content"], f["source"]) for f in bob["facts"]] == [
        ("fact_d1", "Uses DuckDB", "thread-aug")
    ]
    by_id = {f["id"]: f for f in coder["facts"]}
    assert by_id["fact_k1"]["source"] == "manual"
    assert by_id["fact_k2"]["content"] == "Knows the Polars API\nwell, across versions"
    assert by_id["fact_k2"]["category"] == "knowledge"  # DeerMem's other + extension
    assert by_id["fact_k2"]["sourceError"] == "assumed Poetry"
    assert by_id["fact_k2"]["createdAt"] == "2026-08-01T08:00:00.000000Z"
    assert [f["content"] for f in stored[("carol@example.com", None)]["facts"]] == ["Writes Go"]

    again = invoke("--deerflow-dir", str(root), "--url", own_database, "--tenant", "acme")
    assert "0 changed, 3 unchanged" in again.stdout
    assert memories(own_database, tenant="acme") == stored


def test_both_layouts_in_one_folder(tmp_path: Path, sqlite_url: str) -> None:
    root = tmp_path / "deer-flow"
    build_june(root)
    build_august(root)
    plan = folders.read_folder(root)
    assert plan.problems == []
    assert len(plan.memories) == 7 and plan.users == 4
    result = folders.import_folder(open_storage(sqlite_url), plan)
    assert result.changed == 7


@pytest.mark.parametrize(
    ("corrupt", "reason"),
    [
        (lambda root: (root / "users" / "alice" / "memory.json").write_text("{"), "not JSON"),
        (
            lambda root: (root / "users" / "alice" / "memory.json").write_bytes(b'{"a": "\xff"}'),
            "not UTF-8",
        ),
        (
            lambda root: write_json(
                root / "users" / "alice" / "memory.json",
                june_memory(fact("fact_z", "Sure", confidence="high")),
            ),
            "confidence",
        ),
        (
            lambda root: write_json(
                root / "agents" / "researcher" / "memory.json", june_memory(fact("bad id!", "x"))
            ),
            "fact id",
        ),
        (
            lambda root: write_json(root / "users" / "alice" / "memory.json", ["not", "a", "doc"]),
            "JSON object",
        ),
        (lambda root: _corrupt_md(root, "---\nid: [unclosed\n---\n\n# t\n\nx\n"), "YAML"),
        (lambda root: _corrupt_md(root, "no front matter at all\n"), "front matter"),
        (
            lambda root: _corrupt_md(root, "---\nid: fact_k1\nconfidence: 0.9\n---\n\n# t\n"),
            "without content",
        ),
        (
            lambda root: _corrupt_md(root, "---\nid: fact_other\n---\n\n# t\n\nx\n"),
            "does not match the file name",
        ),
        (
            lambda root: write_json(
                root / "users" / "bob" / "agents" / "coder" / "memory.json", june_memory()
            ),
            "holds both memory.json",
        ),
        (
            lambda root: write_json(root / "users" / "default" / "memory.json", june_memory()),
            "also comes from",
        ),
        (
            lambda root: write_fact_md(
                root / "users" / "bob", "coder", md_fact("fact_k9", "mallory", "coder"), "x"
            ),
            "different users",
        ),
        (
            lambda root: write_json(root / "users" / "-dash" / "memory.json", june_memory()),
            "cannot be stored",
        ),
        (
            lambda root: write_json(
                root / "users" / "alice" / "agents" / "CODER" / "memory.json", june_memory()
            ),
            "a second source of the memory of agent 'coder'",
        ),
        (
            lambda root: write_fact_md(
                root / "users" / "alice", "__default__", md_fact("fact_q", "alice", None), "x"
            ),
            "a second source of the memory of no agent",
        ),
    ],
)
def test_a_corrupt_file_is_reported_and_nothing_is_written(
    tmp_path: Path, own_database: str, corrupt: Any, reason: str
) -> None:
    url = own_database
    root = tmp_path / "deer-flow"
    build_june(root)
    build_august(root)
    corrupt(root)
    done = invoke("--deerflow-dir", str(root), "--url", url)
    assert done.exit_code == 1
    assert reason in done.stderr
    assert "nothing imported" in done.stderr
    assert memories(url) == {} and memories(url, tenant="acme") == {}


def _corrupt_md(root: Path, text: str) -> None:
    path = next((root / "users" / "bob" / "agents" / "coder" / "facts").rglob("fact_k1.md"))
    path.write_text(text, encoding="utf-8")


def test_a_corrupt_file_leaves_no_new_database_behind(tmp_path: Path) -> None:
    root = tmp_path / "deer-flow"
    build_june(root)
    (root / "memory.json").write_text("[", encoding="utf-8")
    database = tmp_path / "new.db"
    done = invoke("--deerflow-dir", str(root), "--url", f"sqlite:///{database}")
    assert done.exit_code == 1 and "memory.json: not JSON" in done.stderr
    assert not database.exists()


def test_the_option_takes_no_file_user_or_agent(tmp_path: Path, sqlite_url: str) -> None:
    for extra in (["--user", "alice"], ["--agent", "coder"], ["memory.json"]):
        done = invoke("--deerflow-dir", str(tmp_path), "--url", sqlite_url, *extra)
        assert done.exit_code == 1 and "--deerflow-dir takes users" in done.stderr
    done = invoke("--deerflow-dir", str(tmp_path / "missing"), "--url", sqlite_url)
    assert done.exit_code == 1 and "No such file or directory" in done.stderr


def test_a_folder_holding_no_memory_is_refused_with_a_hint_and_creates_nothing(
    tmp_path: Path,
) -> None:
    # The classic mistake: DeerFlow's backend/ folder instead of its state folder in it.
    backend = tmp_path / "backend"
    build_june(backend / ".deer-flow")
    (backend / "pyproject.toml").write_text("[project]\n", encoding="utf-8")
    database = tmp_path / "new.db"
    done = invoke("--deerflow-dir", str(backend), "--url", f"sqlite:///{database}")
    assert done.exit_code == 1, done.output
    assert "no DeerFlow memory in this folder" in done.stderr
    assert f"did you mean {backend / '.deer-flow'}?" in " ".join(done.stderr.split())
    assert "imported" not in done.stdout
    assert not database.exists()
    # The folder above it: the hint reaches into backend/.
    done = invoke("--deerflow-dir", str(tmp_path), "--url", f"sqlite:///{database}")
    assert done.exit_code == 1 and "did you mean" in done.stderr
    assert not database.exists()
    # An empty folder with no state folder in it: where DeerFlow keeps its memory.
    empty = tmp_path / "empty"
    empty.mkdir()
    done = invoke("--deerflow-dir", str(empty), "--url", f"sqlite:///{database}")
    assert done.exit_code == 1 and "backend/.deer-flow" in done.stderr
    assert not database.exists()
    # The right folder imports.
    done = invoke("--deerflow-dir", str(backend / ".deer-flow"), "--url", f"sqlite:///{database}")
    assert done.exit_code == 0 and "imported" in done.stdout


def test_a_large_folder_imports_with_a_progress_bar(tmp_path: Path, sqlite_url: str) -> None:
    root = tmp_path / "deer-flow"
    for number in range(40):
        user = root / "users" / f"u{number}"
        write_json(user / "memory.json", {"version": "2.0", "user": SUMMARIES})
        for index in range(5):
            write_fact_md(
                user,
                "coder",
                md_fact(f"fact_{uuid.uuid4().hex[:8]}", f"u{number}", "coder"),
                f"Fact {index} of user {number}",
            )
    done = invoke("--deerflow-dir", str(root), "--url", sqlite_url)
    assert done.exit_code == 0, done.output
    assert "80 memories" in done.stdout and "40 users, 1 agent, 200 facts" in done.stdout
    assert "importing" in done.stderr  # the progress bar
