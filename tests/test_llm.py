"""The LLM client against a real chat-completions server on 127.0.0.1, through the real
``openai`` client: replies, retries, timeouts, errors, JSON mode and settings."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
from llm_server import ScriptedLLM, llm_config

from memory_sql.config import MemoryConfig
from memory_sql.errors import LLMError, MemorySQLError
from memory_sql.update.llm import Completion, LLMClient, _plain_http

PROMPT = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "hi"}]


def _client(llm: ScriptedLLM, **overrides) -> LLMClient:
    return LLMClient.from_config(llm_config(llm, **overrides), env={})


def test_reply_text_tokens_and_request(llm):
    llm.reply('{"ok": true}', prompt_tokens=123, completion_tokens=7)
    with _client(llm, llm_temperature=0.3) as client:
        completion = client.complete(PROMPT)
    assert completion == Completion('{"ok": true}', 123, 7, "test-model", "stop")
    assert not completion.cut
    [body] = llm.requests
    assert body["model"] == "test-model"
    assert body["messages"] == PROMPT
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == MemoryConfig().reply_token_limit() == 2048
    assert body["response_format"] == {"type": "json_object"}
    assert llm.request_headers[0]["authorization"] == "Bearer sk-test"


def test_a_first_try_and_a_retry_send_the_sdks_headers(llm, monkeypatch):
    """The first try is posted outside the SDK's request building, the retry through it: both
    carry the headers the SDK sends (the organization it reads from the environment too)."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-42")
    llm.reply("busy", status=503)
    llm.reply('{"ok": true}')
    assert _client(llm, llm_max_retries=1).complete(PROMPT).text == '{"ok": true}'
    first, retry = llm.request_headers
    for headers in (first, retry):
        assert headers["authorization"] == "Bearer sk-test"
        assert headers["openai-organization"] == "org-42"
        assert headers["content-type"] == "application/json"
        assert headers["user-agent"].startswith("OpenAI/Python")
    assert llm.requests[0] == llm.requests[1]


def test_a_plain_http_endpoint_keeps_one_connection_per_thread(llm):
    """To an http:// endpoint each thread reuses its kept-alive connection; one the server
    dropped while idle is replaced, the call sent once."""
    client = _client(llm, llm_max_retries=0)
    for text in ("one", "two", "three"):
        llm.reply(text)
    assert client.complete(PROMPT).text == "one"
    assert client.complete(PROMPT).text == "two"
    [connection] = client._opened
    connection.sock.shutdown(socket.SHUT_RDWR)  # as a server closing it does
    assert client.complete(PROMPT).text == "three"
    assert len(llm.requests) == 3
    assert len(client._opened) == 1 and client._opened[0] is not connection
    client.close()
    assert client._opened == []


def test_a_proxy_in_the_environment_leaves_the_request_to_httpx(monkeypatch):
    for name in ("HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    url = "http://10.1.2.3:8000/v1"
    assert _plain_http(url) == ("10.1.2.3", 8000, "/v1/chat/completions")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert _plain_http(url) is None
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    assert _plain_http(url) == ("10.1.2.3", 8000, "/v1/chat/completions")
    assert _plain_http("https://api.openai.com/v1") is None


def test_client_is_built_lazily_and_reused(llm):
    client = _client(llm)
    assert client._client is None
    llm.reply("one")
    llm.reply("two")
    assert client.complete(PROMPT).text == "one"
    first = client._client
    assert client.complete(PROMPT).text == "two"
    assert client._client is first
    client.close()
    assert client._client is None


def test_server_error_then_success_is_retried(llm):
    llm.reply("overloaded", status=500)
    llm.reply("fine")
    assert _client(llm, llm_max_retries=1).complete(PROMPT).text == "fine"
    assert len(llm.requests) == 2


def test_server_error_without_retries_left(llm):
    llm.reply("overloaded", status=503)
    llm.reply("too late")
    with pytest.raises(LLMError) as caught:
        _client(llm, llm_max_retries=0).complete(PROMPT)
    assert caught.value.status == 503
    assert caught.value.endpoint == llm.base_url
    assert f"LLM call to {llm.base_url} (model test-model) failed: HTTP 503" in str(caught.value)
    assert "overloaded" in str(caught.value)
    assert len(llm.requests) == 1


def test_slow_server_hits_the_timeout(llm):
    llm.reply("late", delay=3.0)
    client = _client(llm, llm_timeout_seconds=0.3, llm_max_retries=0)
    started = time.perf_counter()
    with pytest.raises(LLMError, match=r"timed out after 0\.3 s") as caught:
        client.complete(PROMPT)
    assert time.perf_counter() - started < 1.5
    assert llm.base_url in str(caught.value)
    assert caught.value.status is None


def test_timeout_is_retried_by_the_client(llm):
    llm.reply("late", delay=3.0)
    llm.reply("prompt")
    client = _client(llm, llm_timeout_seconds=0.3, llm_max_retries=1)
    assert client.complete(PROMPT).text == "prompt"
    assert len(llm.requests) == 2


def test_unauthorized_gives_a_clear_error_without_the_key(llm, caplog):
    llm.reply("Incorrect API key provided: sk-test. Find your key at …", status=401)
    caplog.set_level(logging.DEBUG)
    client = _client(llm, llm_max_retries=2)
    with pytest.raises(LLMError) as caught:
        client.complete(PROMPT)
    message = str(caught.value)
    assert caught.value.status == 401
    assert "HTTP 401 (check llm_api_key)" in message
    assert "Incorrect API key provided: ***" in message
    assert "sk-test" not in message
    assert "sk-test" not in repr(client)
    assert "sk-test" not in caplog.text
    assert len(llm.requests) == 1  # 401 is not retried


def test_connection_refused():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = MemoryConfig(
        model_name="m", llm_base_url=f"http://127.0.0.1:{port}/v1", llm_max_retries=0
    )
    with pytest.raises(LLMError, match="connection refused") as caught:
        LLMClient.from_config(config, env={}).complete(PROMPT)
    assert f"http://127.0.0.1:{port}/v1" in str(caught.value)


def test_no_model_fails_at_first_use_naming_the_settings(llm):
    client = LLMClient.from_config(MemoryConfig(llm_base_url=llm.base_url), env={})
    with pytest.raises(LLMError) as caught:
        client.complete(PROMPT)
    assert "set model_name (or MEMORY_SQL_MODEL_NAME / OPENAI_MODEL)" in str(caught.value)
    assert isinstance(caught.value, MemorySQLError)
    assert llm.requests == []


def test_openai_api_without_a_key_fails_at_first_use():
    client = LLMClient.from_config(MemoryConfig(model_name="gpt-4o-mini"), env={})
    assert client.base_url == "https://api.openai.com/v1"
    with pytest.raises(LLMError, match=r"set llm_api_key \(or MEMORY_SQL_LLM_API_KEY"):
        client.complete(PROMPT)


def test_a_local_endpoint_needs_no_key(llm):
    llm.reply("hello")
    config = MemoryConfig(model_name="llama3", llm_base_url=llm.base_url)
    assert LLMClient.from_config(config, env={}).complete(PROMPT).text == "hello"
    assert llm.request_headers[0]["authorization"] == "Bearer not-needed"


def test_openai_variables_fill_what_the_config_leaves_unset(llm):
    env = {"OPENAI_MODEL": "env-model", "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-e"}
    llm.reply("from env")
    completion = LLMClient.from_config(MemoryConfig(), env=env).complete(PROMPT)
    assert completion.model == "env-model"
    assert llm.requests[0]["model"] == "env-model"
    assert llm.request_headers[0]["authorization"] == "Bearer sk-e"
    # The config wins over the environment.
    llm.reply("from config")
    LLMClient.from_config(llm_config(llm), env=env).complete(PROMPT)
    assert llm.requests[1]["model"] == "test-model"
    assert llm.request_headers[1]["authorization"] == "Bearer sk-test"


def test_json_mode_off_sends_no_response_format(llm):
    llm.reply("x")
    _client(llm, llm_json_mode=False).complete(PROMPT)
    assert "response_format" not in llm.requests[0]


def test_json_mode_rejected_with_400_is_dropped_after_one_retry(llm):
    llm.reply("response_format is not supported", status=400)
    llm.reply("first")
    llm.reply("second")
    client = _client(llm, llm_max_retries=0)
    assert client.complete(PROMPT).text == "first"
    assert client.complete(PROMPT).text == "second"
    assert ["response_format" in body for body in llm.requests] == [True, False, False]
    assert client.json_mode is False


def test_a_400_that_is_not_about_json_mode_is_reported(llm):
    llm.reply("context length exceeded", status=400)
    llm.reply("context length exceeded", status=400)
    client = _client(llm, llm_max_retries=0)
    with pytest.raises(LLMError, match="HTTP 400: context length exceeded") as caught:
        client.complete(PROMPT)
    assert caught.value.status == 400
    assert client.json_mode is True
    assert len(llm.requests) == 2


def test_a_reply_without_text_is_an_error(llm):
    llm.reply(None)
    with pytest.raises(LLMError, match="the reply has no text"):
        _client(llm).complete(PROMPT)


def test_no_reply_scripted_is_a_clear_500(llm):
    with pytest.raises(LLMError, match="no reply queued and no responder"):
        _client(llm, llm_max_retries=0).complete(PROMPT)


def test_threads_share_one_client(llm):
    llm.responder = lambda body: body["messages"][-1]["content"].upper()
    client = _client(llm)
    answers: dict[int, str] = {}

    def ask(n: int) -> None:
        answers[n] = client.complete([{"role": "user", "content": f"question {n}"}]).text

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert answers == {n: f"QUESTION {n}" for n in range(8)}


def test_max_tokens_is_the_setting_or_sized_to_real_replies(llm):
    """By default 2 048, whatever the memory's budgets (issue 34: a reply does not grow with
    the memory, and small models given 4 036 tokens wrote until they ran out)."""
    for _ in range(3):
        llm.reply('{"ok": true}')
    _client(llm, llm_max_tokens=300).complete(PROMPT)
    _client(llm, injected_memory_max_tokens=8000, guaranteed_token_budget=2000).complete(PROMPT)
    _client(llm).complete(PROMPT, max_tokens=16)
    assert [body["max_tokens"] for body in llm.requests] == [300, 2048, 16]


def test_a_reply_cut_at_max_tokens_keeps_its_real_token_counts(llm, caplog):
    llm.reply('{"user": {"workC', prompt_tokens=1500, completion_tokens=64, finish_reason="length")
    completion = _client(llm, llm_max_tokens=64).complete(PROMPT)
    assert completion.cut and completion.finish_reason == "length"
    assert (completion.prompt_tokens, completion.completion_tokens) == (1500, 64)
    assert "stopped at its token limit (max_tokens 64, 64 tokens)" in caplog.text


def test_a_reply_that_spent_every_token_on_reasoning_is_cut_not_an_error(llm):
    llm.reply(None, prompt_tokens=900, completion_tokens=4036, finish_reason="length")
    completion = _client(llm).complete(PROMPT)
    assert completion.cut and completion.text == "" and completion.completion_tokens == 4036


def test_a_format_refusal_on_the_probe_is_not_retried(llm):
    """llama.cpp answers an unsupported response_format with HTTP 500, which the client retries
    (twice by default): the probe goes without retries, so the refusal costs one request."""
    llm.refuse_format("json_object", status=500, message="response_format is not supported")
    llm.reply('{"ok": true}')
    _client(llm, llm_max_retries=2).complete(PROMPT)
    assert [ScriptedLLM.format_of(body) for body in llm.requests] == ["json_object", "none"]


def test_a_transient_error_on_the_probe_still_gets_the_retries(llm):
    llm.reply("overloaded", status=503)
    llm.reply('{"ok": true}')
    completion = _client(llm, llm_max_retries=2).complete(PROMPT)
    assert completion.text == '{"ok": true}'
    assert [ScriptedLLM.format_of(body) for body in llm.requests] == ["json_object"] * 2


def test_probe_structured_output_names_the_accepted_mode(llm):
    from memory_sql.update.parser import update_json_schema

    llm.refuse_format("json_schema", status=500, message="response_format: bad type")
    llm.refuse_format("json_object+schema", status=400)
    llm.reply('{"ok": true}')
    client = _client(llm, llm_max_retries=2)
    assert client.probe_structured_output() == "json_object"
    kinds = [ScriptedLLM.format_of(body) for body in llm.requests]
    assert kinds == ["json_schema", "json_object+schema", "json_object"]
    assert all(body["max_tokens"] == 16 for body in llm.requests)
    assert llm.requests[0]["response_format"]["json_schema"]["schema"] == update_json_schema()
    # The answer is remembered: the next call starts there.
    llm.reply('{"ok": true}')
    client.complete(PROMPT, schema=update_json_schema())
    assert ScriptedLLM.format_of(llm.requests[-1]) == "json_object"
