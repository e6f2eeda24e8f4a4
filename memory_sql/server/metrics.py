"""``/metrics``: the service's figures in Prometheus' text format (prometheus-client).

Counted as they happen: requests by method, route template and status, with a latency
histogram; updates by outcome; memory-LLM calls, their prompt and completion tokens and a
latency histogram; the parts of its replies refused, by reason (a closed set,
:data:`memory_sql.update.rejections.REASONS`, each shown from 0); version conflicts (of API
writes, and of updates whose saves lost a race).
Read when scraped: secrets redacted in this process, by tenant and kind
(:func:`memory_sql.intake.redact.counted_redactions`); the conversations spooled in this
process while the database is down; and
the queue's rows by status and the age of its oldest pending row (every tenant's), read from
the database at most every :data:`QUEUE_SAMPLE_SECONDS` however often it is scraped. Labels
come from closed sets: methods outside :data:`METHODS` are ``other``, routes are templates.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..intake.redact import counted_redactions
from ..update.rejections import REASONS
from ..update.updater import UpdateResult

logger = logging.getLogger("memory_sql.server")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_LLM_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The HTTP methods counted by name; any other is counted as ``other``."""
QUEUE_SAMPLE_SECONDS = 5.0
"""The queue's gauges are read from the database at most this often, however often scraped."""


def method_label(method: str) -> str:
    """``method`` if it is one of :data:`METHODS`, else ``other``."""
    return method if method in METHODS else "other"


class Metrics:
    """One registry per application (several apps in one process do not mix their figures)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "memory_sql_http_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "memory_sql_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.updates = Counter(
            "memory_sql_updates", "Memory updates run here, by outcome", ["outcome"], registry=r
        )
        self.llm_calls = Counter("memory_sql_llm_calls", "Memory-LLM calls", registry=r)
        self.prompt_tokens = Counter(
            "memory_sql_llm_prompt_tokens", "Prompt tokens of memory-LLM calls", registry=r
        )
        self.completion_tokens = Counter(
            "memory_sql_llm_completion_tokens",
            "Completion tokens of memory-LLM calls",
            registry=r,
        )
        self.llm_seconds = Histogram(
            "memory_sql_llm_call_duration_seconds",
            "Time a memory-LLM call took",
            buckets=_LLM_BUCKETS,
            registry=r,
        )
        self.rejected = Counter(
            "memory_sql_reply_items_rejected",
            "Parts of memory-LLM replies refused (not stored), by reason",
            ["reason"],
            registry=r,
        )
        for reason in REASONS:
            self.rejected.labels(reason)
        self.version_conflicts = Counter(
            "memory_sql_version_conflicts",
            "Saves refused because another writer saved first",
            ["source"],
            registry=r,
        )
        self.reads = Counter(
            "memory_sql_reads",
            "Reads of memories served, by database (primary, or a read replica)",
            ["target"],
            registry=r,
        )
        self.replica_fallbacks = Counter(
            "memory_sql_replica_fallbacks",
            "Reads the replica was not used for, by reason (lag, version, error)",
            ["reason"],
            registry=r,
        )
        self.replica_lag = Gauge(
            "memory_sql_replica_lag_seconds",
            "The read replica's replay lag last measured (seconds)",
            registry=r,
        )
        self.requests.labels("GET", "/metrics", "200")  # shown at 0 from the start

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request. ``method`` is mapped into :data:`METHODS` (else ``other``) and
        ``route`` must be a route template or ``unmatched``: labels come from a closed set, so
        made-up methods and paths cannot grow the registry."""
        method = method_label(method)
        status_label = str(status) if 100 <= status <= 599 else "other"
        self.requests.labels(method, route, status_label).inc()
        self.request_seconds.labels(method, route).observe(seconds)

    def observe_update(self, result: UpdateResult) -> None:
        """The service's ``on_result``: one update's figures."""
        self.updates.labels("ok" if result.ok else "failed").inc()
        for reason, items in result.rejected.items():
            self.rejected.labels(reason if reason in REASONS else "malformed").inc(items)
        if result.llm_called:
            self.llm_calls.inc(result.llm_calls or 1)
            self.prompt_tokens.inc(result.prompt_tokens)
            self.completion_tokens.inc(result.completion_tokens)
            self.llm_seconds.observe(result.llm_seconds)
        lost = result.attempts if result.conflicted else max(result.attempts - 1, 0)
        if lost:
            self.version_conflicts.labels("update").inc(lost)

    def watch(self, service: Any) -> None:
        """Report ``service``'s queue (read at most every :data:`QUEUE_SAMPLE_SECONDS`) and
        spool when scraped."""
        self.queue_collector = _QueueCollector(service)
        self.registry.register(self.queue_collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _QueueCollector(Collector):
    """The queue's rows and oldest age, read at most every :data:`QUEUE_SAMPLE_SECONDS`: a
    scrape within that time of the last reading (or waiting for one in progress) reuses it."""

    def __init__(self, service: Any, interval: float = QUEUE_SAMPLE_SECONDS) -> None:
        self.service = service
        self.interval = interval
        self.readings = 0
        self._lock = threading.Lock()
        self._sampled_at = -float("inf")
        self._sample: tuple[dict[str, int], float] | None = None

    def _queue_sample(self) -> tuple[dict[str, int], float] | None:
        with self._lock:
            if time.monotonic() - self._sampled_at < self.interval:
                return self._sample
            self._sampled_at = time.monotonic()
            try:
                counts = self.service.queue.counts()
                age = self.service.queue.oldest_pending_seconds()
            except Exception as exc:  # a scrape during an outage shows what it can
                logger.warning("metrics: cannot read the queue: %s", " ".join(str(exc).split()))
                self._sample = None
            else:
                self._sample = (counts, age)
            self.readings += 1
            return self._sample

    def collect(self) -> Any:
        spooled = GaugeMetricFamily(
            "memory_sql_spooled_conversations",
            "Conversations waiting in this process for the database",
        )
        spooled.add_metric([], len(self.service.spool))
        yield spooled
        rows = GaugeMetricFamily(
            "memory_sql_queue_rows", "Rows of the update queue, by status", labels=["status"]
        )
        oldest = GaugeMetricFamily(
            "memory_sql_queue_oldest_pending_seconds",
            "Age of the oldest pending update (0: none)",
        )
        sample = self._queue_sample()
        reads = CounterMetricFamily(
            "memory_sql_queue_reads",
            "Times the queue's gauges were read from the database (at most one per interval)",
        )
        reads.add_metric([], self.readings)
        yield reads
        trimmed = CounterMetricFamily(
            "memory_sql_queue_trimmed_messages",
            "Messages cut (oldest first) from queue rows over their caps, since start",
        )
        trimmed.add_metric([], self.service.queue.trimmed_messages)
        yield trimmed
        held = CounterMetricFamily(
            "memory_sql_updates_over_budget",
            "Updates held back, their tenant's daily LLM budget used up (they wait), since start",
        )
        held.add_metric([], self.service.budget.refused)
        yield held
        redacted = CounterMetricFamily(
            "memory_sql_redactions",
            "Secrets replaced by placeholders in this process since start (at intake and on "
            "writes), by tenant and kind; never the secret itself",
            labels=["tenant", "kind"],
        )
        for (tenant, kind), number in sorted(counted_redactions().items()):
            redacted.add_metric([tenant, kind], number)
        yield redacted
        if sample is None:
            return
        counts, age = sample
        for status in ("pending", "failed", "leased", "due"):
            rows.add_metric([status], counts[status])
        oldest.add_metric([], age)
        yield rows
        yield oldest
