"""Structured outputs: the update's JSON Schema sent as ``response_format``, and the ladder an
endpoint that refuses it walks down (decided once per endpoint and model, for the process)."""

from __future__ import annotations

import json
import logging

import pytest
from llm_server import ScriptedLLM, llm_config, update_reply

from memory_sql.errors import LLMError
from memory_sql.storage import open_storage
from memory_sql.update.llm import LLMClient
from memory_sql.update.parser import parse_update, update_json_schema
from memory_sql.update.updater import MemoryUpdater

PROMPT = [{"role": "user", "content": "hi"}]
SCHEMA = update_json_schema()
REPLY = json.dumps(update_reply())


def _client(llm: ScriptedLLM, **overrides) -> LLMClient:
    return LLMClient.from_config(llm_config(llm, llm_max_retries=0, **overrides), env={})


def test_the_schema_comes_from_the_parser_models_and_is_strict():
    keys = ["user", "history", "newFacts", "factsToRemove", "factsToReinforce"]
    keys += ["staleFactsToRemove", "staleFactsToExtend", "factsToConsolidate"]  # the review's
    assert set(SCHEMA["properties"]) == set(keys)
    assert SCHEMA["required"] == keys
    defs = SCHEMA["$defs"]
    for name, node in defs.items():
        assert node["additionalProperties"] is False, name
        assert node["required"] == list(node["properties"]), name
    assert set(defs["UserUpdate"]["properties"]) == {"workContext", "personalContext", "topOfMind"}
    fact_fields = {"content", "category", "confidence", "sourceError", "expectedValidDays"}
    assert fact_fields <= set(defs["NewFact"]["properties"])
    assert "title" not in json.dumps(SCHEMA) and "default" not in json.dumps(SCHEMA)


def test_a_reply_of_the_schema_shape_parses():
    section = {"summary": "", "shouldUpdate": False}
    reply = {
        "user": dict.fromkeys(SCHEMA["$defs"]["UserUpdate"]["properties"], section),
        "history": dict.fromkeys(SCHEMA["$defs"]["HistoryUpdate"]["properties"], section),
        "newFacts": [
            {
                "content": "Prefers Python",
                "category": "preference",
                "confidence": 0.9,
                "sourceError": None,
            }
        ],
        "factsToRemove": [],
    }
    assert parse_update(json.dumps(reply)).new_facts[0].content == "Prefers Python"


def test_the_schema_is_sent_strict(llm):
    llm.reply(REPLY)
    _client(llm).complete(PROMPT, schema=SCHEMA)
    form = llm.requests[0]["response_format"]
    assert form["type"] == "json_schema"
    assert form["json_schema"]["strict"] is True
    assert form["json_schema"]["schema"] == SCHEMA


def test_the_updater_sends_the_update_schema(llm, tmp_path):
    llm.reply(REPLY)
    storage = open_storage(f"sqlite:///{tmp_path / 'm.db'}")
    updater = MemoryUpdater(llm_config(llm), storage)
    try:
        conversation = [
            {"role": "user", "content": "I am a backend engineer and prefer Python."},
            {"role": "assistant", "content": "Noted."},
        ]
        assert updater.update_memory(conversation, thread_id="t1", user_id="u1").ok
    finally:
        updater.close()
        storage.close()
    assert llm.requests[0]["response_format"]["json_schema"]["schema"] == update_json_schema()


def test_a_400_to_json_schema_gets_json_object_next_once_per_process(llm, caplog):
    llm.refuse_format("json_schema", status=400)
    for _ in range(3):
        llm.reply(REPLY)
    caplog.set_level(logging.INFO, logger="memory_sql.update.llm")
    client = _client(llm)
    client.complete(PROMPT, schema=SCHEMA)
    client.complete(PROMPT, schema=SCHEMA)
    # Another client of the same endpoint and model: the decision is the process's.
    _client(llm).complete(PROMPT, schema=SCHEMA)
    kinds = [ScriptedLLM.format_of(body) for body in llm.requests]
    assert kinds == [
        "json_schema",
        "json_object+schema",
        "json_object+schema",
        "json_object+schema",
    ]
    assert llm.requests[1]["response_format"]["schema"] == SCHEMA
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "json_object+schema" in warnings[0].getMessage()


def test_a_422_walks_down_to_plain_json_mode_then_none(llm):
    for kind in ("json_schema", "json_object+schema", "json_object"):
        llm.refuse_format(kind, status=422)
    llm.reply(REPLY)
    llm.reply(REPLY)
    client = _client(llm)
    client.complete(PROMPT, schema=SCHEMA)
    client.complete(PROMPT, schema=SCHEMA)
    kinds = [ScriptedLLM.format_of(body) for body in llm.requests]
    assert kinds == ["json_schema", "json_object+schema", "json_object", "none", "none"]


def test_llama_cpp_500_naming_response_format_is_a_refusal(llm):
    message = 'Either "json_schema" or "grammar" can be specified, not response_format'
    llm.refuse_format("json_schema", status=500, message=message)
    llm.reply(REPLY)
    _client(llm).complete(PROMPT, schema=SCHEMA)
    kinds = [ScriptedLLM.format_of(body) for body in llm.requests]
    assert kinds == ["json_schema", "json_object+schema"]


def test_a_500_about_something_else_is_an_error_not_a_fallback(llm):
    llm.reply("model overloaded", status=500)
    with pytest.raises(LLMError, match="HTTP 500: model overloaded"):
        _client(llm).complete(PROMPT, schema=SCHEMA)
    assert [ScriptedLLM.format_of(body) for body in llm.requests] == ["json_schema"]


def test_modes_of_the_config(llm):
    for _ in range(4):
        llm.reply(REPLY)
    _client(llm, llm_structured_output="json_object").complete(PROMPT, schema=SCHEMA)
    _client(llm, llm_structured_output="off").complete(PROMPT, schema=SCHEMA)
    _client(llm, llm_json_mode=False).complete(PROMPT, schema=SCHEMA)
    _client(llm, llm_structured_output="json_schema").complete(PROMPT, schema=SCHEMA)
    kinds = [ScriptedLLM.format_of(body) for body in llm.requests]
    assert kinds == ["json_object", "none", "none", "json_schema"]


def test_json_schema_mode_does_not_fall_back(llm):
    llm.refuse_format("json_schema", status=400)
    with pytest.raises(LLMError, match="HTTP 400"):
        _client(llm, llm_structured_output="json_schema").complete(PROMPT, schema=SCHEMA)
    assert len(llm.requests) == 1
