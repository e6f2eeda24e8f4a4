"""The fixtures of ``benchmarks/model_replies``, replayed through the scripted LLM server and the
real updater: hand-written imperfect replies of the kinds small local models give, and the
real replies of SmolLM2-135M-Instruct (llama-cpp-python) to the update prompt. Whatever the
reply, the memory afterwards is right or unchanged, never junk; the hand-written set, whose
replies each hold the answer, always comes out right."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from llm_server import ScriptedLLM, llm_config

from memory_sql import Fact, MemoryDocument
from memory_sql.storage import open_storage
from memory_sql.update.updater import MemoryUpdater

FIXTURES = Path(__file__).resolve().parent.parent / "benchmarks" / "model_replies"
sys.path.insert(0, str(FIXTURES.parent))
from bench_models import _judge  # noqa: E402  (the benchmark's own judge of a memory)

CASES = [
    pytest.param(path.name, case, id=f"{path.stem}:{case['id']}")
    for path in sorted(FIXTURES.glob("*.json"))
    for case in json.loads(path.read_text(encoding="utf-8"))["cases"]
]


@pytest.mark.parametrize(("fixture", "case"), CASES)
def test_a_replayed_reply_leaves_the_memory_right_or_unchanged(fixture, case, tmp_path, llm):
    replies = case["replies"]

    def answer(body: dict) -> str:  # asked again: the last reply again, as a model at rest
        return replies[-1]["content"]

    for reply in replies:
        llm.reply(
            reply["content"],
            finish_reason=reply.get("finish_reason", "stop"),
            prompt_tokens=reply.get("prompt_tokens"),
            completion_tokens=reply.get("completion_tokens"),
        )
    llm.responder = answer
    storage = open_storage(f"sqlite:///{tmp_path / 'm.db'}")
    storage.save(
        MemoryDocument(facts=[Fact(**fact) for fact in case["memory"]]),
        user_id="u",
        expected_version=0,
    )
    updater = MemoryUpdater(llm_config(llm, llm_max_retries=0), storage)
    try:
        result = updater.update_memory(case["conversation"], thread_id="t", user_id="u")
        after = storage.load(user_id="u")
    finally:
        updater.close()
        storage.close()
    correct, junk = _judge(case, after, {fact["id"] for fact in case["memory"]})
    assert junk == [], (result, junk)
    unchanged = {f.id for f in after.facts} == {f["id"] for f in case["memory"]} and not any(
        section.summary for section in after.sections().values()
    )
    assert correct or unchanged, result
    if fixture == "imperfect_replies.json" and case["kind"] != "runaway":
        assert correct, result
    assert len(llm.requests) <= 2  # at most one repair
    if not result.ok:
        assert result.error
    assert all(isinstance(n, int) and n > 0 for n in result.rejected.values())


def test_the_hand_written_set_covers_every_failure_kind_of_the_issue():
    cases = json.loads((FIXTURES / "imperfect_replies.json").read_text(encoding="utf-8"))
    kinds = {case["kind"] for case in cases["cases"]}
    assert {
        "out_of_range_confidence",
        "empty",
        "placeholder",
        "raw_newline",
        "label_missing",
        "one_off",
        "runaway",
    } <= kinds


def test_scripted_server_sends_the_recorded_finish_reason(llm: ScriptedLLM):
    from memory_sql.update.llm import LLMClient

    llm.reply("{", finish_reason="length", completion_tokens=4036)
    completion = LLMClient.from_config(llm_config(llm), env={}).complete(
        [{"role": "user", "content": "hi"}]
    )
    assert completion.cut and completion.completion_tokens == 4036
