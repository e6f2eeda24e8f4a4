"""What a first user of the HTTP API meets: listing facts by agent as documented, versions on
listed facts for If-Match, the source of facts made through the API, the change log paged
forward, and plain messages for a body sent as a form, broken JSON and an empty retry. A real
``memory-sql serve`` driven by httpx."""

from __future__ import annotations

import json

from memory_sql.server.routes.facts import API_SOURCE


def error_of(response) -> tuple[int, str, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    return response.status_code, body["error"]["code"], body["error"]["message"]


def test_facts_are_listed_per_agent_as_documented(service, make_key):
    with service.client(make_key("acme")) as http:
        assert http.post("/v1/users/u1/facts", json={"content": "Unnamed fact"}).status_code == 201
        coder = http.post(
            "/v1/users/u1/facts", params={"agent_name": "coder"}, json={"content": "Coder fact"}
        )
        assert coder.status_code == 201
        http.post(
            "/v1/users/u1/facts", params={"agent_name": "coder"}, json={"content": "Coder two"}
        )

        unnamed = http.get("/v1/users/u1/facts")
        assert unnamed.status_code == 200
        assert [f["content"] for f in unnamed.json()["facts"]] == ["Unnamed fact"]
        assert {f["agent_name"] for f in unnamed.json()["facts"]} == {None}
        named = http.get("/v1/users/u1/facts", params={"agent_name": "Coder"}).json()["facts"]
        assert sorted(f["content"] for f in named) == ["Coder fact", "Coder two"]
        every = http.get("/v1/users/u1/facts", params={"agent_name": "*"}).json()
        assert sorted(f["content"] for f in every["facts"]) == [
            "Coder fact",
            "Coder two",
            "Unnamed fact",
        ]
        assert "version" not in every  # several memories: each fact says its own

        # A user with memories of named agents only: the unnamed one does not exist.
        http.post("/v1/users/u2/facts", params={"agent_name": "coder"}, json={"content": "X"})
        assert error_of(http.get("/v1/users/u2/facts"))[:2] == (404, "not_found")
        assert len(http.get("/v1/users/u2/facts", params={"agent_name": "*"}).json()["facts"]) == 1


def test_each_listed_fact_carries_the_version_for_if_match(service, make_key):
    with service.client(make_key("acme")) as http:
        http.post("/v1/users/u1/facts", json={"content": "Likes tea"})
        http.post("/v1/users/u1/facts", json={"content": "Likes jazz"})
        http.post("/v1/users/u1/facts", params={"agent_name": "coder"}, json={"content": "Vim"})
        listed = http.get("/v1/users/u1/facts")
        assert listed.headers["etag"] == '"2"' and listed.json()["version"] == 2
        facts = listed.json()["facts"]
        assert {f["version"] for f in facts} == {2}
        # The change takes its If-Match straight from the listing: no GET of the memory.
        first = facts[0]
        patched = http.patch(
            f"/v1/users/u1/facts/{first['id']}",
            json={"confidence": 0.5},
            headers={"If-Match": f'"{first["version"]}"'},
        )
        assert patched.status_code == 200 and patched.headers["etag"] == '"3"'
        stale = http.delete(
            f"/v1/users/u1/facts/{facts[1]['id']}", headers={"If-Match": f'"{facts[1]["version"]}"'}
        )
        assert error_of(stale)[:2] == (412, "precondition_failed")
        every = http.get("/v1/users/u1/facts", params={"agent_name": "*"}).json()["facts"]
        assert {(f["agent_name"], f["version"]) for f in every} == {(None, 3), ("coder", 1)}


def test_facts_made_through_the_api_have_the_source_api(service, make_key):
    with service.client(make_key("acme")) as http:
        made = http.post("/v1/users/u1/facts", json={"content": "Likes tea"}).json()["fact"]
        assert made["source_thread_id"] == API_SOURCE == "api"
        threaded = http.post(
            "/v1/users/u1/facts", json={"content": "Likes jazz", "source_thread_id": "t9"}
        ).json()["fact"]
        assert threaded["source_thread_id"] == "t9"
        memory = http.get("/v1/users/u1/memory").json()
        assert {f["content"]: f["source"] for f in memory["facts"]} == {
            "Likes tea": "api",
            "Likes jazz": "t9",
        }


def test_a_low_confidence_fact_written_on_purpose_is_kept_as_documented(service, make_key):
    with service.client(make_key("acme")) as http:
        made = http.post(
            "/v1/users/u1/facts", json={"content": "Maybe likes golf", "confidence": 0.3}
        )
        assert made.status_code == 201 and made.json()["fact"]["confidence"] == 0.3
        context = http.get("/v1/users/u1/context").json()["context"]
        assert "Maybe likes golf" in context
        described = http.get("/openapi.json").json()
        route = described["paths"]["/v1/users/{user_id}/facts"]["post"]
        assert "min_confidence" in route["description"]


def test_the_change_log_pages_forward_with_opaque_cursors(service, make_key):
    with service.client(make_key("acme")) as http:
        for number in range(5):
            http.post("/v1/users/u1/facts", json={"content": f"Fact {number}"})
        seen, cursor = [], None
        while True:
            params = {"limit": 2, **({"after": cursor} if cursor else {})}
            page = http.get("/v1/users/u1/changes", params=params).json()
            seen += [event["version"] for event in page["events"]]
            assert all(":" not in event["cursor"] for event in page["events"])  # opaque
            if page["next"] is None:
                last = page["events"][-1]["cursor"]
                break
            cursor = page["next"]
        assert seen == [1, 2, 3, 4, 5]
        # Kept, the last event's cursor reads only what happened since.
        assert http.get("/v1/users/u1/changes", params={"after": last}).json()["events"] == []
        http.post("/v1/users/u1/facts", json={"content": "Fact 5"})
        since = http.get("/v1/users/u1/changes", params={"after": last}).json()["events"]
        assert [(e["version"], e["event"]) for e in since] == [(6, "added")]
        bad = http.get("/v1/users/u1/changes", params={"after": "5:fact_x"})
        assert error_of(bad)[:2] == (400, "invalid_request") and "cursor" in error_of(bad)[2]


def test_a_body_not_sent_as_json_is_415_naming_the_content_type(service, make_key):
    with service.client(make_key("acme")) as http:
        body = json.dumps({"content": "Likes tea"})
        # What curl -d sends without -H 'Content-Type: application/json'.
        form = http.post(
            "/v1/users/u1/facts",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        status, code, message = error_of(form)
        assert (status, code) == (415, "unsupported_media_type")
        assert "Content-Type: application/json" in message
        assert "application/x-www-form-urlencoded" in message
        assert "dictionary" not in message
        text = http.post(
            "/v1/conversations", content=b"hello", headers={"Content-Type": "text/plain"}
        )
        assert error_of(text)[:2] == (415, "unsupported_media_type")
        # JSON under its own type, or a +json one, is read.
        vendor = http.post(
            "/v1/users/u1/facts",
            content=body,
            headers={"Content-Type": "application/vnd.api+json; charset=utf-8"},
        )
        assert vendor.status_code == 201, vendor.text
        assert http.get("/v1/users/u1/facts").json()["facts"][0]["content"] == "Likes tea"


def test_broken_json_names_the_problem_and_where_it_is(service, make_key):
    with service.client(make_key("acme")) as http:
        broken = http.post(
            "/v1/users/u1/facts",
            content=b'{\n  "content": "Likes tea",\n  "category": }',
            headers={"Content-Type": "application/json"},
        )
        status, code, message = error_of(broken)
        assert (status, code) == (400, "invalid_request")
        assert message.startswith("the request body is not valid JSON: Expecting value")
        assert "line 3, column 15" in message, message
        assert "body[" not in message


def test_retry_takes_no_body_as_documented(service, make_key):
    with service.client(make_key("acme", role="admin")) as http:
        empty = http.post("/v1/queue/retry")
        assert empty.status_code == 200, empty.text
        assert empty.json() == {"requeued": [], "running": []}
        assert http.post("/v1/queue/retry", json={}).status_code == 200
        named = http.post("/v1/queue/retry", json={"keys": ["acme/nobody"]})
        assert error_of(named)[:2] == (404, "not_found")
