"""Facts found across memories by their text (and filters).

The queries live in :mod:`memory_sql.storage.fact_search` (SQL stays in ``storage/``); the
facts they return are shown here with any secret stored before redaction existed replaced
(:mod:`memory_sql.intake.redact`).
"""

from __future__ import annotations

import functools
from typing import Any

from ..intake.redact import DEFAULT
from ..models import copy_model
from ..storage import fact_search
from ..storage.fact_search import FactRecord as FactRecord
from ..storage.fact_search import _search_statement as _search_statement


@functools.wraps(fact_search.search_facts)
def search_facts(*args: Any, **kwargs: Any) -> list[FactRecord]:
    return [_shown(record) for record in fact_search.search_facts(*args, **kwargs)]


def _shown(record: FactRecord) -> FactRecord:
    content = DEFAULT(record.fact.content)
    if content == record.fact.content:
        return record
    fact = copy_model(record.fact, content=content)
    return FactRecord(record.tenant_id, record.user_id, record.agent_name, fact)


__all__ = ["FactRecord", "search_facts"]
