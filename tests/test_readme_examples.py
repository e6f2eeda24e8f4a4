"""The documentation's Python examples run as written: every ```python block of the Python,
Recall and LangChain pages, in that (the site's) order, in one folder holding the
Configuration page's ```yaml block as config.yaml, with ``MEMORY_SQL_*`` variables pointing
the config at a temporary SQLite file and the scripted chat-completions server. (The
getting-started page's example runs in tests/test_docs_getting_started.py, the client's in
tests/test_readme_service.py.)"""

from __future__ import annotations

import json
import os

import pytest
from doc_pages import blocks as page_blocks
from llm_server import LABELS, ScriptedLLM

from memory_sql import MemoryService, open_storage

PAGES = ("python.md", "recall.md", "langchain.md")
CONFIG_PAGE = "settings.md"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
UPDATE = json.dumps(
    {
        "user": {"workContext": {"summary": "Deploys web apps", "shouldUpdate": True, **LABELS}},
        "history": {},
        "newFacts": [
            {"content": "Deploys with pnpm", "category": "preference", "confidence": 0.9, **LABELS}
        ],
        "factsToRemove": [],
    }
)


def blocks(language: str) -> list[str]:
    pages = (CONFIG_PAGE,) if language == "yaml" else PAGES
    return page_blocks(language, *pages)


def test_the_pages_have_python_examples_and_a_config():
    assert [len(page_blocks("python", page)) for page in PAGES] == [2, 1, 1]
    assert len(blocks("yaml")) == 1
    assert page_blocks("python", "README.md") == []  # the README shows none it does not test


def test_the_pages_python_examples_run_as_written(tmp_path, monkeypatch):
    if not IN_CI:
        pytest.importorskip("langchain")  # the LangChain example needs the extra
    database = tmp_path / "readme.db"
    (tmp_path / "config.yaml").write_text(blocks("yaml")[0], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "MEMORY_SQL_")):
            monkeypatch.delenv(name)
    namespace: dict[str, object] = {"__name__": "readme"}
    with ScriptedLLM() as llm:
        llm.responder = lambda body: UPDATE
        monkeypatch.setenv("MEMORY_SQL_DATABASE_URL", f"sqlite:///{database}")
        monkeypatch.setenv("MEMORY_SQL_MODEL_NAME", "test-model")
        monkeypatch.setenv("MEMORY_SQL_LLM_BASE_URL", llm.base_url)
        monkeypatch.setenv("MEMORY_SQL_LLM_API_KEY", "sk-test")
        try:
            for number, code in enumerate(blocks("python"), 1):
                exec(compile(code, f"docs python block {number}", "exec"), namespace)
        finally:
            for value in namespace.values():
                if isinstance(value, MemoryService):
                    value.close()
        assert llm.requests, "the examples never reached the LLM"

    # What the first example learned, in the database the environment named.
    with open_storage(f"sqlite:///{database}") as storage:
        doc = storage.load(user_id="u1", agent_name="coder")
    assert [f.content for f in doc.facts] == ["Deploys with pnpm"]
    assert "Deploys with pnpm" in str(namespace["system_prompt"])
    assert namespace["failed"] == []
    # The storage example's own SQLite file, created with its schema on first open.
    with open_storage("sqlite:///memory.db") as storage:
        facts = storage.load(user_id="u1", agent_name="coder").facts
    assert [f.content for f in facts] == ["Prefers tabs"]
