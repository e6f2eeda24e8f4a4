"""What intake redacted from a conversation, counted for its tenant: in this process (the
``/metrics`` counters, :func:`~memory_sql.intake.redact.count_redactions`) and in the
``memory_redactions`` table (:mod:`memory_sql.storage.redactions`, stage ``intake``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy.engine import Engine

from ..storage.redactions import record_redactions
from ..tenancy import acting_for
from .redact import count_redactions

logger = logging.getLogger(__name__)


def tally_intake_redactions(engine: Engine, tenant_id: str, counts: Mapping[str, int]) -> None:
    """Count ``counts`` (kind → secrets replaced) for ``tenant_id``. Never raises: a database
    away loses the count, never the conversation (logged, without the text)."""
    count_redactions(tenant_id, counts)
    try:
        with acting_for(tenant_id), engine.begin() as conn:
            record_redactions(conn, tenant_id, "intake", counts)
    except Exception as exc:
        logger.warning(
            "memory_sql: redaction counts of tenant %r not recorded (%s)",
            tenant_id,
            type(exc).__name__,
        )
