"""Facts found across memories by their text (and filters).

The queries live in :mod:`memory_sql.storage.fact_search` (SQL stays in ``storage/``); these
are their names in ``ops``.
"""

from __future__ import annotations

from ..storage.fact_search import FactRecord as FactRecord
from ..storage.fact_search import _search_statement as _search_statement
from ..storage.fact_search import search_facts as search_facts
