"""A memory's facts matched in process: an inverted index per memory, BM25 as the database's.

A hybrid context (:class:`memory_sql.recall.Recall` with embeddings) asks the text index twice
(the query, then the query's expansion by the best fused facts), and at 10 000 facts each
round trip, with PostgreSQL's texts scored in Python, cost more than the vectors did.
:class:`MemoryTerms` keeps, per memory, its facts' terms as an inverted index (a term → the
facts holding it and how often; the sorted vocabulary for the prefix rule), built from the
loaded memory and valid while its version is unchanged, and answers
:func:`match_memory` from it with numpy: the same facts and scores as
:func:`memory_sql.storage.search.match_facts`, with one matching rule (a query term matches
the words it starts, :mod:`memory_sql.storage.search`).

Scores, BM25 with ``k1`` = 1.2, ``b`` = 0.75:

- ``okapi`` (PostgreSQL's, :func:`memory_sql.storage.search.bm25`): ``idf = ln(1 + (N − n +
  0.5) / (n + 0.5))``, ``N`` the memory's facts, the average length that of the facts holding
  a term;
- ``fts5`` (SQLite's FTS5 ``bm25()``): ``idf = ln((N − n + 0.5) / (n + 0.5))`` (at least
  1e-6), lengths counting the scope term FTS5 stores beside each text. FTS5 counts ``N``, ``n``
  and the average over its whole table (every memory's facts); here they are the memory's own,
  so the two agree exactly when the database holds one memory and otherwise differ in the
  weights, not in which facts match.

Bounded: at most ``max_facts`` facts over all the memories held (200 000 by default, about
40 MB), the least recently used memory dropped first. Building one costs about as long as
tokenizing its facts (0.2–0.7 s for 10 000 facts, once per process and version).
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..models import MemoryDocument
from ..scope import Scope
from ..text_search import search_text
from .search import K1, MAX_MATCHING, B

OKAPI = "okapi"
FTS5 = "fts5"

MAX_INDEXED_FACTS = 200_000
"""Facts held over all the indexes of one :class:`MemoryTerms` (the least recent go first)."""


@dataclass(frozen=True, slots=True)
class _Index:
    version: Any
    ids: list[str]
    id_rank: Any  # numpy int array: each fact's place in the ids' sorted order (ties)
    lengths: Any  # numpy float array: each fact's word count
    words: list[str]  # the vocabulary, sorted
    postings: dict[str, tuple[Any, Any]]  # word → (fact positions, counts)


class MemoryTerms:
    """In-process inverted indexes of memories' facts (see the module docstring); safe to
    share between threads."""

    def __init__(self, formula: str = OKAPI, *, max_facts: int = MAX_INDEXED_FACTS) -> None:
        if formula not in (OKAPI, FTS5):
            raise ValueError(f"formula {formula!r} is not {OKAPI} or {FTS5}")
        self.formula = formula
        self.max_facts = max_facts
        self.builds = 0
        self._indexes: OrderedDict[Scope, _Index] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def match_memory(
        self, doc: MemoryDocument, scope: Scope, terms: Sequence[str], *, limit: int = 100
    ) -> list[tuple[str, float]]:
        """Up to ``limit`` facts of ``doc`` (the memory of ``scope``) holding any of ``terms``
        (each also as a prefix), with their BM25 scores, best first (ties by fact id)."""
        import numpy as np

        wanted = list(dict.fromkeys(terms))
        if not wanted or not doc.facts or limit <= 0:
            return []
        index = self._index(doc, scope)
        count = len(index.ids)
        frequencies = []
        for term in wanted:
            tf = _term_frequencies(np, index, term, count)
            if tf is not None:
                frequencies.append(tf)
        if not frequencies:
            return []
        held = np.count_nonzero(frequencies, axis=1)
        any_term = np.logical_or.reduce([tf > 0 for tf in frequencies])
        matched = np.flatnonzero(any_term)
        if len(matched) > MAX_MATCHING:
            matched = matched[:MAX_MATCHING]
        lengths = index.lengths[matched]
        n = float(count)
        if self.formula == OKAPI:
            average = max(float(lengths.mean()), 1.0)
            idf = np.log(1.0 + (n - held + 0.5) / (held + 0.5))
        else:  # FTS5: lengths count the scope term; idf floored
            lengths = lengths + 1.0
            average = float(index.lengths.sum() + count) / n
            idf = np.log((n - held + 0.5) / (held + 0.5))
            idf = np.where(idf <= 0, 1e-6, idf)
        norm = K1 * (1 - B + B * lengths / average)
        scores = np.zeros(len(matched))
        for weight, tf in zip(idf, frequencies, strict=True):
            hits = tf[matched]
            scores += np.where(hits > 0, weight * hits * (K1 + 1) / (hits + norm), 0.0)
        order = np.lexsort((index.id_rank[matched], -scores))[:limit]
        return [(index.ids[matched[i]], float(scores[i])) for i in order]

    def _index(self, doc: MemoryDocument, scope: Scope) -> _Index:
        with self._lock:
            index = self._indexes.get(scope)
            if (
                index is not None
                and doc.version is not None
                and index.version == doc.version
                and len(index.ids) == len(doc.facts)
            ):
                self._indexes.move_to_end(scope)
                return index
        index = _build(doc)
        with self._lock:
            self.builds += 1
        if doc.version is None or len(index.ids) > self.max_facts:
            return index  # not kept: no version to check it by, or too large
        with self._lock:
            old = self._indexes.pop(scope, None)
            if old is not None:
                self._held -= len(old.ids)
            self._indexes[scope] = index
            self._held += len(index.ids)
            while self._held > self.max_facts and self._indexes:
                _, dropped = self._indexes.popitem(last=False)
                self._held -= len(dropped.ids)
        return index


def _build(doc: MemoryDocument) -> _Index:
    import numpy as np

    ids = [fact.id for fact in doc.facts]
    lengths = np.zeros(len(ids))
    positions: dict[str, list[int]] = {}
    counts: dict[str, list[int]] = {}
    for position, fact in enumerate(doc.facts):
        words = search_text(fact.content).split()
        lengths[position] = len(words)
        for word, times in Counter(words).items():
            positions.setdefault(word, []).append(position)
            counts.setdefault(word, []).append(times)
    postings = {
        word: (np.array(places, dtype=np.intp), np.array(counts[word], dtype=np.float64))
        for word, places in positions.items()
    }
    id_rank = np.empty(len(ids), dtype=np.intp)
    id_rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return _Index(doc.version, ids, id_rank, lengths, sorted(postings), postings)


def _term_frequencies(np: Any, index: _Index, term: str, count: int) -> Any:
    """How often each fact holds ``term`` or a word it starts (None: no fact does)."""
    words = index.words
    start = bisect.bisect_left(words, term)
    end = start
    while end < len(words) and words[end].startswith(term):
        end += 1
    if start == end:
        return None
    if end - start == 1:
        places, times = index.postings[words[start]]
        tf = np.zeros(count)
        tf[places] = times
        return tf
    places = np.concatenate([index.postings[word][0] for word in words[start:end]])
    times = np.concatenate([index.postings[word][1] for word in words[start:end]])
    return np.bincount(places, weights=times, minlength=count)
