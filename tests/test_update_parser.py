"""Reading the memory LLM's reply: where the JSON may hide, and what shape is accepted."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from llm_server import MALFORMED_REPLIES, update_reply

from memory_sql.errors import InvalidUpdateError
from memory_sql.update.parser import MAX_JSON_CHARS, MemoryUpdate, _drop_reasoning, parse_update

GOOD = json.dumps(update_reply())


def _assert_good(update: MemoryUpdate) -> None:
    assert update.section_updates() == {"work_context": "Backend engineer at Acme."}
    assert [(f.content, f.category, f.confidence) for f in update.new_facts] == [
        ("Prefers Python", "preference", 0.9)
    ]
    assert update.facts_to_remove == []


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(GOOD, id="plain"),
        pytest.param(json.dumps(update_reply(), indent=2), id="indented"),
        pytest.param(f"```json\n{GOOD}\n```", id="fenced"),
        pytest.param(f"```\n{GOOD}\n```\n", id="fenced without language"),
        pytest.param(f"<think>The user said {{x}}. Maybe {GOOD[:40]}</think>\n{GOOD}", id="think"),
        pytest.param(f"<THINKING>\nhmm\n</THINKING>{GOOD}", id="thinking upper-case"),
        pytest.param(f"reasoning without an opening tag</think>\n{GOOD}", id="lone </think>"),
        pytest.param(f"Here is the update:\n{GOOD}\nLet me know!", id="prose around"),
        pytest.param(f'First {{"note": "unrelated"}} then {{}} and {GOOD}', id="objects before"),
        pytest.param(json.dumps({"result": update_reply()}), id="nested in a wrapper"),
        pytest.param(f"use {{braces}} freely {GOOD}", id="braces in prose"),
    ],
)
def test_finds_the_update_wherever_it_sits(reply):
    _assert_good(parse_update(reply))


def test_takes_the_first_object_with_the_keys():
    first = update_reply(newFacts=[{"content": "First", "confidence": 0.9}])
    second = update_reply(newFacts=[{"content": "Second", "confidence": 0.9}])
    update = parse_update(json.dumps(first) + "\n" + json.dumps(second))
    assert [f.content for f in update.new_facts] == ["First"]


def test_snake_case_keys_and_ids_as_objects():
    reply = {
        "user": {"top_of_mind": {"summary": " Shipping v2 ", "should_update": True}},
        "history": {"long_term_background": {"summary": "PhD in physics", "should_update": True}},
        "new_facts": [
            {
                "content": " Uses pnpm ",
                "category": " Correction ",
                "confidence": "0.95",
                "source_error": "suggested npm",
            }
        ],
        "facts_to_remove": [{"id": "fact_a"}, "fact_b", {"id": " fact_c "}],
    }
    update = parse_update(json.dumps(reply))
    assert update.section_updates() == {
        "top_of_mind": "Shipping v2",
        "long_term_background": "PhD in physics",
    }
    fact = update.new_facts[0]
    assert (fact.content, fact.category, fact.confidence, fact.source_error) == (
        "Uses pnpm",
        "correction",
        0.95,
        "suggested npm",
    )
    assert update.facts_to_remove == ["fact_a", "fact_b", "fact_c"]


def test_defaults_and_ignored_parts():
    reply = {
        "user": {
            "workContext": {"summary": "Kept", "shouldUpdate": False},
            "personalContext": {"summary": "", "shouldUpdate": True},
            "topOfMind": {"summary": None},
            "mood": {"summary": "not a section", "shouldUpdate": True},
        },
        "history": {},
        "newFacts": [{"content": "Likes tea", "confidence": 1}],
        "factsToReinforce": [{"id": "x"}],
        "reasoning": "extra keys are ignored",
    }
    update = parse_update(json.dumps(reply))
    assert update.section_updates() == {}
    assert update.new_facts[0].category == "context"
    assert update.new_facts[0].confidence == 1.0
    assert update.facts_to_remove == []


@pytest.mark.parametrize("name", list(MALFORMED_REPLIES))
def test_malformed_reply_is_rejected_with_a_reason(name):
    started = time.perf_counter()
    with pytest.raises(InvalidUpdateError) as caught:
        parse_update(MALFORMED_REPLIES[name])
    assert time.perf_counter() - started < 0.5
    assert caught.value.reason
    assert isinstance(caught.value, ValueError)
    assert str(caught.value).startswith("invalid memory update from the LLM: ")


def test_at_least_fifteen_kinds_of_malformed_reply():
    assert len(MALFORMED_REPLIES) >= 15


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "empty"),
        ("no json here", "no JSON object"),
        (GOOD[:-10], "no complete JSON object"),
        (json.dumps({"user": {}, "history": {}}), "lacks newFacts"),
        ("[" + GOOD + "]", "JSON array"),
        (json.dumps(update_reply(newFacts=[{"content": "x", "confidence": "high"}])), "high"),
        (json.dumps(update_reply(newFacts=[{"content": " ", "confidence": 0.9}])), "empty"),
    ],
)
def test_reasons_are_readable(reply, reason):
    with pytest.raises(InvalidUpdateError, match=reason):
        parse_update(reply)


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param('{"a": [' * 40_000, id="unclosed arrays"),
        pytest.param('{"a": "' + "\\\\" * 140_000, id="unterminated string"),
        pytest.param('{"a": 1} ' * 30_000, id="many objects without the keys"),
        pytest.param('{"' * 140_000, id="object starts"),
        pytest.param("x" * (MAX_JSON_CHARS - 100) + GOOD, id="update at the end of the limit"),
        pytest.param("<think>" * 250_000, id="unclosed think tags"),
        pytest.param("<thinking>" * 100_000 + "</think>" + GOOD, id="think tags then one end"),
    ],
)
def test_hostile_input_costs_little(hostile):
    started = time.process_time()  # CPU time: other work on the machine does not count
    with contextlib.suppress(InvalidUpdateError):
        parse_update(hostile)
    assert time.process_time() - started < 0.5


def test_a_long_think_block_does_not_count_against_the_limit():
    reply = "<think>" + "pondering " * 100_000 + "</think>" + GOOD
    assert len(reply) > MAX_JSON_CHARS
    _assert_good(parse_update(reply))


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        ("<think>a</think>x<THINKING>b</thinking>y", "xy"),
        ("<think>a</thinking>x", "x"),
        ("<think>unclosed x", "<think>unclosed x"),
        ("reasoning without a start</think>x", "x"),
        ("<think>a</think><think>b</think>x</think>y", "y"),
    ],
)
def test_reasoning_blocks_are_dropped_as_before(reply, kept):
    assert _drop_reasoning(reply) == kept
