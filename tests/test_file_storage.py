"""What only the JSON-file store promises: DeerFlow's file layout and shape, atomic writes, an
mtime/size-validated cache, and a clear error for a corrupt file."""

from __future__ import annotations

import json
import os

import pytest

from memory_sql import Fact, MemoryDocument, Scope, StorageError
from memory_sql.storage import FileStorage


@pytest.fixture
def files(tmp_path):
    return FileStorage(tmp_path / "mem")


def test_one_deerflow_memory_json_per_scope(files, tmp_path):
    doc = files.load(user_id="alice", agent_name="Coder")
    doc.facts = [Fact(content="Prefers dark mode", category="preference", confidence=0.9)]
    doc.user.top_of_mind.summary = "Preparing a talk."
    files.save(doc, user_id="alice", agent_name="Coder")
    files.save(MemoryDocument(facts=[Fact(content="No agent")]), user_id="alice", agent_name=None)
    path = tmp_path / "mem" / "default" / "alice" / "coder" / "memory.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["revision"] == 1
    assert data["user"]["topOfMind"]["summary"] == "Preparing a talk."
    assert data["facts"][0]["content"] == "Prefers dark mode"
    assert data["facts"][0]["createdAt"].endswith("Z")
    assert MemoryDocument.from_deerflow(data).facts[0].confidence == 0.9
    assert (tmp_path / "mem" / "default" / "alice" / "_default" / "memory.json").is_file()
    leftovers = [p for p in (tmp_path / "mem").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_the_cache_notices_a_file_changed_behind_its_back(files, tmp_path):
    doc = files.load(user_id="bob")
    doc.facts = [Fact(content="first")]
    files.save(doc, user_id="bob")
    assert [f.content for f in files.load(user_id="bob").facts] == ["first"]
    path = files.path(files_scope("bob"))
    data = json.loads(path.read_text())
    data["facts"][0]["content"] = "edited by hand, longer"
    path.write_text(json.dumps(data))
    os.utime(path, ns=(1, 1))
    assert [f.content for f in files.load(user_id="bob").facts] == ["edited by hand, longer"]


def test_a_corrupt_file_is_an_error_not_an_empty_memory(files):
    doc = files.load(user_id="carol")
    doc.facts = [Fact(content="precious")]
    files.save(doc, user_id="carol")
    path = files.path(files_scope("carol"))
    path.write_text('{"facts": [ truncated')
    with pytest.raises(StorageError, match="corrupt"):
        files.load(user_id="carol")
    with pytest.raises(StorageError):
        files.save(MemoryDocument(facts=[Fact(content="x")]), user_id="carol", expected_version=1)
    assert path.read_text() == '{"facts": [ truncated'


def files_scope(user: str) -> Scope:
    return Scope.of(user_id=user)
