"""Texts to vectors through an OpenAI-compatible ``/embeddings`` endpoint (semantic recall).

:class:`Embedder` is the one client: the worker embeds facts in batches with
``embedding_timeout_seconds``; a context or search embeds its query with the short
``embedding_query_timeout_seconds`` and no retry (the ranking is lexical past it). Any endpoint
speaking OpenAI's embeddings API serves (OpenAI, vLLM, llama.cpp, Ollama, TEI, or the local
model of :mod:`memory_sql.demo.embeddings_server`), through the ``openai`` client. Vectors come
back as float32 arrays of unit length (normalised here whatever the endpoint does), so a cosine
is a dot product. :class:`EmbeddingStats` counts what happened, for the metrics.

numpy is imported when first needed (the ``embeddings`` extra).
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import openai

from .config import MemoryConfig
from .errors import MemorySQLError

QUERY_CACHE = 1024
"""How many queries' vectors an :class:`Embedder` keeps."""


class EmbeddingError(MemorySQLError):
    """The embedding endpoint failed, timed out, or answered something unusable."""


@dataclass
class EmbeddingStats:
    """Counts of embedding calls since the process started (read by the metrics)."""

    batches: int = 0
    texts: int = 0
    failures: int = 0
    queries: int = 0
    query_failures: int = 0
    """Queries that fell back to the lexical ranking: past the deadline or failed."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {
                "embedding_batches": self.batches,
                "embedded_texts": self.texts,
                "embedding_failures": self.failures,
                "embedding_queries": self.queries,
                "embedding_query_fallbacks": self.query_failures,
            }


class Embedder:
    """Embeds texts with ``model`` at ``base_url``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        timeout_seconds: float = 30.0,
        query_timeout_seconds: float = 0.3,
        batch_size: int = 64,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.dimensions = dimensions
        self.timeout_seconds = timeout_seconds
        self.query_timeout_seconds = query_timeout_seconds
        self.batch_size = batch_size
        self.stats = EmbeddingStats()
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._queries_lock = threading.Lock()
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or "no-key",
            timeout=timeout_seconds,
            max_retries=0,  # the worker's pass retries with its own backoff
        )

    @classmethod
    def from_config(cls, config: MemoryConfig) -> Embedder | None:
        """The embedder ``config`` sets up, or None when it names no endpoint and model."""
        if config.embedding.base_url is None or config.embedding.model is None:
            return None
        key = config.embedding.api_key
        return cls(
            base_url=config.embedding.base_url,
            model=config.embedding.model,
            api_key=key.get_secret_value() if key is not None else None,
            dimensions=config.embedding.dimensions,
            timeout_seconds=config.embedding.timeout_seconds,
            query_timeout_seconds=config.embedding.query_timeout_seconds,
            batch_size=config.embedding.batch_size,
        )

    @property
    def key(self) -> str:
        """The name vectors are stored under: the model, with its length when one is asked."""
        return self.model if self.dimensions is None else f"{self.model}@{self.dimensions}"

    def __repr__(self) -> str:
        return f"Embedder(model={self.model!r}, base_url={self.base_url!r})"

    def embed(self, texts: list[str], *, timeout: float | None = None) -> Any:
        """Unit vectors of ``texts`` (a float32 array, one row each), in one request.

        Raises:
            EmbeddingError: the endpoint failed, timed out, or answered the wrong count.
        """
        import numpy as np

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        extra: dict[str, Any] = {}
        if self.dimensions is not None:
            extra["dimensions"] = self.dimensions
        client = self._client if timeout is None else self._client.with_options(timeout=timeout)
        try:
            answer = client.embeddings.create(
                model=self.model, input=texts, encoding_format="base64", **extra
            )
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"embeddings at {self.base_url} failed: {_reason(exc)}") from exc
        data = sorted(answer.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise EmbeddingError(
                f"embeddings at {self.base_url}: {len(data)} vectors for {len(texts)} texts"
            )
        try:
            rows = np.stack([_vector(np, item.embedding) for item in data])
        except ValueError as exc:
            raise EmbeddingError(f"embeddings at {self.base_url}: {exc}") from exc
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        if not np.all(np.isfinite(rows)) or np.any(norms == 0):
            raise EmbeddingError(f"embeddings at {self.base_url}: a zero or non-finite vector")
        return (rows / norms).astype(np.float32)

    def embed_batch(self, texts: list[str]) -> Any:
        """:meth:`embed` for the worker: counted, with the batch deadline."""
        try:
            vectors = self.embed(texts)
        except EmbeddingError:
            self.stats.add(failures=1)
            raise
        self.stats.add(batches=1, texts=len(texts))
        return vectors

    def embed_query(self, text: str) -> Any | None:
        """The unit vector of a query, or None past the query deadline or on any failure
        (counted: the caller ranks lexically). The last :data:`QUERY_CACHE` queries' vectors
        are kept (a turn's context and searches often ask the same)."""
        with self._queries_lock:
            vector = self._queries.get(text)
            if vector is not None:
                self._queries.move_to_end(text)
                return vector
        try:
            vector = self.embed([text], timeout=self.query_timeout_seconds)[0]
        except EmbeddingError:
            self.stats.add(queries=1, query_failures=1)
            return None
        self.stats.add(queries=1)
        with self._queries_lock:
            self._queries[text] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def close(self) -> None:
        self._client.close()


def _vector(np: Any, embedding: Any) -> Any:
    if isinstance(embedding, str):  # base64 of little-endian float32
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
    return np.asarray(embedding, dtype=np.float32)


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
