"""Query-aware recall: does the answer to a question reach the injected block, and at what cost.

    .venv/bin/python benchmarks/bench_recall.py [postgresql] [sqlite] [--quick] [--idle-states]

(default: both databases, the whole data set; ``--quick``: 60 questions and smaller timing
series, for a smoke run; the CPUs kept out of deep idle states where the process may, see
``_common.steady_cpus``, unless ``--idle-states``). It needs the bench extra (``rank-bm25``).

The data set is ``recall_data/long_memory.json`` (made by ``recall_data/make_dataset.py``): one
user's memory of 3 000 facts over many topics, 15 % of them Chinese or Japanese, and 300
questions, each with the ids of the 1 to 3 facts that answer it, a third of them paraphrased
(few words in common with the answer). It is loaded into a real SQLite file and a real
PostgreSQL database (migrated, ``open_storage``, one save).

Recall, at budgets of 500 / 1 000 / 2 000 tokens, three arms filling the same budget with the
same formatter and token counter:

- unranked: ``memory_context()`` without a query (guaranteed categories, then confidence);
- BM25: ``rank_bm25.BM25Okapi`` over the same facts (lower-cased words, CJK characters one
  token each), its order handed to ``format_memory_for_injection(ranking=…)``;
- ranked: ``memory_context(query=question)``.

For each: evidence recall (the share of answering facts whose line is in the block) and the
share of questions whose every answering fact is in it, for all questions and for the
paraphrased and CJK ones, with the ratios ranked ÷ BM25 and ranked ÷ unranked. The guaranteed
budget is a quarter of the budget (the default 500 would leave nothing of a 500-token budget
to the rest).

Latency: p50/p99 of a ranked context at 100 / 1 000 / 10 000 facts (the file's facts, and
more of the same kinds beyond 3 000), against the cached unranked read of the same memory,
interleaved in the same run. Writes: ``bench_peers``' add and update of one fact in a 200-fact
memory with the full-text index on, and off (the same schema with the index's objects dropped
after migration), interleaved in the same run.

Goals are printed PASS/FAIL (targets, not failures): the exit status is non-zero only on an
error.
"""

from __future__ import annotations

import gc
import html
import inspect
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _blas_threads  # noqa: F401 - before numpy (rank_bm25, the embedding model)
from _common import (
    analyze,
    fmt,
    measured_source,
    percentile,
    scratch_postgres,
    steady_cpus,
    time_calls,
)

import memory_sql
from memory_sql import Fact, MemoryConfig, MemoryDocument, MemoryService, open_storage
from memory_sql.database import create_engine
from memory_sql.recall.injection import format_memory_for_injection
from memory_sql.storage import SQLStorage
from memory_sql.text_search import search_text

try:
    from rank_bm25 import BM25Okapi
except ImportError as exc:
    sys.exit(f"bench_recall needs the bench extra (pip install -e '.[bench]'): {exc}")

sys.path.insert(0, str(Path(__file__).resolve().parent / "recall_data"))
import make_dataset

DATA = Path(__file__).resolve().parent / "recall_data" / "long_memory.json"
USER = "daniel"
BUDGETS = (500, 1000, 2000)
SIZES = (100, 1_000, 10_000)
LATENCY_BUDGET = 1000
WRITE_FACTS = 200
UNRANKED, BM25, RANKED = "unranked", "BM25", "ranked"
HYBRID, HYBRID_SUM = "hybrid", "hybrid-sum"
ARMS = (UNRANKED, BM25, RANKED, HYBRID, HYBRID_SUM)
SEMANTIC_DATA = Path(__file__).resolve().parent / "recall_data" / "semantic_questions.json"
EMBEDDING_MODEL = "all-MiniLM-L6-v2"


@dataclass
class Settings:
    questions: int | None  # None: all
    latency_calls: int
    latency_sizes: tuple[int, ...]
    write_calls: int
    recall_only: bool = False
    latency_only: bool = False


FULL = Settings(questions=None, latency_calls=400, latency_sizes=SIZES, write_calls=300)
QUICK = Settings(questions=60, latency_calls=60, latency_sizes=SIZES, write_calls=40)


# the API under test ---------------------------------------------------------------------------


def missing_api() -> dict[str, str]:
    """The arms this checkout cannot run, with what of issue #22's (and #31's) API they lack."""
    missing = {}
    try:
        import numpy  # noqa: F401

        from memory_sql.demo.embeddings_server import model_zip

        model_zip()
    except ImportError as exc:
        missing[HYBRID] = missing[HYBRID_SUM] = f"the local embedding model ({exc})"
    if "ranking" not in inspect.signature(format_memory_for_injection).parameters:
        missing[BM25] = "format_memory_for_injection(ranking=…)"
    if "query" not in inspect.signature(MemoryService.memory_context).parameters:
        missing[RANKED] = "MemoryService.memory_context(query=…)"
    return missing


# embeddings (issue #31) -----------------------------------------------------------------------


class Embeddings:
    """The local all-MiniLM-L6-v2 behind a real /v1/embeddings server on 127.0.0.1, and the
    facts' vectors by text (a memory saved again for another size is not embedded again)."""

    def __init__(self) -> None:
        self.server: Any = None
        self.by_text: dict[str, Any] = {}
        self.throughput: dict[str, tuple[int, float]] = {}

    def start(self) -> None:
        from memory_sql.demo.embeddings_server import EmbeddingsServer

        self.server = EmbeddingsServer().start()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def config(self, config: MemoryConfig) -> MemoryConfig:
        """``config`` with the local embedding endpoint (its ``embedding`` section: a flat
        ``embedding_*`` key given to ``model_copy`` would be ignored)."""
        embedding = config.embedding.model_copy(
            update={
                "base_url": self.server.base_url,
                "model": EMBEDDING_MODEL,
                "query_timeout_seconds": 30.0,  # the bench counts every query hybrid
            }
        )
        return config.model_copy(update={"embedding": embedding})

    def worker_pass(self, name: str, url: str) -> None:
        """Embed every fact of ``url`` as the service's worker does (EmbeddingPass), timed:
        the worker's throughput."""
        from memory_sql.embeddings import Embedder
        from memory_sql.storage.vectors import FactVectors
        from memory_sql.update.embedding import EmbeddingPass

        embedder = Embedder(base_url=self.server.base_url, model=EMBEDDING_MODEL)
        engine = create_engine(url)
        try:
            vectors = FactVectors(engine, embedder.key)
            start = time.perf_counter()
            done = EmbeddingPass(embedder, vectors).embed_all()
            self.throughput[name] = (done, time.perf_counter() - start)
            storage = SQLStorage(engine)
            from memory_sql.scope import Scope

            doc = storage.load(user_id=USER)
            ids, rows = vectors.matrix(Scope.of(user_id=USER), doc.facts)
            by_id = {f.id: f.content for f in doc.facts}
            for fact_id, row in zip(ids, rows, strict=True):
                self.by_text[by_id[fact_id]] = row
        finally:
            embedder.close()
            engine.dispose()

    def fill(self, url: str, user: str) -> None:
        """Give every fact of ``user`` its vector, embedding only texts not seen before."""
        from memory_sql.embeddings import Embedder
        from memory_sql.scope import Scope
        from memory_sql.storage.vectors import FactVectors, content_digest

        embedder = Embedder(base_url=self.server.base_url, model=EMBEDDING_MODEL)
        engine = create_engine(url)
        try:
            vectors = FactVectors(engine, embedder.key)
            scope = Scope.of(user_id=user)
            while batch := vectors.unembedded(scope=scope, limit=2000):
                new = sorted({u.content for u in batch} - self.by_text.keys())
                for start in range(0, len(new), 64):
                    part = new[start : start + 64]
                    self.by_text.update(zip(part, embedder.embed(part), strict=True))
                vectors.write(
                    scope,
                    [
                        (u.fact_id, content_digest(u.content), self.by_text[u.content])
                        for u in batch
                    ],
                )
        finally:
            embedder.close()
            engine.dispose()

    def query_seconds(self, texts: list[str], number: int) -> list[float]:
        """The query's embedding call alone (HTTP and the model), once per text."""
        from memory_sql.embeddings import Embedder

        embedder = Embedder(base_url=self.server.base_url, model=EMBEDDING_MODEL)
        try:
            turn = iter(texts * 100)
            return time_calls(lambda: embedder.embed([next(turn)]), number=number)
        finally:
            embedder.close()


EMBEDDINGS = Embeddings()
RESTATEMENTS = Path(__file__).resolve().parent / "recall_data" / "restatements.json"
DEDUPE_THRESHOLDS = (0.80, 0.85, 0.88, 0.90, 0.92, 0.95)


def dedupe_figures(data: dict[str, Any]) -> None:
    """The semantic dedupe's threshold on this data: of hand-written restatements of facts
    (recall_data/restatements.json), how many reach their fact's cosine (caught), and of the
    data set's facts, all distinct, how many have another fact at that cosine (each would be
    merged into it were it new)."""
    import numpy as np

    from memory_sql.embeddings import Embedder
    from memory_sql.update.dedupe import particulars_agree

    by_id = {f["id"]: f["content"] for f in data["facts"]}
    pairs = json.loads(RESTATEMENTS.read_text(encoding="utf-8"))["restatements"]
    embedder = Embedder(base_url=EMBEDDINGS.server.base_url, model=EMBEDDING_MODEL)
    try:
        new = embedder.embed(list(pairs.values()))
    finally:
        embedder.close()
    ids = [f["id"] for f in data["facts"] if f["content"] in EMBEDDINGS.by_text]
    rows = np.stack([EMBEDDINGS.by_text[by_id[i]] for i in ids])
    position = {fact_id: n for n, fact_id in enumerate(ids)}
    to_own = np.array([rows[position[i]] @ v for i, v in zip(pairs, new, strict=True)])
    best = (new @ rows.T).argmax(axis=1)
    right = np.array([ids[b] == i for b, i in zip(best, pairs, strict=True)])
    agree = np.array([particulars_agree(by_id[i], text) for i, text in pairs.items()], dtype=bool)
    similar = rows @ rows.T
    np.fill_diagonal(similar, -1.0)
    neighbour = similar.argmax(axis=1)
    nearest = similar.max(axis=1)
    nearest_agree = np.array(
        [particulars_agree(by_id[ids[n]], by_id[ids[m]]) for n, m in enumerate(neighbour)]
    )
    print(
        f"\nsemantic dedupe on this data: {len(pairs)} restatements of facts, and the"
        f" {len(ids)} facts (all distinct) against their nearest other fact; by cosine alone,"
        " and with the particulars guard (numbers, names, CJK characters must agree)"
    )
    print(
        f"{'cosine ≥':>9} {'caught':>8} {'merged':>17} {'caught, guard':>14} {'merged, guard':>17}"
    )
    for threshold in DEDUPE_THRESHOLDS:
        caught = int(((to_own >= threshold) & right).sum())
        merged = int((nearest >= threshold).sum())
        caught_g = int(((to_own >= threshold) & right & agree).sum())
        merged_g = int(((nearest >= threshold) & nearest_agree).sum())
        print(
            f"{threshold:>9.2f} {f'{caught}/{len(pairs)}':>8}"
            f" {f'{merged} ({merged / len(ids):.1%})':>17} {f'{caught_g}/{len(pairs)}':>14}"
            f" {f'{merged_g} ({merged_g / len(ids):.1%})':>17}"
        )
    guarded = [
        (cosine, n) for n, cosine in enumerate(nearest) if nearest_agree[n] and cosine >= 0.85
    ]
    for cosine, n in sorted(guarded, reverse=True)[:4]:
        print(f"  {cosine:.3f}: {by_id[ids[n]]!r} ~ {by_id[ids[neighbour[n]]]!r}")


# data -----------------------------------------------------------------------------------------


def load_data() -> dict[str, Any]:
    if not DATA.exists():
        sys.exit(f"{DATA} is missing: run benchmarks/recall_data/make_dataset.py")
    return json.loads(DATA.read_text(encoding="utf-8"))


def to_fact(row: dict[str, Any]) -> Fact:
    return Fact(
        id=row["id"],
        content=row["content"],
        category=row["category"],
        confidence=row["confidence"],
        source_error=row.get("source_error"),
        source_thread_id="recall-bench",
        created_at=datetime.fromisoformat(row["created_at"]),
    )


def to_document(data: dict[str, Any], rows: list[dict[str, Any]]) -> MemoryDocument:
    return MemoryDocument(
        user={k: {"summary": v} for k, v in data["user"].items()},
        history={k: {"summary": v} for k, v in data["history"].items()},
        facts=[to_fact(r) for r in rows],
    )


def save_memory(url: str, user: str, doc: MemoryDocument) -> None:
    storage = open_storage(url)
    try:
        current = storage.load(user_id=user)
        current.user, current.history, current.facts = doc.user, doc.history, doc.facts
        storage.save(current, user_id=user, expected_version=current.version)
    finally:
        storage.close()


_CJK = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_BM25_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


def bm25_tokens(text: str) -> list[str]:
    """What a user reaching for rank_bm25 would write: lower-cased words, CJK per character."""
    return _BM25_TOKEN.findall(text.lower())


def clean(text: str) -> str:
    """A text as the formatter writes it into a fact line (lines folded, HTML-escaped)."""
    return html.escape(" ".join(p.strip() for p in text.splitlines() if p.strip()), False)


class Lines:
    """Which facts a block shows, found by their lines (``- [category | 0.85] content``)."""

    def __init__(self, facts: list[Fact]) -> None:
        self.by_text: dict[str, str] = {}
        for f in facts:
            text = clean(f.content)
            if f.category == "correction" and f.source_error:
                self.by_text[f"{text} (avoid: {clean(f.source_error)})"] = f.id
            self.by_text[text] = f.id

    def shown(self, block: str) -> set[str]:
        ids = set()
        for line in block.splitlines():
            if not line.startswith("- "):
                continue
            text = line[2:]
            if text.startswith("[") and "] " in text:
                text = text.split("] ", 1)[1]
            found = self.by_text.get(text)
            if found is not None:
                ids.add(found)
        return ids


def inner(block: str) -> str:
    """The formatter's text inside ``<user_memory>`` of a rendered block."""
    start, end = block.find("<user_memory>\n"), block.rfind("\n</user_memory>")
    return block[start + len("<user_memory>\n") : end] if start >= 0 and end >= 0 else block


# recall ---------------------------------------------------------------------------------------


@dataclass
class Score:
    found: int = 0  # answering facts in the block
    wanted: int = 0  # answering facts
    complete: int = 0  # questions with every answering fact in the block
    questions: int = 0
    shown: list[int] = field(default_factory=list)  # facts in each block
    tokens: list[int] = field(default_factory=list)  # tokens of each block

    def add(self, evidence: list[str], shown: set[str], tokens: int) -> None:
        hit = sum(e in shown for e in evidence)
        self.found += hit
        self.wanted += len(evidence)
        self.complete += hit == len(evidence)
        self.questions += 1
        self.shown.append(len(shown))
        self.tokens.append(tokens)

    @property
    def recall(self) -> float:
        return self.found / self.wanted if self.wanted else 0.0

    @property
    def all_in(self) -> float:
        return self.complete / self.questions if self.questions else 0.0


GROUPS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "all": lambda q: True,
    "lexical": lambda q: q["kind"] == "lexical",
    "paraphrased": lambda q: q["kind"] == "paraphrased",
    "CJK": lambda q: q["lang"] != "en",
    "paraphrase-heavy": lambda q: q["kind"] == "paraphrase-heavy",
    "multi-hop": lambda q: q["kind"] == "multi-hop",
    "one answering fact": lambda q: len(q["evidence"]) == 1,
    "2-3 answering facts": lambda q: len(q["evidence"]) > 1,
}


@dataclass
class RecallRun:
    scores: dict[tuple[int, str, str], Score]  # (budget, arm, group)
    by_topic: dict[tuple[int, str, str], Score]  # (budget, arm, topic)
    misses: list[tuple[dict[str, Any], set[str], set[str]]]  # at 1 000: ranked misses
    seconds: dict[str, float]


def recall_run(
    url: str, data: dict[str, Any], questions: list[dict[str, Any]], missing: dict[str, str]
) -> RecallRun:
    facts = [to_fact(r) for r in data["facts"]]
    lines = Lines(facts)
    bm25 = BM25Okapi([bm25_tokens(f.content) for f in facts])
    ids = [f.id for f in facts]
    scores: dict[tuple[int, str, str], Score] = {}
    by_topic: dict[tuple[int, str, str], Score] = {}
    misses: list[tuple[dict[str, Any], set[str], set[str]]] = []
    seconds = dict.fromkeys(ARMS, 0.0)
    orders = []
    for q in questions:
        got = bm25.get_scores(bm25_tokens(q["text"]))
        order = sorted((i for i in range(len(ids)) if got[i] > 0), key=lambda i: -got[i])
        orders.append([ids[i] for i in order])
    for budget in BUDGETS:
        config = MemoryConfig(
            storage=url,
            max_facts=10_000,
            injected_memory_max_tokens=budget,
            guaranteed_token_budget=budget // 4,
        )
        service = MemoryService(config, start=False)
        hybrid = {}
        if HYBRID not in missing:
            for arm, fusion in ((HYBRID, "rrf"), (HYBRID_SUM, "weighted")):
                hybrid[arm] = MemoryService(EMBEDDINGS.config(config), start=False)
                hybrid[arm].recall.fusion = fusion
        try:
            doc = service.storage.load(user_id=USER)
            assert len(doc.facts) == len(facts), (len(doc.facts), len(facts))
            counter = service.counter
            unranked = service.memory_context(user_id=USER)
            for q, order in zip(questions, orders, strict=True):
                blocks: dict[str, str | None] = {}
                start = time.perf_counter()
                blocks[UNRANKED] = inner(service.memory_context(user_id=USER))
                seconds[UNRANKED] += time.perf_counter() - start
                assert blocks[UNRANKED] == inner(unranked)
                if BM25 not in missing:
                    start = time.perf_counter()
                    blocks[BM25] = format_memory_for_injection(
                        doc,
                        budget,
                        config.recall.guaranteed_categories,
                        config.recall.guaranteed_token_budget,
                        counter,
                        ranking=order,
                    )
                    seconds[BM25] += time.perf_counter() - start
                if RANKED not in missing:
                    start = time.perf_counter()
                    blocks[RANKED] = inner(service.memory_context(user_id=USER, query=q["text"]))
                    seconds[RANKED] += time.perf_counter() - start
                for arm, other in hybrid.items():
                    other.embedder.embed_query(q["text"])  # its call is timed apart
                    start = time.perf_counter()
                    blocks[arm] = inner(other.memory_context(user_id=USER, query=q["text"]))
                    seconds[arm] += time.perf_counter() - start
                shown_by_arm = {}
                for arm, block in blocks.items():
                    if block is None:
                        continue
                    shown = shown_by_arm[arm] = lines.shown(block)
                    tokens = counter.count(block)
                    for group, member in GROUPS.items():
                        if member(q):
                            scores.setdefault((budget, arm, group), Score()).add(
                                q["evidence"], shown, tokens
                            )
                    by_topic.setdefault((budget, arm, q["topic"]), Score()).add(
                        q["evidence"], shown, tokens
                    )
                ranked_shown = shown_by_arm.get(RANKED)
                missed = ranked_shown is not None and not set(q["evidence"]) <= ranked_shown
                if budget == 1000 and missed:
                    misses.append((q, ranked_shown, shown_by_arm.get(BM25, set())))
        finally:
            service.close()
            for other in hybrid.values():
                assert other.embedder.stats.query_failures == 0, "a query fell back to lexical"
                other.close()
    return RecallRun(scores, by_topic, misses, seconds)


def pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def times(a: float, b: float) -> str:
    if b == 0:
        return "   —  " if a == 0 else "   ∞  "
    return f"{a / b:5.2f}x"


def print_recall(name: str, run: RecallRun, facts: dict[str, Any]) -> list[tuple[bool, str]]:
    s = run.scores
    arms = [arm for arm in ARMS if (BUDGETS[0], arm, "all") in s]
    pairs = [
        (a, b)
        for a, b in ((RANKED, BM25), (RANKED, UNRANKED), (HYBRID, BM25), (HYBRID, RANKED))
        if a in arms and b in arms
    ]
    if RANKED not in arms and BM25 in arms:
        pairs = [(BM25, UNRANKED)]
    print(
        f"\n{name}: recall, {len(facts)} facts; per arm: evidence recall / share of questions"
        " with every answering fact in the block"
    )
    head = f"{'budget':>6}  {'questions':24}" + "".join(f" {arm:>16}" for arm in arms)
    head += "".join(f" {f'{a}/{b}':>17}" for a, b in pairs)
    print(head)
    print("-" * len(head))
    for budget in BUDGETS:
        for group in GROUPS:
            if (budget, UNRANKED, group) not in s:
                continue
            n = s[budget, UNRANKED, group].questions
            line = f"{budget:>6}  {f'{group} ({n})':24}"
            for arm in arms:
                sc = s[budget, arm, group]
                line += f"  {pct(sc.recall)} / {pct(sc.all_in)}"
            for a, b in pairs:
                x, y = s[budget, a, group], s[budget, b, group]
                line += f"  {times(x.recall, y.recall)} /{times(x.all_in, y.all_in)}"
            print(line)
        shown = "; ".join(
            f"{arm} {statistics.mean(s[budget, arm, 'all'].shown):.1f} facts,"
            f" {statistics.mean(s[budget, arm, 'all'].tokens):.0f} tokens"
            for arm in arms
        )
        print(f"{'':8}mean block: {shown}")
    per_call = "; ".join(
        f"{arm} {fmt(run.seconds[arm] / (len(BUDGETS) * s[BUDGETS[0], arm, 'all'].questions))}"
        for arm in arms
    )
    print(
        "  ratios: of evidence recall / of the every-answering-fact share; time per block:"
        f" {' '.join(per_call.split())} (unranked: the cached read)"
    )
    if len(arms) > 1:
        print(f"\n{name}: evidence recall by topic at 1000 tokens (questions): " + " / ".join(arms))
        topics = sorted({t for (b, a, t) in run.by_topic if b == 1000})
        for topic in topics:
            cells = " / ".join(pct(run.by_topic[1000, arm, topic].recall) for arm in arms)
            print(f"  {topic:12} ({run.by_topic[1000, arms[0], topic].questions:3}) {cells}")
    if RANKED in arms and run.misses:
        worse = [m for m in run.misses if set(m[0]["evidence"]) <= m[2]]
        kinds = {
            "lexical": sum(q["kind"] == "lexical" for q, _, _ in run.misses),
            "paraphrased": sum(q["kind"] == "paraphrased" for q, _, _ in run.misses),
            "CJK": sum(q["lang"] != "en" for q, _, _ in run.misses),
        }
        print(
            f"\n{name}: at 1000 tokens the ranked block misses an answering fact for"
            f" {len(run.misses)} questions ({', '.join(f'{k} {v}' for k, v in kinds.items())});"
            f" BM25's block holds every answering fact for {len(worse)} of them. Some (+: an"
            " answering fact the ranked block holds, -: one it misses; [BM25]: BM25 holds all):"
        )
        shown_first = worse + [m for m in run.misses if m not in worse]
        for q, ranked_shown, bm25_shown in shown_first[:10]:
            answer = " | ".join(
                ("+ " if e in ranked_shown else "- ") + facts[e]["content"] for e in q["evidence"]
            )
            tag = " [BM25]" if set(q["evidence"]) <= bm25_shown else ""
            print(f"  {q['kind']}, {q['lang']}{tag}: {q['text']!r} -> {answer}")
    out = []
    if HYBRID in arms and BM25 in arms:
        for budget in BUDGETS:
            h, b = s[budget, HYBRID, "all"].recall, s[budget, BM25, "all"].recall
            out.append(
                (
                    h >= 1.25 * b,
                    f"hybrid evidence recall ÷ BM25's at {budget} tokens: {pct(h).strip()} vs"
                    f" {pct(b).strip()} = {times(h, b).strip()} (goal ≥ 1.25x)",
                )
            )
        for group in ("paraphrased", "paraphrase-heavy", "multi-hop"):
            if (1000, HYBRID, group) not in s:
                continue
            for budget in BUDGETS:
                h, r = s[budget, HYBRID, group].recall, s[budget, RANKED, group].recall
                out.append(
                    (
                        h - r >= 0.10,
                        f"hybrid − ranked (lexical) on {group} at {budget} tokens:"
                        f" {pct(h).strip()} − {pct(r).strip()} = {100 * (h - r):+.1f} points"
                        " (goal ≥ +10)",
                    )
                )
        for budget in BUDGETS:
            h, w = s[budget, HYBRID, "all"].recall, s[budget, HYBRID_SUM, "all"].recall
            print(
                f"  fusion at {budget} tokens: reciprocal-rank {pct(h).strip()}, normalised"
                f" weighted sum {pct(w).strip()}"
            )
    if RANKED in arms and BM25 in arms:
        for budget in BUDGETS:
            r, b = s[budget, RANKED, "all"].recall, s[budget, BM25, "all"].recall
            out.append(
                (
                    r >= b,
                    f"ranked evidence recall ≥ BM25's at {budget} tokens: {pct(r).strip()} vs"
                    f" {pct(b).strip()} = {times(r, b).strip()} (goal ≥ 1x)",
                )
            )
    return out


# latency --------------------------------------------------------------------------------------


def interleaved(
    sides: dict[str, Callable[[], object]], *, number: int, warmup: int = 20, rounds: int = 5
) -> dict[str, list[float]]:
    """Each side's call times, the sides taking turns in ``rounds``."""
    gc.collect()
    gc.freeze()
    times_: dict[str, list[float]] = {name: [] for name in sides}
    for run in sides.values():
        time_calls(run, number=warmup)
    for _ in range(rounds):
        for name, run in sides.items():
            times_[name] += time_calls(run, number=max(number // rounds, 1))
    return times_


def latency(
    url: str, data: dict[str, Any], extra: list[dict[str, Any]], settings: Settings
) -> dict[int, dict[str, list[float]]]:
    rows = data["facts"] + extra
    out = {}
    texts = [q["text"] for q in data["questions"]]
    for size in settings.latency_sizes:
        user = f"latency-{size}"
        save_memory(url, user, to_document(data, rows[:size]))
        service = MemoryService(
            MemoryConfig(
                storage=url,
                max_facts=10_000,
                injected_memory_max_tokens=LATENCY_BUDGET,
                guaranteed_token_budget=LATENCY_BUDGET // 4,
            ),
            start=False,
        )
        sides: dict[str, Callable[[], object]] = {}
        hybrid = None
        if EMBEDDINGS.server is not None:
            EMBEDDINGS.fill(url, user)
            if url.startswith("postgresql"):
                analyze(url)
            hybrid = MemoryService(EMBEDDINGS.config(service.config), start=False)
            for text in texts:  # the query's embedding call is timed apart
                hybrid.embedder.embed_query(text)
            h_turn = iter(texts * 1000)
            sides[HYBRID] = lambda s=hybrid, u=user, t=h_turn: s.memory_context(
                user_id=u, query=next(t)
            )
        try:
            turn = iter(texts * 1000)
            ranked = lambda s=service, u=user, t=turn: s.memory_context(user_id=u, query=next(t))  # noqa: E731
            unranked = lambda s=service, u=user: s.memory_context(user_id=u)  # noqa: E731
            assert "<user_memory>" in unranked()
            out[size] = interleaved(
                {RANKED: ranked, UNRANKED: unranked, **sides}, number=settings.latency_calls
            )
            if size == max(settings.latency_sizes):
                out[size].update(ranked_parts(service, user, texts, settings.latency_calls))
        finally:
            service.close()
            if hybrid is not None:
                assert hybrid.embedder.stats.query_failures == 0
                hybrid.close()
    if EMBEDDINGS.server is not None:
        out[max(out)][QUERY_EMBEDDING] = EMBEDDINGS.query_seconds(texts, settings.latency_calls)
    return out


QUERY_EMBEDDING = "the query's embedding call (HTTP + model)"


MATCH, RANK = "the index's match", "scoring and spreading the matches"


def ranked_parts(
    service: MemoryService, user: str, texts: list[str], number: int
) -> dict[str, list[float]]:
    """Two parts of a ranked context, timed alone: the full-text index's match of the query's
    terms (``match_facts``), and the score with the near-duplicate pass (``rank_facts``)."""
    from memory_sql.recall.injection import fact_lines
    from memory_sql.recall.ranking import rank_facts
    from memory_sql.scope import Scope
    from memory_sql.text_search import query_terms

    recall, scope = service.recall, Scope.of(user_id=user)
    doc = service.storage.load(user_id=user)
    lines = fact_lines(doc, service.config.recall.guaranteed_categories, recall.counter)
    terms = [query_terms(text) for text in texts]
    limit = recall.weights.candidates
    found = [service.storage.match_facts(doc, scope, t, limit=limit) for t in terms]
    turn = iter(range(10**9))

    def match() -> None:
        service.storage.match_facts(doc, scope, terms[next(turn) % len(terms)], limit=limit)

    def rank() -> None:
        matches = found[next(turn) % len(found)]
        rank_facts(lines.facts_by_id, matches, recall.weights, terms=lines.terms)

    return interleaved({MATCH: match, RANK: rank}, number=number)


def print_latency(name: str, figures: dict[int, dict[str, list[float]]]) -> list[tuple[bool, str]]:
    print(
        f"\n{name}: context latency, budget {LATENCY_BUDGET} tokens, p50 (p99) per call; ranked:"
        " memory_context(query=…), a question of the data set each call; unranked:"
        " memory_context(), cached"
    )
    head = f"{'facts':>7} {'ranked':>22} {'unranked (cached)':>22} {'ranked/unranked p50':>21}"
    print(head)
    print("-" * len(head))
    p50 = {}
    for size, sides in figures.items():
        cells = []
        for arm in (RANKED, UNRANKED):
            p50[size, arm] = statistics.median(sides[arm])
            cells.append(
                f"{fmt(p50[size, arm]).strip()} ({fmt(percentile(sides[arm], 99)).strip()})"
            )
        print(
            f"{size:>7,} {cells[0]:>22} {cells[1]:>22}"
            f" {times(p50[size, RANKED], p50[size, UNRANKED]):>21}"
        )
    big = max(figures)
    if HYBRID in figures[big]:
        print(
            "  hybrid: memory_context(query=…) with the embeddings endpoint, the query's vector"
            " already embedded (its call timed apart below):"
        )
        for size, sides in figures.items():
            p50[size, HYBRID] = statistics.median(sides[HYBRID])
            print(
                f"{size:>7,} hybrid p50 {fmt(p50[size, HYBRID]).strip()}"
                f" (p99 {fmt(percentile(sides[HYBRID], 99)).strip()}),"
                f" {times(p50[size, HYBRID], p50[size, RANKED]).strip()} the lexical ranked"
            )
    if QUERY_EMBEDDING in figures[big]:
        q = figures[big][QUERY_EMBEDDING]
        print(
            f"  {QUERY_EMBEDDING}: p50 {fmt(statistics.median(q)).strip()}"
            f" (p99 {fmt(percentile(q, 99)).strip()}), one question a call"
        )
    for part in (MATCH, RANK):
        if part in figures[big]:
            times_ = figures[big][part]
            print(
                f"  of the ranked context at {big:,} facts, {part}: p50"
                f" {fmt(statistics.median(times_)).strip()}"
                f" ({statistics.median(times_) / p50[big, RANKED]:.0%})"
            )
    out = []
    if (10_000, HYBRID) in p50:
        out.append(
            (
                p50[10_000, HYBRID] <= 8e-3,
                f"hybrid context at 10,000 facts, the query's embedding excluded: p50"
                f" {fmt(p50[10_000, HYBRID]).strip()} (goal ≤ 8 ms)",
            )
        )
    limit = 5e-3 if name == "PostgreSQL" else 3e-3
    if big == 10_000:
        out.append(
            (
                p50[big, RANKED] <= limit,
                f"ranked context at 10,000 facts: p50 {fmt(p50[big, RANKED]).strip()}"
                f" (goal ≤ {limit * 1e3:g} ms)",
            )
        )
    if 1000 in figures:
        r = p50[1000, RANKED] / p50[1000, UNRANKED]
        out.append(
            (
                r <= 3,
                f"ranked context at 1,000 facts ≤ 3x the cached unranked read:"
                f" {fmt(p50[1000, RANKED]).strip()} vs {fmt(p50[1000, UNRANKED]).strip()}"
                f" = {r:.2f}x (goal ≤ 3x)",
            )
        )
    return out


# writes with and without the index -----------------------------------------------------------


def drop_index(url: str, postgres: bool) -> list[str]:
    """Drops the full-text index's objects (migration 0011) from a migrated database; returns
    the statements run."""
    if postgres:
        statements = [
            "DROP INDEX ix_memory_facts_search",
            "ALTER TABLE memory_facts DROP COLUMN search_vector",
        ]
    else:
        statements = [
            *(f"DROP TRIGGER memory_facts_fts_{t}" for t in ("insert", "delete", "update")),
            "DROP TABLE memory_facts_fts",
        ]
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()
    return statements


def writes(
    urls: dict[str, str], data: dict[str, Any], extra: list[dict[str, Any]], settings: Settings
) -> dict[str, dict[str, list[float]]]:
    """Add one fact (then take it out, untimed) and update one fact's confidence, in a
    200-fact memory, index on and off."""
    stores: dict[str, SQLStorage] = {}
    fresh: Iterator[Fact] = iter(to_fact(r) for r in extra[-5000:])
    for side, url in urls.items():
        save_memory(url, USER, to_document(data, data["facts"][:WRITE_FACTS]))
        if url.startswith("postgresql"):
            analyze(url)
        store = open_storage(url)
        assert isinstance(store, SQLStorage)
        stores[side] = store
    added: dict[str, Fact] = {}
    turn = dict.fromkeys(urls, 0)

    def add(side: str) -> Callable[[], None]:
        store = stores[side]

        def run() -> None:
            doc = store.load(user_id=USER)
            doc.facts.append(added.setdefault(side, next(fresh)))
            store.save(doc, user_id=USER)

        return run

    def undo(side: str) -> Callable[[], None]:
        store = stores[side]

        def run() -> None:
            gone = added.pop(side).id
            doc = store.load(user_id=USER)
            doc.facts = [f for f in doc.facts if f.id != gone]
            store.save(doc, user_id=USER)

        return run

    def update(side: str) -> Callable[[], None]:
        store = stores[side]

        def run() -> None:
            doc = store.load(user_id=USER)
            i = turn[side] = (turn[side] + 1) % len(doc.facts)
            c = doc.facts[i].confidence
            doc.facts[i] = doc.facts[i].replace(confidence=0.55 if c != 0.55 else 0.65)
            store.save(doc, user_id=USER)

        return run

    try:
        out: dict[str, dict[str, list[float]]] = {"add": {}, "update": {}}
        gc.collect()
        gc.freeze()
        for side in urls:
            time_calls(add(side), number=20, after=undo(side))
            time_calls(update(side), number=20)
        rounds = 10
        for _ in range(rounds):
            for side in urls:
                out["add"].setdefault(side, []).extend(
                    time_calls(add(side), number=settings.write_calls // rounds, after=undo(side))
                )
            for side in urls:
                out["update"].setdefault(side, []).extend(
                    time_calls(update(side), number=settings.write_calls // rounds)
                )
        for store in stores.values():
            assert len(store.load(user_id=USER).facts) == WRITE_FACTS
        return out
    finally:
        for store in stores.values():
            store.close()


def print_writes(
    name: str, figures: dict[str, dict[str, list[float]]], dropped: list[str], facts: list[Fact]
) -> list[tuple[bool, str]]:
    print(
        f"\n{name}: writes to a {WRITE_FACTS}-fact memory (load, change, save), median (p90)"
        " per call; index off: " + "; ".join(dropped)
    )
    head = f"{'operation':32} {'index on':>20} {'index off':>20} {'on/off':>8}"
    print(head)
    print("-" * len(head))
    out = []
    labels = {"add": "add one fact", "update": "update one fact's confidence"}
    for op, sides in figures.items():
        on, off = statistics.median(sides["on"]), statistics.median(sides["off"])
        cells = [
            f"{fmt(statistics.median(t)).strip()} ({fmt(percentile(t, 90)).strip()})"
            for t in (sides["on"], sides["off"])
        ]
        print(f"{labels[op]:32} {cells[0]:>20} {cells[1]:>20} {on / off:7.2f}x")
        out.append(
            (
                on / off <= 1.2,
                f"{labels[op]} with the index ≤ 1.2x without: {fmt(on).strip()} vs"
                f" {fmt(off).strip()} = {on / off:.2f}x (goal ≤ 1.2x)",
            )
        )
    start = time.perf_counter()
    for f in facts:
        search_text(f.content)
    per = (time.perf_counter() - start) / len(facts)
    print(
        f"  both sides compute search_text() in Python ({fmt(per).strip()} per fact, over"
        f" {len(facts)} facts): what the index costs beyond that is the difference"
    )
    return out


# the two databases ----------------------------------------------------------------------------


@contextmanager
def postgres_urls(names: list[str]) -> Iterator[dict[str, str] | None]:
    with ExitStack() as stack:
        urls = {}
        for name in names:
            url = stack.enter_context(scratch_postgres())
            if url is None:
                yield None
                return
            urls[name] = url
        yield urls


@contextmanager
def sqlite_urls(names: list[str]) -> Iterator[dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="bench_recall_") as folder:
        yield {name: f"sqlite:///{Path(folder) / name}.db" for name in names}


def run_backend(
    name: str,
    urls: dict[str, str],
    data: dict[str, Any],
    extra: list[dict[str, Any]],
    questions: list[dict[str, Any]],
    settings: Settings,
    missing: dict[str, str],
) -> None:
    started = time.perf_counter()
    postgres = name == "PostgreSQL"
    for url in urls.values():
        memory_sql.upgrade(url)
    dropped = drop_index(urls["off"], postgres)
    save_memory(urls["recall"], USER, to_document(data, data["facts"]))
    goals: list[tuple[bool, str]] = []
    if HYBRID not in missing:
        EMBEDDINGS.worker_pass(name, urls["recall"])
        done, seconds = EMBEDDINGS.throughput[name]
        rate = done / seconds if seconds else 0.0
        print(
            f"\n{name}: the worker's embedding pass (EmbeddingPass.embed_all, batches of 64, the"
            f" local model over HTTP): {done} facts in {seconds:.1f} s = {rate:.0f} facts/s"
            f" (load average {os.getloadavg()[0]:.2f})"
        )
        goals.append((rate >= 100, f"worker embedding throughput {rate:.0f} facts/s (goal ≥ 100)"))
        if len(EMBEDDINGS.throughput) == 1:
            dedupe_figures(data)
    if postgres:
        analyze(urls["recall"])
    if not settings.latency_only:
        run = recall_run(urls["recall"], data, questions, missing)
        goals += print_recall(name, run, {f["id"]: f for f in data["facts"]})
    if RANKED not in missing and not settings.recall_only:
        figures = latency(urls["recall"], data, extra, settings)
        goals += print_latency(name, figures)
    if not settings.recall_only and not settings.latency_only:
        w = writes({"on": urls["on"], "off": urls["off"]}, data, extra, settings)
        goals += print_writes(name, w, dropped, [to_fact(r) for r in data["facts"]])
    print(f"\n{name}: goals (targets, not failures)")
    for ok, text in goals:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    if missing:
        print(
            f"  (not measured: the {' and '.join(missing)} arm(s), and the ranked latency if the"
            f" ranked arm: {', '.join(missing.values())} missing)"
        )
    print(f"  ({name} measured in {time.perf_counter() - started:.0f} s)")


def main() -> int:
    args = {arg.lower() for arg in sys.argv[1:]}
    settings = QUICK if "--quick" in args else FULL
    if "--recall-only" in args:
        settings = Settings(**{**settings.__dict__, "recall_only": True})
    if "--latency-only" in args:  # the latency and the embedding figures, no recall
        settings = Settings(**{**settings.__dict__, "latency_only": True, "write_calls": 0})
    only = args - {"--quick", "--idle-states", "--recall-only", "--latency-only"}
    data = load_data()
    questions = data["questions"][: settings.questions]
    semantic = json.loads(SEMANTIC_DATA.read_text(encoding="utf-8"))["questions"]
    questions = questions + semantic
    extra_needed = max(max(settings.latency_sizes) - len(data["facts"]), 0) + 5000
    extra = make_dataset.extra_facts(extra_needed, {f["content"] for f in data["facts"]})
    qs = data["questions"]
    print(
        f"recall on a long memory: {len(data['facts'])} facts"
        f" ({sum(f['lang'] != 'en' for f in data['facts'])} Chinese or Japanese),"
        f" {len(questions)} of {len(qs)} questions"
        f" ({sum(q['kind'] == 'paraphrased' for q in questions)} paraphrased,"
        f" {sum(q['lang'] != 'en' for q in questions)} CJK); budgets {BUDGETS}, guaranteed"
        f" budget a quarter of each; {os.cpu_count()} CPUs, load average"
        f" {os.getloadavg()[0]:.2f} at the start; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
        + (" (--quick)" if settings is QUICK else "")
    )
    print(f"memory_sql measured: {measured_source()}")
    missing = missing_api()
    if missing:
        print(
            "NOTE: this checkout lacks "
            + ", ".join(missing.values())
            + " (issue #22): the "
            + " and ".join(missing)
            + " arm(s) are not measured"
        )
    names = ["recall", "on", "off"]
    print(
        f"added (recall_data/semantic_questions.json): "
        f"{sum(q['kind'] == 'paraphrase-heavy' for q in semantic)} paraphrase-heavy and"
        f" {sum(q['kind'] == 'multi-hop' for q in semantic)} multi-hop questions"
    )
    if HYBRID not in missing:
        EMBEDDINGS.start()
    with ExitStack() as run:
        run.callback(EMBEDDINGS.close)
        print(run.enter_context(steady_cpus(hold="--idle-states" not in args)))
        if not only or "postgresql" in only:
            with postgres_urls(names) as urls:
                if urls is None:
                    print("\nPostgreSQL: skipped (unreachable)")
                else:
                    run_backend("PostgreSQL", urls, data, extra, questions, settings, missing)
        if not only or "sqlite" in only:
            with sqlite_urls(names) as urls:
                run_backend("SQLite", urls, data, extra, questions, settings, missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
