"""Formatting a 200-fact memory for injection: first call, cached calls, and a naive formatter.

Run: ``.venv/bin/python benchmarks/bench_injection.py``. All timings come from one run and are
printed as medians over interleaved rounds, with ratios, for each counter.

- first call: ``format_memory_for_injection`` with an empty count cache, as for a memory seen
  for the first time in this process.
- cached: the same call again, the cache warm (the steady state, turn after turn).
- naive: a straightforward formatter that builds and tokenises every line and the whole result
  on every call; it selects the same facts (checked) but caches nothing.
"""

from __future__ import annotations

import gc
import html
import random
import statistics
import time

from memory_sql.models import Fact, MemoryDocument
from memory_sql.recall.injection import TokenCountCache, format_memory_for_injection
from memory_sql.tokens import EstimateCounter, TokenCounter, make_token_counter

ROUNDS = 41

_EN = [
    "Prefers {x} over {y} for new services",
    "Works on a {x} pipeline that feeds the {y} team",
    "Asked to keep answers short and to show {x} examples first",
    "Runs {x} locally and deploys to {y} with a blue-green setup",
    "Is learning {x} to replace an old {y} codebase",
]
_ZH = [
    "喜欢用{x}写脚本，不喜欢{y}",
    "最近在做{x}相关的项目，需要和{y}团队协作",
    "回答时请先给出{x}示例，再解释{y}的原理",
    "习惯在周末整理{x}笔记，并同步到{y}",
]
_THINGS = ["Python", "Rust", "Go", "PostgreSQL", "SQLite", "Kubernetes", "MoviePy", "PIL", "视频"]
_CATEGORIES = ["preference", "context", "goal", "behavior", "identity", "decision"]


def build_memory(seed: int = 200) -> MemoryDocument:
    rng = random.Random(seed)
    facts = []
    for i in range(200):
        template = rng.choice(_ZH if i % 3 == 0 else _EN)
        content = f"{template.format(x=rng.choice(_THINGS), y=rng.choice(_THINGS))} (#{i})"
        if i % 10 == 0:
            facts.append(
                Fact(
                    content=content,
                    category="correction",
                    confidence=round(rng.uniform(0.7, 1.0), 2),
                    source_error=f"assumed {rng.choice(_THINGS)}",
                )
            )
        else:
            category = rng.choice(_CATEGORIES)
            facts.append(Fact(content=content, category=category, confidence=rng.random()))
    summary = (
        "Senior engineer building video tooling in Python; 负责多媒体处理流水线的设计与维护。 "
    )
    return MemoryDocument(
        user={
            "work_context": {"summary": summary * 3},
            "personal_context": {"summary": "Lives in Lyon, 喜欢跑步和摄影。"},
            "top_of_mind": {"summary": "Analysing DeerFlow's memory architecture. " * 2},
        },
        history={
            "recent_months": {"summary": "Moved the team from npm to pnpm; 迁移了 CI。 " * 2},
            "long_term_background": {"summary": "Studied physics, then worked in broadcasting."},
        },
        facts=facts,
    )


def naive_format(memory: MemoryDocument, counter: TokenCounter, max_tokens: int = 2000) -> str:
    """The same rules, written plainly: every line and the whole text tokenised on each call."""

    def esc(text: str) -> str:
        return html.escape(" ".join(p.strip() for p in text.splitlines() if p.strip()), False)

    labels = [
        ("User Context:", memory.user, ["work_context", "personal_context", "top_of_mind"]),
        ("History:", memory.history, ["recent_months", "earlier_context", "long_term_background"]),
    ]
    names = {
        "work_context": "Work",
        "personal_context": "Personal",
        "top_of_mind": "Current Focus",
        "recent_months": "Recent",
        "earlier_context": "Earlier",
        "long_term_background": "Background",
    }
    blocks = []
    for title, group, fields in labels:
        lines = [
            f"- {names[f]}: {esc(getattr(group, f).summary)}"
            for f in fields
            if esc(getattr(group, f).summary)
        ]
        if lines:
            blocks.append("\n".join([title, *lines]))
    head = "\n\n".join(blocks)

    def line(f: Fact) -> str:
        text = f"\n- [{f.category} | {f.confidence:.2f}] {esc(f.content)}"
        if f.category == "correction" and f.source_error:
            text += f" (avoid: {esc(f.source_error)})"
        return text

    def fill(facts: list[Fact], budget: int) -> tuple[list[str], int]:
        out, used = [], 0
        for f in sorted(facts, key=lambda f: -f.confidence):
            cost = counter.count(line(f))
            if used + cost <= budget:
                out.append(line(f))
                used += cost
        return out, used

    guaranteed, used = fill([f for f in memory.facts if f.category == "correction"], 500)
    header = "\n\nFacts:" if head else "Facts:"
    budget = max_tokens - (counter.count(head) if head else 0) - counter.count(header) - used
    regular, _ = fill([f for f in memory.facts if f.category != "correction"], budget)
    while regular and counter.count(f"{head}\n\nFacts:" + "".join(regular)) > max_tokens - used:
        regular.pop()
    return f"{head}\n\nFacts:" + "".join(guaranteed) + "".join(regular)


def measure(memory: MemoryDocument, counter: TokenCounter) -> dict[str, float]:
    warm = TokenCountCache()
    expected = format_memory_for_injection(memory, counter=counter, cache=warm)
    assert naive_format(memory, counter) == expected
    samples: dict[str, list[float]] = {"first call": [], "cached": [], "naive": []}
    runs = {
        "first call": lambda: format_memory_for_injection(
            memory, counter=counter, cache=TokenCountCache()
        ),
        "cached": lambda: format_memory_for_injection(memory, counter=counter, cache=warm),
        "naive": lambda: naive_format(memory, counter),
    }
    for _ in range(ROUNDS):
        for label, run in runs.items():
            gc.collect()
            gc.disable()  # as timeit does: the first-call rounds leave garbage behind
            start = time.perf_counter()
            result = run()
            samples[label].append(time.perf_counter() - start)
            gc.enable()
            assert result == expected
    return {label: statistics.median(values) for label, values in samples.items()}


def main() -> None:
    memory = build_memory()
    counters = [make_token_counter(), EstimateCounter()]
    print(f"200-fact memory (1 in 3 facts Chinese, 20 corrections), {ROUNDS} rounds, medians")
    for counter in counters:
        text = format_memory_for_injection(memory, counter=counter)
        shown = text.count("\n- [")
        print(f"\ncounter {counter.name}: {shown} facts shown, {counter.count(text)} tokens")
        medians = measure(memory, counter)
        for label, seconds in medians.items():
            print(f"  {label:<11} {seconds * 1e3:8.3f} ms")
        cached = medians["cached"]
        print(
            f"  first call / cached = {medians['first call'] / cached:5.1f}x   "
            f"naive / cached = {medians['naive'] / cached:5.1f}x   "
            f"naive / first call = {medians['naive'] / medians['first call']:4.2f}x"
        )


if __name__ == "__main__":
    main()
