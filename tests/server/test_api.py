"""The HTTP API through a real ``memory-sql serve`` and a real HTTP client, on SQLite and
PostgreSQL: each route's success and its errors, keys and roles, and tenant isolation."""

from __future__ import annotations

import json
import time

import pytest
from llm_server import update_reply

from memory_sql.database import create_engine
from memory_sql.server.keys import OPERATOR_TENANT, create_key, revoke_key

CONVERSATION = [
    {"role": "user", "content": "I write all my services in Python."},
    {"role": "assistant", "content": "Noted: Python it is."},
]


def error_of(response) -> tuple[int, str, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    return response.status_code, body["error"]["code"], body["error"]["message"]


def test_operations_routes_need_no_key_and_show_no_tenant(service):
    with service.client() as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert http.get("/docs").status_code == 200
        spec = http.get("/openapi.json").json()
        assert "/v1/users/{user_id}/facts/{fact_id}" in spec["paths"]
        metrics = http.get("/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")
        text = metrics.text
        for name in (
            "memory_sql_http_requests_total",
            "memory_sql_http_request_duration_seconds_bucket",
            'memory_sql_queue_rows{status="pending"}',
            "memory_sql_queue_oldest_pending_seconds",
            "memory_sql_spooled_conversations",
        ):
            assert name in text, name
        assert 'route="/readyz",status="200"' in text
        missing = http.get("/v1/nowhere")
        assert error_of(missing)[:2] == (404, "not_found")


def test_keys_authenticate_and_roles_limit(service, make_key, database_url):
    reader, writer = make_key("acme", "read"), make_key("acme", "write")
    with service.client() as anonymous:
        status, code, message = error_of(anonymous.get("/v1/users/u1/context"))
        assert (status, code) == (401, "unauthorized") and "Authorization" in message
        response = anonymous.get("/v1/users/u1/context", headers={"Authorization": "Bearer x"})
        assert error_of(response)[:2] == (401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
        forged = writer[:-4] + ("AAAA" if not writer.endswith("AAAA") else "BBBB")
        response = anonymous.get(
            "/v1/users/u1/context", headers={"Authorization": f"Bearer {forged}"}
        )
        assert response.status_code == 401
    with service.client(reader) as http:
        assert http.get("/v1/users/u1/context").status_code == 200
        response = http.post("/v1/users/u1/facts", json={"content": "Likes tea"})
        status, code, message = error_of(response)
        assert (status, code) == (403, "forbidden") and "read" in message
    with service.client(writer) as http:
        assert http.post("/v1/users/u1/facts", json={"content": "Likes tea"}).status_code == 201
        status, code, _ = error_of(http.delete("/v1/users/u1"))
        assert (status, code) == (403, "forbidden")  # forgetting takes an admin key
    engine = create_engine(database_url)
    try:
        revoke_key(engine, writer.split("_")[1])
    finally:
        engine.dispose()
    with service.client(writer) as http:
        assert error_of(http.get("/v1/users/u1/context"))[:2] == (401, "unauthorized")


def test_a_tenant_sees_nothing_of_another(service, make_key):
    acme, globex = make_key("acme", "admin"), make_key("globex", "admin")
    with service.client(globex) as http:
        created = http.post("/v1/users/bob/facts", json={"content": "Globex secret"}).json()
        fact_id = created["fact"]["id"]
        assert http.get("/v1/users/bob/memory").status_code == 200
    with service.client(acme) as http:
        for method, path in (
            ("GET", "/v1/users/bob/memory"),
            ("GET", "/v1/users/bob/facts"),
            ("GET", f"/v1/users/bob/facts/{fact_id}/history"),
            ("GET", "/v1/users/bob/changes"),
            ("PATCH", f"/v1/users/bob/facts/{fact_id}"),
            ("DELETE", f"/v1/users/bob/facts/{fact_id}"),
            ("DELETE", "/v1/users/bob"),
        ):
            body = {"confidence": 0.1} if method == "PATCH" else None
            response = http.request(method, path, json=body)
            assert error_of(response)[:2] == (404, "not_found"), (method, path)
        context = http.get("/v1/users/bob/context").json()
        assert context == {"context": "", "version": 0}
        assert http.get("/v1/export").text == ""
        assert http.get("/v1/reports").json()["totals"]["facts"] == 0
        status, code, message = error_of(
            http.get("/v1/users/bob/context", headers={"X-Memory-Tenant": "globex"})
        )
        assert (status, code) == (403, "forbidden") and "another tenant" in message
        requeue = http.post("/v1/queue/retry", json={"keys": ["globex/bob"]})
        assert error_of(requeue)[:2] == (404, "not_found")
    with service.client(globex) as http:  # nothing of globex's changed
        facts = http.get("/v1/users/bob/facts").json()["facts"]
        assert [(f["id"], f["confidence"]) for f in facts] == [(fact_id, 0.9)]


def test_an_operator_key_acts_for_the_tenant_it_names(service, make_key, caplog):
    operator = make_key(OPERATOR_TENANT, "admin")
    acme = make_key("acme")
    with service.client(acme) as http:
        http.post("/v1/users/u1/facts", json={"content": "Acme fact"})
    with service.client(operator) as http:
        status, code, message = error_of(http.get("/v1/users/u1/facts"))
        assert (status, code) == (400, "invalid_request") and "X-Memory-Tenant" in message
        found = http.get("/v1/users/u1/facts", headers={"X-Memory-Tenant": "acme"}).json()
        assert [f["content"] for f in found["facts"]] == ["Acme fact"]
        assert found["facts"][0]["tenant_id"] == "acme"
        other = http.get("/v1/users/u1/facts", headers={"X-Memory-Tenant": "globex"})
        assert other.status_code == 404
    assert "operator key" in service.log and "acts for tenant acme" in service.log
    with pytest.raises(ValueError, match="admin"):
        create_key(create_engine("sqlite://"), tenant_id=OPERATOR_TENANT, role="read")


def test_facts_are_written_with_versions_and_preconditions(service, make_key):
    with service.client(make_key("acme")) as http:
        first = http.post(
            "/v1/users/u1/facts",
            json={"content": "Prefers tabs", "category": "preference", "confidence": 0.8},
        )
        assert first.status_code == 201 and first.headers["etag"] == '"1"'
        fact = first.json()["fact"]
        assert (fact["content"], fact["category"], fact["confidence"]) == (
            "Prefers tabs",
            "preference",
            0.8,
        )
        duplicate = http.post("/v1/users/u1/facts", json={"content": "PREFERS  TABS"})
        assert error_of(duplicate)[:2] == (409, "duplicate_fact")
        stale = http.post(
            "/v1/users/u1/facts", json={"content": "Uses vim"}, headers={"If-Match": '"0"'}
        )
        status, code, message = error_of(stale)
        assert (status, code) == (412, "precondition_failed") and "version 0" in message
        second = http.post(
            "/v1/users/u1/facts", json={"content": "Uses vim"}, headers={"If-Match": '"1"'}
        )
        assert second.status_code == 201 and second.json()["version"] == 2
        patched = http.patch(
            f"/v1/users/u1/facts/{fact['id']}",
            json={"confidence": 0.95},
            headers={"If-Match": '"2"'},
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["fact"]["confidence"] == 0.95 and patched.headers["etag"] == '"3"'
        assert (
            http.patch(
                f"/v1/users/u1/facts/{fact['id']}",
                json={"confidence": 0.5},
                headers={"If-Match": "2"},
            ).status_code
            == 412
        )
        bad = http.patch(f"/v1/users/u1/facts/{fact['id']}", json={"confidence": 2})
        assert error_of(bad)[0] == 400 and "confidence" in error_of(bad)[2]
        assert error_of(http.patch(f"/v1/users/u1/facts/{fact['id']}", json={}))[0] == 400
        bad_tag = http.delete(f"/v1/users/u1/facts/{fact['id']}", headers={"If-Match": "soon"})
        assert error_of(bad_tag)[:2] == (400, "invalid_request")
        gone = http.delete(f"/v1/users/u1/facts/{fact['id']}", headers={"If-Match": '"3"'})
        assert gone.status_code == 200 and gone.json()["version"] == 4
        again = http.delete(f"/v1/users/u1/facts/{fact['id']}")
        assert error_of(again)[:2] == (404, "not_found")

        memory = http.get("/v1/users/u1/memory")
        assert memory.headers["etag"] == '"4"' and memory.json()["revision"] == 4
        assert [f["content"] for f in memory.json()["facts"]] == ["Uses vim"]
        history = http.get(f"/v1/users/u1/facts/{fact['id']}/history").json()
        assert [(e["version"], e["event"]) for e in history["events"]] == [
            (1, "added"),
            (3, "updated"),
            (4, "removed"),
        ]
        page = http.get("/v1/users/u1/changes", params={"limit": 2}).json()
        assert [e["version"] for e in page["events"]] == [1, 2] and page["next"]
        rest = http.get("/v1/users/u1/changes", params={"after": page["next"]}).json()
        assert [e["version"] for e in rest["events"]] == [3, 4] and rest["next"] is None
        bad_cursor = http.get("/v1/users/u1/changes", params={"after": "x"})
        assert error_of(bad_cursor)[:2] == (400, "invalid_request")


def test_facts_are_listed_searched_and_paged(service, make_key):
    with service.client(make_key("acme")) as http:
        for number, (content, category) in enumerate(
            [("Lives in München", "context"), ("Likes STRASSE names", "preference")]
            + [(f"Fact number {n}", "context") for n in range(5)]
        ):
            http.post(
                "/v1/users/u1/facts",
                json={"content": content, "category": category, "confidence": 0.5 + number / 20},
            )
        found = http.get("/v1/users/u1/facts", params={"q": "straße"}).json()["facts"]
        assert [f["content"] for f in found] == ["Likes STRASSE names"]
        assert [
            f["content"]
            for f in http.get("/v1/users/u1/facts", params={"category": "preference"}).json()[
                "facts"
            ]
        ] == ["Likes STRASSE names"]
        confident = http.get("/v1/users/u1/facts", params={"min_confidence": 0.7}).json()
        assert all(f["confidence"] >= 0.7 for f in confident["facts"])
        assert len(confident["facts"]) == 3
        pages, offset = [], 0
        while offset is not None:
            page = http.get("/v1/users/u1/facts", params={"limit": 3, "offset": offset}).json()
            pages.append([f["id"] for f in page["facts"]])
            offset = page["next_offset"]
        assert [len(p) for p in pages] == [3, 3, 1]
        assert len({i for p in pages for i in p}) == 7
        too_many = http.get("/v1/users/u1/facts", params={"limit": 100_000})
        assert error_of(too_many)[0] == 400 and "limit" in error_of(too_many)[2]
        bad_user = http.get("/v1/users/bad user!/facts")
        status, code, message = error_of(bad_user)
        assert (status, code) == (400, "invalid_request") and "user_id" in message


def test_memory_documents_import_and_export(service, make_key):
    memory = {
        "user": {"workContext": {"summary": "Runs the billing team."}},
        "facts": [
            {"content": "Prefers short answers", "category": "preference", "confidence": 0.9}
        ],
    }
    with service.client(make_key("acme")) as http:
        put = http.put("/v1/users/u1/memory", json=memory, params={"agent_name": "coder"})
        assert put.status_code == 200, put.text
        assert put.json() == {"version_before": 0, "version": 1, "changed": True}
        again = http.put("/v1/users/u1/memory", json=memory, params={"agent_name": "coder"})
        assert again.json() == {"version_before": 1, "version": 1, "changed": False}
        stale = http.put(
            "/v1/users/u1/memory",
            json={**memory, "facts": []},
            params={"agent_name": "coder"},
            headers={"If-Match": '"0"'},
        )
        assert error_of(stale)[:2] == (412, "precondition_failed")
        invalid = http.put("/v1/users/u1/memory", json={"facts": [{"content": ""}]})
        assert error_of(invalid)[:2] == (422, "invalid_memory")
        doc = http.get("/v1/users/u1/memory", params={"agent_name": "coder"}).json()
        assert doc["user"]["workContext"]["summary"] == "Runs the billing team."
        context = http.get("/v1/users/u1/context", params={"agent_name": "coder"}).json()
        assert "Prefers short answers" in context["context"] and context["version"] == 1

        export = http.get("/v1/export")
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert [(x["tenant_id"], x["user_id"], x["agent_name"]) for x in lines] == [
            ("acme", "u1", "coder")
        ]
        moved = json.dumps({"user_id": "u2", "memory": lines[0]["memory"]})
        imported = http.post("/v1/import", content=moved + "\n")
        assert imported.json() == {"memories": 1, "changed": 1}
        assert http.get("/v1/users/u2/memory").status_code == 200
        foreign = json.dumps({"tenant_id": "globex", "user_id": "u3", "memory": {}})
        status, code, message = error_of(http.post("/v1/import", content=foreign))
        assert (status, code) == (422, "invalid_memory") and "line 1" in message
        broken = http.post("/v1/import", content=b'{"user_id": "u4", "memory": {}}\n{oops')
        status, code, message = error_of(broken)
        assert status == 422 and "line 2" in message
        assert http.get("/v1/users/u4/memory").status_code == 404  # nothing of it was written


def test_forgetting_a_user_reports_counts_per_table(service, make_key):
    with service.client(make_key("acme", "admin")) as http:
        http.post("/v1/users/u1/facts", json={"content": "One"})
        http.post("/v1/users/u1/facts", json={"content": "Two"}, params={"agent_name": "coder"})
        http.post(
            "/v1/conversations", json={"user_id": "u1", "thread_id": "t9", "messages": CONVERSATION}
        )
        forgotten = http.delete("/v1/users/u1")
        assert forgotten.status_code == 200, forgotten.text
        deleted = forgotten.json()["deleted"]
        assert deleted["memory_scopes"] == 2 and deleted["memory_facts"] == 2
        assert deleted["memory_fact_events"] == 2
        assert http.get("/v1/users/u1/memory").status_code == 404
        assert error_of(http.delete("/v1/users/u1"))[:2] == (404, "not_found")


def test_conversations_are_learned_by_the_worker(service, make_key, llm):
    llm.reply(json.dumps(update_reply()))
    with service.client(make_key("acme")) as http:
        nothing = http.post(
            "/v1/conversations",
            json={"user_id": "u1", "thread_id": "t0", "messages": CONVERSATION[:1]},
        )
        assert nothing.status_code == 200 and nothing.json()["queued"] is False
        queued = http.post(
            "/v1/conversations",
            json={"user_id": "u1", "thread_id": "t1", "messages": CONVERSATION},
        )
        assert queued.status_code == 202 and queued.json()["queued"] is True
        deadline = time.monotonic() + 20
        facts: list = []
        while time.monotonic() < deadline and not facts:
            response = http.get("/v1/users/u1/facts")
            facts = response.json()["facts"] if response.status_code == 200 else []
            time.sleep(0.2)
        assert [f["content"] for f in facts] == ["Prefers Python"]
        assert facts[0]["source_thread_id"] == "t1"
        assert "Prefers Python" in http.get("/v1/users/u1/context").json()["context"]
        assert http.get("/v1/queue").json()["counts"] == {
            "pending": 0,
            "failed": 0,
            "leased": 0,
            "due": 0,
        }
        metrics = http.get("/metrics").text
    assert len(llm.requests) == 1
    assert 'memory_sql_updates_total{outcome="ok"} 1.0' in metrics
    assert "memory_sql_llm_calls_total 1.0" in metrics
    assert "memory_sql_llm_call_duration_seconds_count 1.0" in metrics
    assert "I write all my services in Python" not in service.log  # no message text logged


def test_failed_updates_are_listed_and_requeued(start_service, make_key, llm):
    service = start_service(max_attempts=1)
    llm.reply("the model is down", status=500)
    with service.client(make_key("acme", "admin")) as http:
        http.post(
            "/v1/conversations", json={"user_id": "u1", "thread_id": "t1", "messages": CONVERSATION}
        )
        deadline = time.monotonic() + 20
        failed: list = []
        while time.monotonic() < deadline and not failed:
            failed = http.get("/v1/queue", params={"failed_only": True}).json()["updates"]
            time.sleep(0.2)
        assert [(u["key"], u["status"]) for u in failed] == [("turn:acme/u1/-/t1", "failed")]
        assert "127.0.0.1" in failed[0]["last_error"]  # an admin key sees the endpoint
        with service.client(make_key("acme", "read")) as reader:
            shown = reader.get("/v1/queue", params={"failed_only": True}).json()["updates"]
        error = shown[0]["last_error"]
        assert error and "500" in error  # what went wrong, without where
        assert "127.0.0.1" not in error and "test-model" not in error and "http" not in error
        llm.reply(json.dumps(update_reply()))
        requeued = http.post("/v1/queue/retry", json={})
        assert requeued.json() == {"requeued": ["turn:acme/u1/-/t1"], "running": []}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and http.get("/v1/users/u1/memory").status_code == 404:
            time.sleep(0.2)
        assert http.get("/v1/users/u1/facts").json()["facts"][0]["content"] == "Prefers Python"
        assert http.get("/v1/queue").json()["counts"]["failed"] == 0


def test_preconditions_follow_http(service, make_key):
    with service.client(make_key("acme")) as http:
        absent = http.post("/v1/users/u1/facts", json={"content": "A"}, headers={"If-Match": "*"})
        assert error_of(absent)[:2] == (412, "precondition_failed")
        assert http.get("/v1/users/u1/memory").status_code == 404  # nothing was created
        http.post("/v1/users/u1/facts", json={"content": "A"})
        present = http.post("/v1/users/u1/facts", json={"content": "B"}, headers={"If-Match": "*"})
        assert present.status_code == 201 and present.headers["etag"] == '"2"'
        weak = http.post("/v1/users/u1/facts", json={"content": "C"}, headers={"If-Match": 'W/"2"'})
        assert error_of(weak)[:2] == (400, "invalid_request")
        stale = http.post("/v1/users/u1/facts", json={"content": "C"}, headers={"If-Match": '"1"'})
        assert error_of(stale)[:2] == (412, "precondition_failed")
        for cursor in ("1:a\x00b", "99999999999:x", "²:x", "1:"):
            response = http.get("/v1/users/u1/changes", params={"after": cursor})
            status, code, message = error_of(response)
            assert (status, code) == (400, "invalid_request") and "cursor" in message, cursor
        nul_fact = http.get("/v1/users/u1/facts/a%00b/history")
        assert error_of(nul_fact)[:2] == (404, "not_found")
        wrong_method = http.post("/healthz")
        assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "GET"
        metrics = http.get("/metrics").text
    assert 'memory_sql_version_conflicts_total{source="api"} 1.0' in metrics
