"""Conversation intake on a 200-message conversation, against json.dumps of the same messages.

Run: .venv/bin/python benchmarks/bench_intake.py

Intake (filter_messages_for_memory, then detect_correction and detect_reinforcement on the
filtered turns, as the agent hook does after every conversation) is timed next to a plain
``json.dumps`` of the raw messages, measured in the same run; the ratio is the figure to watch.

The same intake with the redactor switched off (``Redactor(enabled=False)``: intake as it was
before secrets were redacted) is timed in the same run, the two taking turns in 21 rounds; the
ratio with / without (the median of the rounds' ratios) must stay within 1.3x (issue #30).

Then one very long message (a 5 MB paste): ``after_agent`` on a SQLite service with it, next to
``after_agent`` with a 1 kB message (the ratio should stay near 1: intake cuts a message to
``MAX_MESSAGE_CHARS`` before the signals), and intake of it with the cut switched off (as it
was before), to show what the cut saves.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memory_sql.intake.filter
from memory_sql import MemoryConfig, MemoryService
from memory_sql.intake.filter import filter_messages_for_memory
from memory_sql.intake.messages import MAX_MESSAGE_CHARS
from memory_sql.intake.redact import Redactor
from memory_sql.intake.signals import detect_correction, detect_reinforcement
from memory_sql.pattern_files import load_patterns

USER_TEXTS = [
    "Can you help me refactor the billing module? I prefer small pure functions.",
    "我们的服务用 PostgreSQL 16，部署在 Kubernetes 上，帮我看看连接池配置。",
    "The tests are flaky on CI, probably a race in the queue worker.",
    "这个方案不错，但是我更喜欢用 asyncio 而不是线程。",
    "Please write the migration in Alembic, not raw SQL.",
    "把日志格式改成 JSON，字段用 snake_case。",
    "What's the difference between FOR UPDATE SKIP LOCKED and NOWAIT?",
    "I work mostly in Python and Go; keep examples in Python please.",
]
REPLIES = [
    "Here is a refactor that splits the module into three pure functions: parse, price and "
    "render. Each takes plain data and returns plain data, so the tests need no fixtures.",
    "连接池建议把 pool_size 设为 10，max_overflow 设为 5，并开启 pool_pre_ping 以避免断连。",
    "The race comes from two workers reading the same row before either marks it as taken; "
    "claiming with a lease inside one transaction fixes it.",
]
UPLOAD = (
    "<uploaded_files>\n- /mnt/user-data/uploads/schema.sql (4 KB)\n"
    "- /mnt/user-data/uploads/trace.log (120 KB)\n</uploaded_files>\n"
)
TOOL_CALL = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "billing/core.py"}'},
    }
]


def build_conversation(size: int = 200) -> list[dict[str, Any]]:
    """A realistic agent conversation: system prompt, then turns of user question, tool call,
    tool result and final reply; some questions carry uploads or list-of-parts content, some
    turns are acknowledgements, one is a correction and one a reinforcement."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    turn = 0
    while len(messages) < size:
        text = USER_TEXTS[turn % len(USER_TEXTS)]
        content: Any
        if turn == 44:
            content = "Yes, exactly, that's what I wanted."
        elif turn == 47:
            content = "不对，你理解错了，我说的是读副本。"
        elif turn % 7 == 3:
            content = UPLOAD + text
        elif turn % 5 == 2:
            content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {}}]
        elif turn % 11 == 6:
            content = "ok, thanks!" if turn % 2 else "好的，谢谢"
        else:
            content = text
        messages.append({"role": "user", "content": content})
        messages.append({"role": "assistant", "content": None, "tool_calls": TOOL_CALL})
        messages.append(
            {"role": "tool", "tool_call_id": "call_1", "content": "def price(order): ..." * 20}
        )
        messages.append({"role": "assistant", "content": REPLIES[turn % len(REPLIES)]})
        turn += 1
    return messages[:size]


NO_REDACTION = Redactor(enabled=False)


def intake(
    messages: list[dict[str, Any]], redactor: Redactor | None = None
) -> tuple[int, bool, bool]:
    filtered = filter_messages_for_memory(messages, redactor=redactor)
    return len(filtered), detect_correction(filtered), detect_reinforcement(filtered)


def median_seconds(function: Callable[[], object], repeat: int, rounds: int = 7) -> float:
    """Median over ``rounds`` of the mean time of one call, each round making ``repeat`` calls."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            function()
        times.append((time.perf_counter() - start) / repeat)
    return statistics.median(times)


def paired(
    first: Callable[[], object], second: Callable[[], object], repeat: int, rounds: int = 21
) -> tuple[float, float, float]:
    """Both functions timed in alternate rounds (``repeat`` calls each), so that a change of
    the machine's load falls on both: their median times per call, and the median of the
    rounds' ratios first / second."""
    times: tuple[list[float], list[float]] = ([], [])
    for index in range(rounds):
        pair = (first, second) if index % 2 == 0 else (second, first)
        for function in pair:
            start = time.perf_counter()
            for _ in range(repeat):
                function()
            times[function is second].append((time.perf_counter() - start) / repeat)
    ratios = [a / b for a, b in zip(*times, strict=True)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(ratios)


def main() -> None:
    messages = build_conversation()
    load_patterns()  # loaded once at start in the service as well
    kept, correction, reinforcement = intake(messages)
    dumped = len(json.dumps(messages, ensure_ascii=False))

    t_json = median_seconds(lambda: json.dumps(messages, ensure_ascii=False), repeat=200)
    t_intake, t_bare, ratio = paired(
        lambda: intake(messages), lambda: intake(messages, NO_REDACTION), repeat=100
    )

    print(f"conversation: {len(messages)} messages, {dumped} characters as JSON")
    print(f"kept {kept} turns; correction={correction} reinforcement={reinforcement}")
    print(f"intake (filter + both detectors): {t_intake * 1e6:9.1f} µs per conversation")
    print(f"json.dumps of the same messages : {t_json * 1e6:9.1f} µs per conversation")
    print(f"ratio intake / json.dumps       : {t_intake / t_json:9.2f}x")
    print(f"intake without the redactor     : {t_bare * 1e6:9.1f} µs per conversation")
    print(f"ratio with / without redactor   : {ratio:9.2f}x  (goal <= 1.3x; median of rounds)")
    long_message()


def long_message() -> None:
    paste = ("SELECT * FROM orders WHERE id = 42; -- a log line of the pasted trace\n" * 75_000)[
        :5_000_000
    ]
    short = paste[:1000]

    def chat(text: str) -> list[dict[str, str]]:
        return [
            {"role": "user", "content": "Why is this query slow? The trace:\n" + text},
            {"role": "assistant", "content": "I see: the query scans the whole table."},
        ]

    long_chat, short_chat = chat(paste), chat(short)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        with MemoryService(MemoryConfig(storage=url, model_name="m"), start=False) as service:

            def hook(messages: list[dict[str, str]]) -> None:
                assert service.after_agent(messages, thread_id="t", user_id="u")

            hook(short_chat)
            t_long = median_seconds(lambda: hook(long_chat), repeat=5, rounds=5)
            t_short = median_seconds(lambda: hook(short_chat), repeat=20, rounds=5)
    t_cut = median_seconds(lambda: intake(long_chat), repeat=5, rounds=5)
    memory_sql.intake.filter.MAX_MESSAGE_CHARS = (
        10**12
    )  # the cut switched off, as intake was before
    try:
        t_uncut = median_seconds(lambda: intake(long_chat, NO_REDACTION), repeat=1, rounds=3)
    finally:
        memory_sql.intake.filter.MAX_MESSAGE_CHARS = MAX_MESSAGE_CHARS
    print(f"\none {len(paste) / 1e6:.0f} MB message (cut at intake to {MAX_MESSAGE_CHARS} chars):")
    print(f"after_agent, 5 MB message       : {t_long * 1e3:9.2f} ms")
    print(f"after_agent, 1 kB message       : {t_short * 1e3:9.2f} ms")
    print(f"ratio 5 MB / 1 kB               : {t_long / t_short:9.2f}x")
    print(f"intake of it, cut               : {t_cut * 1e3:9.2f} ms")
    print(f"intake of it, not cut (before)  : {t_uncut * 1e3:9.2f} ms")
    print(f"ratio not cut / cut             : {t_uncut / t_cut:9.0f}x")


if __name__ == "__main__":
    main()
