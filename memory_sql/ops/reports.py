"""The reporting views and the tenant report built from them.

The queries live in :mod:`memory_sql.storage.reports` (SQL stays in ``storage/``); the views
are their tables, and :func:`build_report` takes the storage (an engine is taken as it is).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from sqlalchemy.engine import Engine

from ..storage import reports
from ..storage.base import MemoryStorage
from ..storage.capabilities import engine_for
from ..storage.reports import BUCKETS as BUCKETS
from ..storage.reports import VIEW_NAMES as VIEW_NAMES
from ..storage.reports import activity_view as activity_view
from ..storage.reports import categories_view as categories_view
from ..storage.reports import confidence_view as confidence_view
from ..storage.reports import largest_view as largest_view
from ..storage.reports import llm_rejections_view as llm_rejections_view
from ..storage.reports import llm_usage_view as llm_usage_view
from ..storage.reports import queue_view as queue_view
from ..storage.reports import redactions_view as redactions_view
from ..storage.reports import superseded_view as superseded_view


def build_report(
    storage: MemoryStorage | Engine,
    *,
    tenant_id: str | None = None,
    days: int = 14,
    largest: int = 10,
    today: date | None = None,
) -> dict[str, Any]:
    """:func:`memory_sql.storage.reports.build_report` on ``storage``."""
    engine = engine_for(storage, needed_by="the report")
    return reports.build_report(
        engine, tenant_id=tenant_id, days=days, largest=largest, today=today
    )
