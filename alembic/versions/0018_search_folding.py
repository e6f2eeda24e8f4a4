"""The searchable text of facts recomputed for the tokenizer of issue #31: accents folded
(``cafe`` finds "Café" and ``café`` "cafe"), combining marks kept in their words (Indic vowel
signs no longer cut a word in pieces), Thai, Lao, Khmer and Myanmar cut into pairs of
characters (:mod:`memory_sql.text_search`).

Only facts whose content holds a character beyond ASCII can change, so only those are read and
written again (found by comparing the content's length in characters and in bytes); the index
follows from ``search_text`` as revision 0011 made it: PostgreSQL regenerates ``search_vector``
for each row written, SQLite's FTS5 triggers replace the row's terms. No schema changes.

The downgrade writes those facts' text back as the tokenizer before this revision cut it (kept
here as :func:`_previous_search_text`).

Revision ID: 0018
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

from memory_sql.text_search import MAX_TERM_CHARS, search_text, stem

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

BATCH_SIZE = 1000

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
_BEYOND_ASCII = {
    "postgresql": "octet_length(content) <> char_length(content)",
    "sqlite": "length(CAST(content AS BLOB)) <> length(content)",
}


def upgrade() -> None:
    _rewrite(search_text)


def downgrade() -> None:
    _rewrite(_previous_search_text)


def _rewrite(make: Callable[[str], str]) -> None:
    """Write ``make(content)`` as the ``search_text`` of every fact whose content is not all
    ASCII and whose text differs, a batch at a time in key order."""
    bind = op.get_bind()
    columns = [getattr(_facts.c, name) for name in _KEY]
    beyond = sa.text(_BEYOND_ASCII[bind.dialect.name])
    read = (
        sa.select(*columns, _facts.c.content, _facts.c.search_text)
        .where(beyond)
        .order_by(*columns)
        .limit(BATCH_SIZE)
    )
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
        changed = [
            {**{f"k_{name}": row[i] for i, name in enumerate(_KEY)}, "text": text}
            for row in rows
            if (text := make(row[4])) != row[5]
        ]
        if changed:
            bind.execute(write, changed)
        after = tuple(rows[-1][:4])


# The tokenizer of revisions 0011 to 0015: NFKC and casefold, CJK characters one term each,
# words runs of letters and digits (combining marks split them), light English stem.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0002fa1f"
)
_PREVIOUS_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


def _previous_search_text(content: str) -> str:
    folded = unicodedata.normalize("NFKC", content).casefold()
    return " ".join(stem(token[:MAX_TERM_CHARS]) for token in _PREVIOUS_TOKEN.findall(folded))
