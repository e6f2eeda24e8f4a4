"""A daily budget of memory-LLM calls and tokens per tenant, checked before each call.

:class:`LLMBudget` answers, before an update asks the LLM, whether the update's tenant has
used up its ``llm_daily_calls_per_tenant`` calls or ``llm_daily_tokens_per_tenant`` tokens
(prompt + completion) of the current UTC day; 0 means no limit. The day's usage is read from
``memory_llm_calls`` (every process's calls, as :mod:`memory_sql.ops.reports` reports them in
``memory_report_llm_usage``), at most every :data:`REREAD_SECONDS` per tenant, with this
process's own calls since that reading added, so a burst cannot run far past the limit.

An update over budget is not run and not lost: the worker gives its row back to wait (its
attempt not counted), with a note saying so as its ``last_error``, until the budget allows it
(the next UTC day, or a higher limit), re-checked every :data:`RECHECK_SECONDS`. Each hold is
counted per tenant and day in ``memory_llm_budget_holds`` (revision 0012), which
``memory_report_llm_usage`` shows as ``held_over_budget``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Engine

from ..models import utcnow
from ..storage import llm_usage

logger = logging.getLogger(__name__)

REREAD_SECONDS = 5.0
"""How long one reading of a tenant's usage of the day is used (plus this process's calls)."""
RECHECK_SECONDS = 600.0
"""How long an update over budget waits before the budget is checked again for it."""


@dataclass
class _Usage:
    day: str
    calls: int
    tokens: int
    read_at: float


class LLMBudget:
    """See the module docstring. ``engine`` holds ``memory_llm_calls`` (None: only this
    process's calls are counted). Thread-safe."""

    def __init__(self, engine: Engine | None, *, daily_calls: int, daily_tokens: int) -> None:
        self.engine = engine
        self.daily_calls = daily_calls
        self.daily_tokens = daily_tokens
        self.refused = 0
        """Updates held back by the budget since start."""
        self._usage: dict[str, _Usage] = {}
        self._lock = threading.Lock()

    @property
    def limited(self) -> bool:
        return self.daily_calls > 0 or self.daily_tokens > 0

    def over(self, tenant_id: str, *, now: datetime | None = None) -> str | None:
        """None if ``tenant_id`` may call the LLM now, else why not (a sentence naming the
        limit and when it resets)."""
        if not self.limited:
            return None
        now = now or utcnow()
        usage = self._current(tenant_id, now)
        if self.daily_calls and usage.calls >= self.daily_calls:
            used = f"{usage.calls} of llm_daily_calls_per_tenant {self.daily_calls} calls"
        elif self.daily_tokens and usage.tokens >= self.daily_tokens:
            used = f"{usage.tokens} of llm_daily_tokens_per_tenant {self.daily_tokens} tokens"
        else:
            return None
        return (
            f"over the tenant's daily memory-LLM budget ({used} used today): the update waits "
            f"until {next_day(now).strftime('%Y-%m-%dT%H:%MZ')}"
        )

    def hold(self, tenant_id: str, reason: str, *, now: datetime | None = None) -> None:
        """Count an update of ``tenant_id`` held back for ``reason`` (what :meth:`over` said):
        here, and in the day's row of ``memory_llm_budget_holds``. A failure to write the
        count is logged, never raised: the update waits all the same."""
        now = now or utcnow()
        with self._lock:
            self.refused += 1
        if self.engine is None:
            return
        try:
            llm_usage.count_hold(self.engine, tenant_id, now.date(), now, reason)
        except Exception as exc:
            logger.warning("memory_sql: cannot count a hold of tenant %r: %s", tenant_id, exc)

    def spent(self, tenant_id: str, calls: int, tokens: int) -> None:
        """This process's call, counted until the next reading of the table."""
        if not self.limited:
            return
        with self._lock:
            usage = self._usage.get(tenant_id)
            if usage is not None:
                usage.calls += calls
                usage.tokens += tokens

    def wait_seconds(self, *, now: datetime | None = None) -> float:
        """How long an update over budget waits before it is checked again."""
        now = now or utcnow()
        return min(max((next_day(now) - now).total_seconds(), 1.0), RECHECK_SECONDS)

    def _current(self, tenant_id: str, now: datetime) -> _Usage:
        day = now.date().isoformat()
        with self._lock:
            usage = self._usage.get(tenant_id)
            fresh = usage is not None and usage.day == day
            if fresh and time.monotonic() - usage.read_at < REREAD_SECONDS:  # type: ignore[union-attr]
                return usage  # type: ignore[return-value]
        calls, tokens = self._read(tenant_id, now)
        with self._lock:
            usage = _Usage(day, calls, tokens, time.monotonic())
            self._usage[tenant_id] = usage
            return usage

    def _read(self, tenant_id: str, now: datetime) -> tuple[int, int]:
        if self.engine is None:
            usage = self._usage.get(tenant_id)
            today = now.date().isoformat()
            return (usage.calls, usage.tokens) if usage and usage.day == today else (0, 0)
        start = datetime.combine(now.date(), datetime.min.time(), tzinfo=now.tzinfo)
        return llm_usage.usage_since(self.engine, tenant_id, start)


def next_day(now: datetime) -> datetime:
    """The start of the UTC day after ``now``'s."""
    return datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=now.tzinfo)
