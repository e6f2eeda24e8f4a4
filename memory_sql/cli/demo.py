"""``memory-sql demo``: the system at work on a SQLite file, with no setup."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from .. import migrations
from ..database import create_engine, redacted, resolve_url
from ..models import Fact, MemoryDocument
from ..storage import open_storage
from ._common import app, command, out


@command(app, "demo")
def demo(
    url: Annotated[
        str, typer.Option("--url", help="Where to store the demo memory.")
    ] = "sqlite:///memory_sql_demo.db",
) -> None:
    """Store a sample memory on a SQLite file, read it back, and show it.

    Example:
        memory-sql demo
    """
    engine = create_engine(url)
    try:
        migrations.upgrade(engine)
    finally:
        engine.dispose()
    scope = {"user_id": "demo-user", "agent_name": "coder"}
    with open_storage(resolve_url(url).render_as_string(hide_password=False)) as storage:
        doc = storage.load(**scope)
        doc.user.work_context.summary = "Backend engineer building data pipelines in Python."
        doc.user.top_of_mind.summary = "Moving a memory service from JSON files to PostgreSQL."
        for content, category, confidence in [
            ("Prefers concise answers with code first", "preference", 0.92),
            ("Works mostly with PostgreSQL and SQLAlchemy", "context", 0.85),
            ("喜欢用中文讨论架构设计", "preference", 0.8),
        ]:
            if all(f.key != Fact(content=content).key for f in doc.facts):
                doc.facts.append(Fact(content=content, category=category, confidence=confidence))
        version = storage.save(doc, **scope)
        stored = storage.load(**scope)
    out.print(f"Stored the memory of demo-user/coder in {redacted(resolve_url(url))}")
    out.print(f"version {version}; loaded back: {_describe(stored)}")
    table = Table("category", "confidence", "fact")
    for fact in sorted(stored.facts, key=lambda f: -f.confidence):
        table.add_row(fact.category, f"{fact.confidence:.2f}", fact.content)
    out.print(table)
    out.print_json(json.dumps(stored.to_deerflow(), ensure_ascii=False))


def _describe(doc: MemoryDocument) -> str:
    sections = sum(1 for s in doc.sections().values() if s.summary)
    return f"{sections} sections, {len(doc.facts)} facts"
