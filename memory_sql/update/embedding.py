"""Facts embedded after they are saved: the embedding pass and its background thread.

:class:`EmbeddingPass` finds live facts lacking a vector of the configured model (or holding
one older than the fact's last change: :meth:`~memory_sql.storage.vectors.FactVectors.unembedded`)
and embeds them in batches of ``embedding_batch_size``, outside any memory's write transaction;
a fact whose text did not change since its vector was made only has the vector's time moved
on. It serves both ``memory-sql db embed`` and :class:`EmbeddingWorker`.

:class:`EmbeddingWorker` is one daemon thread: the memory of each update just saved is
embedded at once (:meth:`EmbeddingWorker.request`, called by the service after a run), and
every ``embedding_interval_seconds`` every memory is looked through (what failed, a new model,
facts written by other processes). A failed pass waits ``embedding_retry_seconds``, doubled at
each failure in a row up to 64 times, and is counted
(:class:`~memory_sql.embeddings.EmbeddingStats`);
nothing is lost meanwhile: a fact without a vector is ranked by its text alone.

:class:`SemanticParts` is what a service runs semantic recall on: the embedder, the stored
vectors and the thread, built from the configuration (or none of them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from itertools import groupby

from ..config import MemoryConfig
from ..embeddings import Embedder, EmbeddingError
from ..errors import MemorySQLError
from ..scope import Scope
from ..storage.base import MemoryStorage
from ..storage.capabilities import sql_engine
from ..storage.vectors import FactVectors, Unembedded, content_digest
from .dedupe import SemanticDedupe

logger = logging.getLogger(__name__)

MAX_BACKOFF_FACTOR = 64


PAGE_FACTS = 512
"""Facts lacking a vector read at once by a whole pass (embedded a batch at a time)."""


class EmbeddingPass:
    """Embeds what lacks a vector, with ``embedder`` into ``vectors``."""

    def __init__(self, embedder: Embedder, vectors: FactVectors) -> None:
        self.embedder = embedder
        self.vectors = vectors

    def embed_memory(self, scope: Scope) -> int:
        """Embed the facts of ``scope`` lacking a vector; returns how many were embedded.

        Raises:
            EmbeddingError: the endpoint failed (what was embedded before is kept).
            StorageError: the database failed.
        """
        done = 0
        while True:
            batch = self.vectors.unembedded(scope=scope, limit=self.embedder.batch_size)
            if not batch:
                return done
            done += self._embed(batch)

    def embed_all(self, progress: Callable[[int], None] | None = None) -> int:
        """Embed every memory's facts lacking a vector, in key order (resumable: a pass
        stopped halfway finds only what is still missing); ``progress`` is called with each
        batch's size. Returns how many were embedded.

        Raises:
            EmbeddingError: the endpoint failed (what was embedded before is kept).
            StorageError: the database failed.
        """
        done = 0
        after = None
        size = self.embedder.batch_size
        while True:
            # a page of several batches per read: each read scans a page of facts and their
            # vectors, whatever the batch's size
            page = self.vectors.unembedded(limit=max(size, PAGE_FACTS), after=after)
            if not page:
                return done
            last = page[-1]
            after = (last.scope.tenant_id, last.scope.user_id, last.scope.agent_key, last.fact_id)
            for start in range(0, len(page), size):
                batch = page[start : start + size]
                done += self._embed(batch)
                if progress is not None:
                    progress(len(batch))

    def _embed(self, batch: list[Unembedded]) -> int:
        digests = [content_digest(item.content) for item in batch]
        unchanged = [i for i, item in enumerate(batch) if item.stored_digest == digests[i]]
        fresh = [i for i, item in enumerate(batch) if item.stored_digest != digests[i]]
        for scope, items in _by_scope([batch[i] for i in unchanged]):
            self.vectors.touch(scope, [item.fact_id for item in items])
        if not fresh:
            return 0
        rows = self.embedder.embed_batch([batch[i].content for i in fresh])
        by_scope: dict[tuple[str, str, str], list[tuple[str, str, object]]] = {}
        scopes: dict[tuple[str, str, str], Scope] = {}
        for row, index in zip(rows, fresh, strict=True):
            item = batch[index]
            key = (item.scope.tenant_id, item.scope.user_id, item.scope.agent_key)
            scopes[key] = item.scope
            by_scope.setdefault(key, []).append((item.fact_id, digests[index], row))
        for key, vectors in by_scope.items():
            self.vectors.write(scopes[key], vectors)
        return len(fresh)


def _by_scope(items: list[Unembedded]) -> list[tuple[Scope, list[Unembedded]]]:
    def key(item: Unembedded) -> tuple[str, str, str]:
        return (item.scope.tenant_id, item.scope.user_id, item.scope.agent_key)

    return [
        (group[0].scope, group)
        for _, g in groupby(sorted(items, key=key), key)
        if (group := list(g))
    ]


class EmbeddingWorker:
    """The background thread running :class:`EmbeddingPass` for a service."""

    def __init__(
        self,
        embedding: EmbeddingPass,
        *,
        interval_seconds: float = 60.0,
        retry_seconds: float = 5.0,
    ) -> None:
        self.embedding = embedding
        self.interval_seconds = interval_seconds
        self.retry_seconds = retry_seconds
        self.embedded = 0
        self.failed_passes = 0
        self._wanted: dict[tuple[str, str, str], Scope] = {}
        self._sweep_due = True
        self._failures = 0
        self._busy = False
        self._condition = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="memory-sql-embed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, scope: Scope) -> None:
        """Embed ``scope``'s new facts soon (after an update saved them). Never raises."""
        with self._condition:
            self._wanted[(scope.tenant_id, scope.user_id, scope.agent_key)] = scope
            self._condition.notify_all()

    def sweep(self) -> None:
        """Look through every memory soon."""
        with self._condition:
            self._sweep_due = True
            self._condition.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is requested and no pass runs; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while self._wanted or self._busy or self._sweep_due:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._condition.wait(min(remaining, 0.05))
            return True

    def stop(self, timeout: float = 5.0) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        next_sweep = time.monotonic()
        while True:
            with self._condition:
                while not self._stopping and not self._wanted and not self._sweep_due:
                    wait = next_sweep - time.monotonic()
                    if wait <= 0:
                        self._sweep_due = True
                        break
                    self._condition.wait(wait)
                if self._stopping:
                    return
                sweep, self._sweep_due = self._sweep_due, False
                wanted, self._wanted = list(self._wanted.values()), {}
                self._busy = True
            try:
                if sweep:
                    self.embedded += self.embedding.embed_all()
                    next_sweep = time.monotonic() + self.interval_seconds
                else:
                    for scope in wanted:
                        self.embedded += self.embedding.embed_memory(scope)
                self._failures = 0
            except (EmbeddingError, MemorySQLError) as exc:
                self._failed(exc, wanted, sweep)
            except Exception as exc:  # never let the thread die
                logger.exception("memory_sql: the embedding pass crashed")
                self._failed(exc, wanted, sweep)
            finally:
                with self._condition:
                    self._busy = False
                    self._condition.notify_all()

    def _failed(self, exc: BaseException, wanted: list[Scope], sweep: bool) -> None:
        self.failed_passes += 1
        self._failures += 1
        wait = self.retry_seconds * min(2 ** (self._failures - 1), MAX_BACKOFF_FACTOR)
        logger.warning("memory_sql: embedding facts failed (%s); trying again in %.0f s", exc, wait)
        with self._condition:
            for scope in wanted:
                self._wanted.setdefault((scope.tenant_id, scope.user_id, scope.agent_key), scope)
            self._sweep_due = self._sweep_due or sweep
            self._busy = False
            self._condition.notify_all()
            deadline = time.monotonic() + wait
            while not self._stopping and (remaining := deadline - time.monotonic()) > 0:
                self._condition.wait(remaining)


class SemanticParts:
    """Semantic recall's parts for a service (docs/semantic-recall.md): the ``embedder``, the
    facts' stored ``vectors`` and the ``worker`` embedding each saved update's facts. All None
    when ``config`` names no embedding endpoint, ``vectors`` and ``worker`` None too when the
    storage keeps no vectors (a folder of files)."""

    def __init__(self, config: MemoryConfig, storage: MemoryStorage) -> None:
        self.embedder = Embedder.from_config(config)
        engine = sql_engine(storage)
        self.vectors = (
            FactVectors(engine, self.embedder.key)
            if self.embedder is not None and engine is not None
            else None
        )
        self.worker = (
            EmbeddingWorker(
                EmbeddingPass(self.embedder, self.vectors),
                interval_seconds=config.embedding.interval_seconds,
                retry_seconds=config.embedding.retry_seconds,
            )
            if self.embedder is not None and self.vectors is not None
            else None
        )
        self.dedupe = (
            SemanticDedupe(self.embedder, self.vectors, config.update.dedupe_cosine)
            if self.embedder is not None and self.vectors is not None
            else None
        )

    def start(self) -> None:
        if self.worker is not None:
            self.worker.start()

    def saved(self, scope: Scope) -> None:
        """An update saved ``scope``'s memory: embed its new facts soon. Never raises."""
        if self.worker is not None:
            self.worker.request(scope)

    def wait_idle(self, runs_in_flight: Callable[[], int], timeout: float) -> bool:
        """Wait for the runs still finishing (they ask for their vectors just after their
        save's transaction), then for the vectors they asked for; False after ``timeout``."""
        if self.worker is None:
            return True
        started = time.monotonic()
        while runs_in_flight() and time.monotonic() - started < timeout:
            time.sleep(0.01)
        return self.worker.wait_idle(max(timeout - (time.monotonic() - started), 0.0))

    def stats(self) -> dict[str, int]:
        """The embedder's counters (:class:`~memory_sql.embeddings.EmbeddingStats`), or none."""
        return self.embedder.stats.snapshot() if self.embedder is not None else {}

    def stop(self, timeout: float) -> None:
        if self.worker is not None:
            self.worker.stop(timeout)

    def close(self) -> None:
        if self.embedder is not None:
            self.embedder.close()
