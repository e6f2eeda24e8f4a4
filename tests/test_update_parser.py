"""Reading the memory LLM's reply: where the JSON may hide, and what shape is accepted."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from llm_server import FLAWED_REPLIES, LABELS, MALFORMED_REPLIES, update_reply

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


def test_at_least_thirty_kinds_of_imperfect_reply():
    assert len(MALFORMED_REPLIES) >= 10 and len(FLAWED_REPLIES) >= 20


@pytest.mark.parametrize("name", list(FLAWED_REPLIES))
def test_a_bad_part_is_dropped_with_its_reason_and_the_rest_kept(name):
    reply, reason, sections, facts = FLAWED_REPLIES[name]
    update = parse_update(reply)
    assert [item.reason for item in update.dropped] == [reason]
    assert update.rejected == {reason: 1}
    assert update.section_updates() == sections
    assert [fact.content for fact in update.new_facts] == facts


def test_every_reason_is_exercised_by_the_fixtures():
    from memory_sql.update.rejections import PARSE_REASONS

    assert {reason for _, reason, _, _ in FLAWED_REPLIES.values()} == set(PARSE_REASONS) - {
        "too_many"
    }


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "empty"),
        ("no json here", "no JSON object"),
        (GOOD[:-10], "no complete JSON object"),
        ("[" + GOOD + "]", "JSON array"),
        (
            json.dumps(
                {"user": {}, "history": {}, "newFacts": [{"content": "x", "confidence": "high"}]}
            ),
            r"no usable part in the reply \(confidence_invalid ×1; newFacts.0.confidence: "
            "confidence 'high' is not a number",
        ),
        (
            json.dumps({"newFacts": [{"content": " ", "confidence": 0.9}, {"content": "…"}]}),
            r"\(empty ×1, placeholder ×1; newFacts.0.content: content is empty\)",
        ),
    ],
)
def test_reasons_are_readable(reply, reason):
    with pytest.raises(InvalidUpdateError, match=reason) as caught:
        parse_update(reply)
    assert sum(caught.value.rejected.values()) == caught.value.reason.count("×") or (
        not caught.value.rejected
    )


def test_a_reply_without_a_part_is_nothing_to_learn_not_an_error():
    update = parse_update('{"user": {}, "history": {}, "newFacts": []}')
    assert update.dropped == () and update.new_facts == [] and update.section_updates() == {}
    # A small model's reply that leaves a part out is read for what it has.
    update = parse_update(json.dumps({"newFacts": update_reply()["newFacts"]}))
    assert [fact.content for fact in update.new_facts] == ["Prefers Python"]


def test_raw_control_characters_inside_strings_are_read():
    reply = GOOD.replace("Backend engineer at Acme.", "Backend engineer\nat Acme,\tin Lisbon.")
    assert "\n" in reply
    update = parse_update(reply)
    assert update.section_updates() == {"work_context": "Backend engineer\nat Acme,\tin Lisbon."}


@pytest.mark.parametrize(
    ("given", "read"),
    [(1.0, 1.0), (1.2, 1.0), (1.25, 1.0), ("1.1", 1.0), (-0.2, 0.0), (0.0, 0.0), (0.42, 0.42)],
)
def test_a_confidence_a_little_outside_the_range_is_clamped(given, read):
    fact = {"content": "Prefers Python", "confidence": given, **LABELS}
    [parsed] = parse_update(json.dumps(update_reply(newFacts=[fact]))).new_facts
    assert parsed.confidence == read


@pytest.mark.parametrize("given", [1.26, 1.5, 5, 90, -0.26, -1])
def test_a_confidence_further_out_is_refused(given):
    fact = {"content": "Prefers Python", "confidence": given, **LABELS}
    update = parse_update(json.dumps(update_reply(newFacts=[fact])))
    assert update.new_facts == [] and update.rejected == {"confidence_out_of_range": 1}


@pytest.mark.parametrize(
    "text",
    [
        "...",
        "…",
        " - ",
        "?!",
        "string",
        "Fact_ID",
        "N/A",
        "<one sentence about the user>",
        "<the complete new summary>",
        "<anything in brackets>",
        "{name}",
        '"summary"',
        "TODO.",
        "1",
        "16",
        " 2. ",
        "3.14",
    ],
)
def test_placeholders(text):
    from memory_sql.update.parser import placeholder

    assert placeholder(text)


@pytest.mark.parametrize(
    "text",
    ["Prefers Python", "我喜欢咖啡", "Uses C", "Is 42", "Is a <b>bold</b> writer", "Likes strings"],
)
def test_real_text_is_no_placeholder(text):
    from memory_sql.update.parser import placeholder

    assert not placeholder(text)


def test_the_prompt_example_stores_nothing_if_echoed():
    """The example reply in the system prompt is not JSON (its slots are unquoted), so a copy
    of it is no answer; with its slots quoted it yields no fact, section or removal: every
    value in it that could be stored is refused."""
    from memory_sql.update.prompt import EXAMPLE_TEXTS, SYSTEM_PROMPT

    example = SYSTEM_PROMPT[SYSTEM_PROMPT.index("{\n") : SYSTEM_PROMPT.rindex("}") + 1]
    with pytest.raises(InvalidUpdateError):
        parse_update(example)
    for slot in EXAMPLE_TEXTS:
        assert f'"{slot}"' not in SYSTEM_PROMPT
        example = example.replace(slot, json.dumps(slot))
    update = parse_update(example)
    assert update.new_facts == [] and update.section_updates() == {}
    assert update.facts_to_remove == []
    assert update.rejected == {"placeholder": 3}


def test_facts_past_max_items_are_dropped_as_too_many():
    from memory_sql.update.parser import MAX_NEW_FACTS

    facts = [
        {"content": f"Knows language {i}", "confidence": 0.9} for i in range(MAX_NEW_FACTS + 3)
    ]
    update = parse_update(json.dumps(update_reply(newFacts=facts)))
    assert len(update.new_facts) == MAX_NEW_FACTS
    assert update.rejected == {"too_many": 3}


def test_dropped_parts_are_not_stored_with_the_reply():
    reply, *_ = FLAWED_REPLIES["placeholder content"]
    update = parse_update(reply)
    again = MemoryUpdate.model_validate_json(update.model_dump_json())
    assert update.dropped and again.dropped == ()
    assert again.new_facts == update.new_facts


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


def test_aging_items_are_read_one_by_one_and_a_bad_one_is_dropped_and_counted():
    fact = {**update_reply()["newFacts"][0], "expectedValidDays": "40"}
    fact["replaces"] = ["fact_old", "...", 7]
    reply = update_reply(
        newFacts=[fact],
        factsToReinforce=["fact_kept", "fact_id"],
        staleFactsToRemove=["fact_stale", {"id": "<id of a fact in the current memory>"}, {}],
        staleFactsToExtend=[
            {"id": "fact_long", "extend_by_days": "99999", "reason": "still true " * 100},
            {"id": "fact_bad", "extend_by_days": "soon"},
        ],
        factsToConsolidate=[
            {"sourceIds": ["fact_x", "fact_y"], "consolidated": {"content": "Uses vim daily"}},
            {"sourceIds": ["fact_x", "fact_z"], "consolidated": {"content": "   "}},
        ],
    )
    update = parse_update(json.dumps(reply))
    [kept] = update.new_facts
    assert (kept.expected_valid_days, kept.replaces) == (40, ["fact_old"])
    assert update.facts_to_reinforce == ["fact_kept"]
    assert [item.id for item in update.stale_facts_to_remove] == ["fact_stale"]
    [extension] = update.stale_facts_to_extend
    assert extension.id == "fact_long" and extension.extend_by_days == 36_500
    assert len(extension.reason or "") == 300  # cut for the log, not refused
    [group] = update.facts_to_consolidate
    assert group.source_ids == ["fact_x", "fact_y"]
    kinds = sorted((item.kind, item.reason) for item in update.dropped)
    assert kinds == [
        ("consolidation", "empty"),
        ("reinforcement", "placeholder"),
        ("replacement", "malformed"),
        ("replacement", "placeholder"),
        ("stale_extension", "malformed"),
        ("stale_removal", "malformed"),
        ("stale_removal", "placeholder"),
    ]


def test_a_reply_of_only_aging_items_is_found_and_kept():
    update = parse_update(json.dumps({"staleFactsToRemove": [{"id": "fact_a", "reason": "old"}]}))
    assert [item.id for item in update.stale_facts_to_remove] == ["fact_a"]
    with pytest.raises(InvalidUpdateError) as caught:
        parse_update(json.dumps({"user": {}, "staleFactsToRemove": [{"id": "..."}]}))
    assert caught.value.rejected == {"placeholder": 1}
