"""How long memory-LLM replies are, against the reply budget (``max_tokens``) and the schema's
array bounds (issue 34): small models given room write until it runs out.

Measures, with the service's token counter, the replies of ``memory_sql/demo``'s recorded
responses and the usable replies of ``benchmarks/model_replies`` (the runaway-length case
excluded: it is there to be cut), and prints each reply's tokens and list lengths, then the
budget as a ratio to the longest reply, beside the budget of the earlier default (the memory's
own token budgets + 1 536)::

    python benchmarks/bench_reply_sizes.py
"""

from __future__ import annotations

import json
from pathlib import Path

from memory_sql import MemoryConfig
from memory_sql.config import REPLY_OVERHEAD_TOKENS
from memory_sql.demo.replay import load_recordings
from memory_sql.tokens import make_token_counter
from memory_sql.update.parser import MAX_AGING_ITEMS, MAX_NEW_FACTS, MAX_REMOVALS

FIXTURE = Path(__file__).parent / "model_replies" / "imperfect_replies.json"


def replies() -> list[tuple[str, str]]:
    found = [(f"demo:{r.match[:24]}", json.dumps(r.reply)) for r in load_recordings()]
    for case in json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]:
        if "runaway" in case["id"] or "length" in case["kind"]:
            continue
        for number, reply in enumerate(case["replies"]):
            text = reply if isinstance(reply, str) else reply.get("content") or json.dumps(reply)
            found.append((f"{case['id']}#{number}", text))
    return found


def main() -> None:
    count = make_token_counter(True, None).count
    sizes = []
    for name, text in replies():
        tokens = count(text)
        try:
            data = json.loads(text)
            lists = {k: len(v) for k, v in data.items() if isinstance(v, list)}
        except (ValueError, AttributeError):
            lists = {}
        sizes.append(tokens)
        print(f"{name:40} {tokens:5} tokens  {lists}")
    config = MemoryConfig()
    earlier = config.recall.injected_memory_max_tokens + config.recall.guaranteed_token_budget
    earlier += REPLY_OVERHEAD_TOKENS
    longest = max(sizes)
    print(f"\n{len(sizes)} replies: median {sorted(sizes)[len(sizes) // 2]}, longest {longest}")
    print(
        f"max_tokens now {config.reply_token_limit()}: {config.reply_token_limit() / longest:.1f}x"
    )
    print(f"max_tokens before {earlier}: {earlier / longest:.1f}x the longest reply")
    print(
        f"array bounds: newFacts {MAX_NEW_FACTS}, factsToRemove {MAX_REMOVALS}, "
        f"aging lists {MAX_AGING_ITEMS}"
    )


if __name__ == "__main__":
    main()
