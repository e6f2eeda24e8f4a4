"""The JSON Schema sent as ``response_format`` and the parser agree: every reply valid under the
schema is accepted (property-based, with instances generated from the schema itself), losing no
part except one whose text is a placeholder or worded as an instruction; and the schema checked
is the one sent."""

from __future__ import annotations

import json

import jsonschema
from hypothesis import HealthCheck, given, settings
from llm_server import ScriptedLLM, llm_config, update_reply
from schema_strategy import from_schema

from memory_sql.errors import InvalidUpdateError
from memory_sql.intake.instructions import instruction_in
from memory_sql.update.llm import LLMClient
from memory_sql.update.parser import (
    CONFIDENCE_TOLERANCE,
    MAX_FACT_CHARS,
    MAX_NEW_FACTS,
    MAX_REMOVALS,
    parse_update,
    placeholder,
    update_json_schema,
)

SCHEMA = update_json_schema()


def _expected_drops(instance: dict) -> tuple[list[str], int]:
    """The reasons the parser may drop parts of ``instance`` for (placeholder text, or text
    worded as an instruction to the assistant), and how many parts it has in all."""
    reasons: list[str] = []
    parts = 0
    for group in ("user", "history"):
        for section in instance[group].values():
            parts += 1
            summary = section["summary"].replace("\x00", "")
            if summary.strip() and (reason := _refused(summary)):
                reasons.append(reason)
    for fact in instance["newFacts"]:
        parts += 1
        content = fact["content"].replace("\x00", "")
        if reason := _refused(content):
            reasons.append(reason)
        else:  # a kept fact's replaced ids, each read on its own
            reasons += [reason for fact_id in fact["replaces"] if (reason := _drop(fact_id))]
    # A removal is applied only with what replaces it: a refused new fact holds back every
    # removal of the reply that is otherwise kept.
    fact_refused = any(_refused(f["content"].replace("\x00", "")) for f in instance["newFacts"])
    for key in ("factsToRemove", "factsToReinforce"):
        for fact_id in instance[key]:
            parts += 1
            if _drop(fact_id):
                reasons.append(_drop(fact_id))
            elif key == "factsToRemove" and fact_refused:
                reasons.append("replacement_refused")
    for key in ("staleFactsToRemove", "staleFactsToExtend"):
        for item in instance[key]:
            parts += 1
            if _drop(item["id"]):
                reasons.append(_drop(item["id"]))
    for group in instance["factsToConsolidate"]:
        parts += 1
        first = next((reason for text in group["sourceIds"] if (reason := _drop(text))), None)
        first = first or _refused(group["consolidated"]["content"].replace("\x00", ""))
        if first:
            reasons.append(first)
    return sorted(reasons), parts


def _refused(text: str) -> str | None:
    """Why the parser refuses the stored text ``text`` (None: it keeps it)."""
    if placeholder(text):
        return "empty" if not text.strip() else "placeholder"
    return "instruction" if instruction_in(text.strip()) else None


def _drop(text: str) -> str | None:
    """Why the parser drops the id or text ``text`` (None: it keeps it)."""
    text = text.replace("\x00", "")
    if not placeholder(text):
        return None
    return "empty" if not text.strip() else "placeholder"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(from_schema(update_json_schema()))
def test_every_instance_valid_under_the_schema_is_accepted(instance):
    jsonschema.validate(instance, SCHEMA)  # the generator makes only valid instances
    reasons, parts = _expected_drops(instance)
    try:
        update = parse_update(json.dumps(instance))
    except InvalidUpdateError as exc:
        # Only when every part of it is a placeholder.
        assert len(reasons) == parts, exc
        return
    assert sorted(item.reason for item in update.dropped) == reasons
    contents = [fact["content"].replace("\x00", "") for fact in instance["newFacts"]]
    kept = [f for f, text in zip(instance["newFacts"], contents, strict=True) if not _refused(text)]
    assert [fact.content for fact in update.new_facts] == [
        text.strip() for text in contents if not _refused(text)
    ]
    for fact, given_fact in zip(update.new_facts, kept, strict=True):
        assert fact.confidence == given_fact["confidence"]
        assert fact.category == given_fact["category"]
        assert (fact.scope, fact.durability, fact.authority) == (
            given_fact["scope"],
            given_fact["durability"],
            given_fact["authority"],
        )


def test_the_schema_states_the_parsers_limits():
    defs = SCHEMA["$defs"]
    fact = defs["NewFact"]["properties"]
    assert fact["confidence"] == {"maximum": 1.0, "minimum": 0.0, "type": "number"}
    assert fact["content"] == {"maxLength": MAX_FACT_CHARS, "minLength": 1, "type": "string"}
    assert set(fact["category"]["enum"]) == {
        "preference",
        "knowledge",
        "context",
        "behavior",
        "goal",
        "correction",
    }
    assert fact["scope"]["enum"] == ["user", "thread", "project"]
    assert SCHEMA["properties"]["newFacts"]["maxItems"] == MAX_NEW_FACTS
    assert SCHEMA["properties"]["factsToRemove"]["maxItems"] == MAX_REMOVALS
    assert "maxLength" in defs["SectionUpdate"]["properties"]["summary"]
    assert CONFIDENCE_TOLERANCE > 0  # out of the schema's range, the parser still reads a little


def test_what_the_schema_refuses_the_parser_refuses_or_repairs():
    """The other direction, where it matters: a confidence over the schema's maximum by more
    than the tolerance, and text over maxLength, are invalid under the schema and dropped."""
    too_sure = update_reply(
        newFacts=[{**update_reply()["newFacts"][0], "confidence": 1 + 2 * CONFIDENCE_TOLERANCE}]
    )
    long = update_reply(
        newFacts=[{**update_reply()["newFacts"][0], "content": "x" * (MAX_FACT_CHARS + 1)}]
    )
    for reply, reason in ((too_sure, "confidence_out_of_range"), (long, "too_long")):
        validator = jsonschema.Draft202012Validator(SCHEMA)
        assert not validator.is_valid(_complete(reply))
        assert parse_update(json.dumps(reply)).rejected == {reason: 1}


def _complete(reply: dict) -> dict:
    """``reply`` with every property the strict schema requires."""
    section = {"summary": "", "shouldUpdate": False, "scope": "user"}
    section |= {"durability": "durable", "authority": "descriptive"}
    out = {
        "user": dict.fromkeys(SCHEMA["$defs"]["UserUpdate"]["properties"], section),
        "history": dict.fromkeys(SCHEMA["$defs"]["HistoryUpdate"]["properties"], section),
        "newFacts": [{"sourceError": None, **fact} for fact in reply["newFacts"]],
        "factsToRemove": reply["factsToRemove"],
    }
    for fact in out["newFacts"]:
        fact.setdefault("expectedValidDays", None)
        fact.setdefault("replaces", [])
    for key in SCHEMA["properties"]:
        out.setdefault(key, [])
    return out


def test_the_schema_checked_is_the_one_sent(llm: ScriptedLLM):
    llm.reply(json.dumps(update_reply()))
    client = LLMClient.from_config(llm_config(llm, llm_max_retries=0), env={})
    client.complete([{"role": "user", "content": "hi"}], schema=update_json_schema())
    sent = llm.requests[0]["response_format"]["json_schema"]["schema"]
    assert sent == SCHEMA
    jsonschema.Draft202012Validator.check_schema(sent)
