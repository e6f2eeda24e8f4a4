"""What the durable watermark saves: memory-LLM prompt tokens for 100 threads of 60 turns, with
and without it, and the LLM calls "nothing new" saves.

Run: .venv/bin/python benchmarks/bench_llm_cost.py [--threads 100] [--turns 60]

Each thread is a seeded mix of message lengths (short questions, paragraphs, pasted code and
logs, long answers) in English and Chinese. The debounce fires every 3 to 8 turns; after one
update in five a second one fires with no new user turn (an agent's follow-up, a re-queued
conversation). Every update builds the real prompt
(:func:`memory_sql.update.prompt.build_update_prompt`, on a memory of 30 facts) from the
conversation as the service would send it: the whole of it (before this revision), or the turns
after the watermark plus its marked context (:func:`memory_sql.update.watermark.split`). Tokens
are counted with ``make_token_counter()`` (tiktoken cl100k_base when installed, else the
CJK-aware estimate) over the chat messages' text. The goal
is at most 0.35× the prompt tokens of the baseline.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from memory_sql.intake.filter import filter_messages_for_memory
from memory_sql.models import Fact, MemoryDocument
from memory_sql.tokens import make_token_counter
from memory_sql.update.prompt import build_update_prompt
from memory_sql.update.watermark import Mark, message_key, split

GOAL = 0.35
EN_WORDS = [
    "the",
    "billing",
    "service",
    "migration",
    "schema",
    "index",
    "query",
    "latency",
    "deploy",
    "rollback",
    "cache",
    "worker",
    "queue",
    "retry",
    "timeout",
    "config",
    "test",
    "fixture",
    "branch",
    "review",
    "merge",
    "release",
    "metric",
    "alert",
]
ZH_PHRASES = [
    "账单服务",
    "数据库迁移",
    "索引",
    "查询延迟",
    "部署",
    "回滚",
    "缓存",
    "消息队列",
    "重试",
    "超时",
    "配置",
    "测试",
]


def _english(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(EN_WORDS) for _ in range(words)).capitalize() + "."


def _chinese(rng: random.Random, phrases: int) -> str:
    return "，".join(rng.choice(ZH_PHRASES) for _ in range(phrases)) + "。"


def _text(rng: random.Random, chinese: bool, kind: str) -> str:
    sizes = {"short": (6, 20), "paragraph": (40, 120), "paste": (150, 400), "answer": (80, 350)}
    low, high = sizes[kind]
    n = rng.randint(low, high)
    if kind == "paste":
        return "\n".join(f"line {i}: {_english(rng, 8)}" for i in range(n // 8))
    return _chinese(rng, max(1, n // 3)) if chinese else _english(rng, n)


def thread_turns(seed: int, turns: int) -> list[dict]:
    rng = random.Random(seed)
    chinese = rng.random() < 0.35
    messages: list[dict] = []
    for n in range(turns):
        kind = rng.choices(["short", "paragraph", "paste"], weights=[5, 4, 1])[0]
        messages.append({"role": "user", "content": f"({n}) " + _text(rng, chinese, kind)})
        messages.append({"role": "assistant", "content": _text(rng, chinese, "answer")})
    return messages


def memory() -> MemoryDocument:
    doc = MemoryDocument()
    doc.facts = [
        Fact(
            content=f"Prefers {word} tooling for project {i}", category="preference", confidence=0.9
        )
        for i, word in enumerate(EN_WORDS[:30])
    ]
    doc.user.work_context.summary = (
        "Backend engineer on the billing service; Python and PostgreSQL."
    )
    return doc


def run(threads: int, turns: int) -> dict[str, float]:
    counter = make_token_counter()
    doc = memory()
    totals = {"baseline_tokens": 0, "watermark_tokens": 0, "baseline_calls": 0, "calls": 0}

    def tokens(prompt: list[dict[str, str]]) -> int:
        return sum(counter.count(m["content"]) for m in prompt)

    for seed in range(threads):
        rng = random.Random(10_000 + seed)
        raw = thread_turns(seed, turns)
        mark: Mark | None = None
        done = 0
        triggers: list[int] = []
        while done < turns:
            done = min(turns, done + rng.randint(3, 8))
            triggers.append(done)
            if rng.random() < 0.2:
                triggers.append(done)  # fires again with no new user turn
        for upto in triggers:
            conversation = filter_messages_for_memory(raw[: 2 * upto])
            baseline = build_update_prompt(doc, conversation, correction=False, reinforcement=False)
            totals["baseline_tokens"] += tokens(baseline)
            totals["baseline_calls"] += 1
            cut = split(conversation, mark, counter)
            if any(m.role == "user" for m in cut.new):
                prompt = build_update_prompt(
                    doc, cut.new, correction=False, reinforcement=False, context=cut.context
                )
                totals["watermark_tokens"] += tokens(prompt)
                totals["calls"] += 1
            mark = Mark(message_key(conversation[-1]), len(conversation) - 1)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    totals = run(args.threads, args.turns)
    ratio = totals["watermark_tokens"] / totals["baseline_tokens"]
    saved = totals["baseline_calls"] - totals["calls"]
    print(f"{args.threads} threads × {args.turns} turns, tokens by {make_token_counter().name}")
    print(f"  prompt tokens without the watermark: {totals['baseline_tokens']:>12,}")
    print(f"  prompt tokens with the watermark:    {totals['watermark_tokens']:>12,}")
    verdict = "PASS" if ratio <= GOAL else "FAIL"
    print(f"  ratio: {ratio:.3f}× (goal ≤ {GOAL}×) {verdict}")
    print(
        f"  LLM calls: {totals['baseline_calls']:,} without, {totals['calls']:,} with "
        f"({saved:,} saved by 'nothing new', {saved / totals['baseline_calls']:.1%})"
    )


if __name__ == "__main__":
    main()
