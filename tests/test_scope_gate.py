"""The scope gate: only facts and section rewrites the LLM labels user-scoped, durable and
descriptive are stored; the rest are counted by reason and logged at DEBUG with their text."""

from __future__ import annotations

import json
import logging

import pytest
from llm_server import LABELS, llm_config

from memory_sql.config import MemoryConfig
from memory_sql.models import MemoryDocument, utcnow
from memory_sql.storage import open_storage
from memory_sql.update.parser import parse_update
from memory_sql.update.prompt import SYSTEM_PROMPT
from memory_sql.update.updater import MemoryUpdater, apply_update, gate_reason

CONVERSATION = [
    {"role": "user", "content": "For this report use British spelling. I'm in a hurry today."},
    {"role": "assistant", "content": "Understood: British spelling for this report."},
    {"role": "user", "content": "And no, I use PostgreSQL, not MySQL."},
    {"role": "assistant", "content": "Noted, PostgreSQL."},
]

GATED_REPLY = {
    "user": {
        "workContext": {
            "summary": "Writing the quarterly report; step 2 is the appendix.",
            "shouldUpdate": True,
            "scope": "user",
            "durability": "durable",
            "authority": "transactional",
        },
    },
    "history": {},
    "newFacts": [
        {
            "content": "Wants British spelling in the report",
            "category": "preference",
            "confidence": 0.95,
            "scope": "thread",
            "durability": "temporary",
            "authority": "transactional",
        },
        {
            "content": "Is in a hurry",
            "category": "context",
            "confidence": 0.9,
            "scope": "user",
            "durability": "temporary",
            "authority": "descriptive",
        },
        {
            "content": "Uses PostgreSQL, not MySQL",
            "category": "correction",
            "confidence": 0.97,
            "sourceError": "Assumed MySQL",
            "scope": "user",
            "durability": "durable",
            "authority": "transactional",
        },
    ],
    "factsToRemove": [],
}


def test_task_rule_temporary_fact_and_transactional_section_are_kept_out(tmp_path, llm, caplog):
    llm.reply(json.dumps(GATED_REPLY))
    storage = open_storage(f"sqlite:///{tmp_path / 'm.db'}")
    updater = MemoryUpdater(llm_config(llm), storage)
    caplog.set_level(logging.DEBUG, logger="memory_sql.update.updater")
    try:
        result = updater.update_memory(CONVERSATION, thread_id="t1", user_id="u1")
        doc = storage.load(user_id="u1")
    finally:
        updater.close()
        storage.close()
    assert result.ok
    assert result.rejected == {"thread_scope": 1, "temporary": 1, "transactional": 1}
    assert sum(result.rejected.values()) == 3
    # The user-scoped correction is stored, however it is phrased.
    assert [(f.content, f.category) for f in doc.facts] == [
        ("Uses PostgreSQL, not MySQL", "correction")
    ]
    assert doc.user.work_context.summary == ""
    assert result.sections_updated == ()
    gated = [r.getMessage() for r in caplog.records if "scope gate" in r.getMessage()]
    assert len(gated) == 3 and all(
        r.levelname == "DEBUG" for r in caplog.records if "scope gate" in r.getMessage()
    )
    assert any("British spelling" in line and "thread_scope" in line for line in gated)
    assert any("appendix" in line and "transactional" in line for line in gated)


def _unlabeled() -> str:
    return json.dumps(
        {
            "user": {"workContext": {"summary": "Engineer at Acme.", "shouldUpdate": True}},
            "history": {},
            "newFacts": [
                {"content": "Prefers Python", "category": "preference", "confidence": 0.9}
            ],
        }
    )


def test_unlabeled_items_are_not_stored_by_default_and_counted():
    doc, changes = apply_update(
        MemoryDocument(),
        parse_update(_unlabeled()),
        thread_id="t",
        config=MemoryConfig(),
        now=utcnow(),
    )
    assert not changes and doc.facts == []
    assert [(kind, reason) for kind, _, reason in changes.gated] == [
        ("section", "label_missing"),
        ("fact", "label_missing"),
    ]


def test_the_switch_stores_unlabeled_items_as_before_the_gate():
    config = MemoryConfig(scope_gate_allow_unlabeled=True)
    doc, changes = apply_update(
        MemoryDocument(), parse_update(_unlabeled()), thread_id="t", config=config, now=utcnow()
    )
    assert [f.content for f in doc.facts] == ["Prefers Python"]
    assert changes.sections_updated == ("work_context",) and changes.gated == ()
    # Labels that are given are still obeyed under the switch.
    reply = json.loads(_unlabeled())
    reply["newFacts"][0]["scope"] = "project"
    _, changes = apply_update(
        MemoryDocument(),
        parse_update(json.dumps(reply)),
        thread_id="t",
        config=config,
        now=utcnow(),
    )
    assert [reason for _, _, reason in changes.gated] == ["project_scope"]


@pytest.mark.parametrize(
    ("labels", "correction", "reason"),
    [
        (LABELS, False, None),
        ({**LABELS, "scope": "project"}, False, "project_scope"),
        ({**LABELS, "durability": "temporary"}, False, "temporary"),
        ({**LABELS, "authority": "transactional"}, False, "transactional"),
        ({**LABELS, "scope": "session"}, False, "label_unknown"),
        ({**LABELS, "authority": 3}, False, "label_unknown"),
        ({"scope": "user"}, False, "label_missing"),
        ({"scope": "user"}, True, None),
        ({"scope": "USER", "durability": "temporary"}, True, None),
        ({**LABELS, "scope": "thread"}, True, "thread_scope"),
        ({}, True, "label_missing"),
    ],
)
def test_gate_reasons(labels, correction, reason):
    fact = {"content": "x", "confidence": 0.9, **labels}
    reply = {"user": {}, "history": {}, "newFacts": [fact]}
    [proposed] = parse_update(json.dumps(reply)).new_facts
    assert gate_reason(proposed, correction=correction, allow_unlabeled=False) == reason


def test_labels_never_make_a_reply_malformed():
    reply = {
        "user": {},
        "history": {},
        "newFacts": [{"content": "x", "confidence": 0.9, "scope": []}],
    }
    assert parse_update(json.dumps(reply)).new_facts[0].scope == "invalid"


def test_the_prompt_asks_for_the_three_labels():
    for needle in (
        '"scope"',
        '"durability"',
        '"authority"',
        '"thread"',
        '"temporary"',
        '"transactional"',
    ):
        assert needle in SYSTEM_PROMPT, needle


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("Wants British spelling for this report", "one_off"),
        ("Is in a hurry today", "one_off"),
        ("Wants the answer in bullet points in this conversation", "one_off"),
        ("这次报告用英式拼写", "one_off"),
        ("Prefers British spelling", None),
        ("Works on this project's billing service", None),
        ("Has written Python daily for ten years", None),
    ],
)
def test_a_one_off_rule_labelled_durable_is_kept_out(content, reason):
    fact = {"content": content, "confidence": 0.9, **LABELS}
    [proposed] = parse_update(json.dumps({"newFacts": [fact]})).new_facts
    found = gate_reason(proposed, correction=False, allow_unlabeled=False, text=proposed.content)
    assert found == reason
    _, changes = apply_update(
        MemoryDocument(),
        parse_update(json.dumps({"newFacts": [fact]})),
        thread_id="t",
        config=MemoryConfig(),
        now=utcnow(),
    )
    assert bool(changes.facts_added) is (reason is None)
