"""Hostile requests get the right 4xx with the error shape, and change nothing stored:
oversized bodies, 10 000 messages, NUL and lone surrogates, wrong types, unknown fields, bad
JSON."""

from __future__ import annotations

import pytest

MESSAGES = [
    {"role": "user", "content": "I write all my services in Python."},
    {"role": "assistant", "content": "Noted."},
]


def conversation(**changes):
    return {"user_id": "u1", "thread_id": "t1", "messages": MESSAGES, **changes}


def snapshot(http) -> tuple[str, dict]:
    return http.get("/v1/export").text, http.get("/v1/queue").json()


def error_of(response) -> tuple[int, str, str]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert "Traceback" not in response.text
    return response.status_code, body["error"]["code"], body["error"]["message"]


@pytest.fixture
def http(start_service, make_key):
    service = start_service(
        with_worker=False,
        server_max_body_bytes=512 * 1024,
        server_max_messages=50,
        server_max_message_chars=2000,
    )
    with service.client(make_key("acme")) as client:
        client.post("/v1/users/u1/facts", json={"content": "Stored before"})
        yield client


CASES = [
    pytest.param(
        lambda h: h.post("/v1/conversations", content=b"x" * (513 * 1024)),
        413,
        "server_max_body_bytes",
        id="body over the limit",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/conversations",
            content=iter(
                [b'{"user_id": "u1", "thread_id": "t1", "messages": ['] + [b" " * 8192] * 70
            ),
        ),
        413,
        "server_max_body_bytes",
        id="chunked body over the limit",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/conversations",
            json=conversation(messages=[{"role": "user", "content": "hi"}] * 10_000),
            headers={},
        ),
        413,
        "server_max_messages",
        id="10 000 messages",
    ),
    pytest.param(
        lambda h: h.post("/v1/conversations", json=conversation(messages=MESSAGES * 26)),
        413,
        "server_max_messages",
        id="52 messages",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/conversations",
            json=conversation(messages=[{"role": "user", "content": "x" * 2001}, MESSAGES[1]]),
        ),
        413,
        "server_max_message_chars",
        id="a message too long",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/conversations",
            json=conversation(messages=[{"role": "user", "content": "a\x00b"}, MESSAGES[1]]),
        ),
        400,
        "NUL",
        id="NUL in a message",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/conversations",
            content=b'{"user_id": "u1", "thread_id": "t1", "messages": '
            b'[{"role": "user", "content": "\\ud800"}, {"role": "assistant", "content": "ok"}]}',
            headers={"content-type": "application/json"},
        ),
        400,
        "Unicode",
        id="lone surrogate in a message",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/users/u1/facts",
            content=b'{"content": "\\udfff tail"}',
            headers={"content-type": "application/json"},
        ),
        400,
        "content",
        id="lone surrogate in a fact",
    ),
    pytest.param(
        lambda h: h.post("/v1/users/u1/facts", json={"content": "a\x00b"}),
        400,
        "NUL",
        id="NUL in a fact",
    ),
    pytest.param(
        lambda h: h.post("/v1/conversations", json=conversation(messages="hello")),
        400,
        "messages",
        id="messages not a list",
    ),
    pytest.param(
        lambda h: h.post("/v1/conversations", json=conversation(user_id=42)),
        400,
        "user_id",
        id="user id not a string",
    ),
    pytest.param(
        lambda h: h.post("/v1/conversations", json=conversation(tenant_id="globex")),
        400,
        "tenant_id",
        id="a tenant from the client",
    ),
    pytest.param(
        lambda h: h.post("/v1/conversations", json=conversation(thread_id="t/../x\n")),
        400,
        "thread_id",
        id="bad thread id",
    ),
    pytest.param(
        lambda h: h.post("/v1/conversations", json=conversation(user_id="../etc")),
        400,
        "user_id",
        id="bad user id",
    ),
    pytest.param(
        lambda h: h.post(
            "/v1/conversations",
            content=b'{"user_id": "u1", "thread',
            headers={"content-type": "application/json"},
        ),
        400,
        "JSON",
        id="broken JSON",
    ),
    pytest.param(
        lambda h: h.post("/v1/users/u1/facts", json={"content": "ok", "confidence": "high"}),
        400,
        "confidence",
        id="confidence not a number",
    ),
    pytest.param(
        lambda h: h.post("/v1/users/u1/facts", json={"content": "ok", "category": "no way"}),
        400,
        "category",
        id="bad category",
    ),
    pytest.param(
        lambda h: h.put("/v1/users/u1/memory", json=[1, 2]),
        400,
        "body",
        id="memory not an object",
    ),
    pytest.param(
        lambda h: h.post("/v1/import", content=b"\xff\xfe garbage"),
        422,
        "UTF-8",
        id="import not UTF-8",
    ),
]


def test_hostile_requests_are_refused_and_change_nothing(http):
    """One service per backend for all the cases (a service start per case would be slow)."""
    before = snapshot(http)
    assert "Stored before" in before[0]
    for case in CASES:
        send, status, named = case.values
        got, code, message = error_of(send(http))
        assert (case.id, got) == (case.id, status), message
        assert named.lower() in message.lower(), (case.id, message)
        assert code in {"too_large", "invalid_request", "invalid_memory"}, case.id
        assert snapshot(http) == before, case.id
