"""The reporting views and the tenant report built from them.

The queries live in :mod:`memory_sql.storage.reports` (SQL stays in ``storage/``); these
are their names in ``ops``.
"""

from __future__ import annotations

from ..storage.reports import BUCKETS as BUCKETS
from ..storage.reports import VIEW_NAMES as VIEW_NAMES
from ..storage.reports import activity_view as activity_view
from ..storage.reports import build_report as build_report
from ..storage.reports import categories_view as categories_view
from ..storage.reports import confidence_view as confidence_view
from ..storage.reports import largest_view as largest_view
from ..storage.reports import llm_rejections_view as llm_rejections_view
from ..storage.reports import llm_usage_view as llm_usage_view
from ..storage.reports import queue_view as queue_view
from ..storage.reports import superseded_view as superseded_view
