"""The ranked context over HTTP: ``GET /v1/users/{u}/context?q=`` and a POSTed conversation, on
a real ``memory-sql serve`` with SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from server.mcp_session import ok, over_http
from server.test_api import error_of


def test_the_context_is_chosen_for_the_query_or_the_conversation(start_service, make_key):
    service = start_service(injected_memory_max_tokens=120)
    with service.client(make_key("acme")) as http:
        for n in range(60):
            http.post(
                "/v1/users/u1/facts",
                json={"content": f"Owns plant number {n} on the balcony", "confidence": 0.95},
            )
        http.post(
            "/v1/users/u1/facts",
            json={"content": "Allergic to peanuts", "category": "context", "confidence": 0.7},
        )
        plain = http.get("/v1/users/u1/context").json()
        assert "peanuts" not in plain["context"]
        asked = http.get("/v1/users/u1/context", params={"q": "any allergies? PEANUTS"})
        assert asked.status_code == 200 and "Allergic to peanuts" in asked.json()["context"]
        assert asked.json()["version"] == plain["version"] and asked.headers["etag"]
        conversation = [
            {"role": "user", "content": "Planning dinner tonight"},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "Anything I must avoid? peanuts maybe"},
        ]
        posted = http.post("/v1/users/u1/context", json={"messages": conversation})
        assert posted.status_code == 200 and "Allergic to peanuts" in posted.json()["context"]
        text = http.post("/v1/users/u1/context", json={"query": "peanut allergy"})
        assert "Allergic to peanuts" in text.json()["context"]
        for hostile in ('" OR 1=1 --', "a & !b <-> c:*", "NEAR(x y)", "!!!"):
            answer = http.get("/v1/users/u1/context", params={"q": hostile})
            assert answer.status_code == 200 and answer.json()["context"].startswith("<system")
        both = http.post("/v1/users/u1/context", json={"query": "x", "messages": conversation})
        assert error_of(both)[0] == 400 and "not both" in error_of(both)[2]
        bad = http.post("/v1/users/u1/context", json={"messages": [{"role": 5}]})
        assert error_of(bad)[0] == 400
        too_long = http.get("/v1/users/u1/context", params={"q": "x" * 10_001})
        assert too_long.status_code in (400, 422)
        ranked = http.get("/v1/users/u1/facts", params={"q": "peanuts allergic"}).json()
        assert [f["content"] for f in ranked["facts"]] == ["Allergic to peanuts"]


CAFES = {"Meets friends at Café Luzeiro", "The cafe near the office opens at seven"}


def test_cafe_and_cafe_with_an_accent_find_each_other_everywhere(start_service, make_key):
    """One matching rule (issue #31): ``cafe`` finds "Café" and ``café`` finds "cafe", through
    the search (HTTP ``q``, MCP ``search_facts``) and the context (HTTP ``q``, MCP
    ``get_context``) alike."""
    service = start_service(injected_memory_max_tokens=120)
    key = make_key("acme", "write")
    with service.client(key) as http:
        for n in range(60):
            http.post(
                "/v1/users/u1/facts",
                json={"content": f"Owns plant number {n} on the balcony", "confidence": 0.95},
            )
        for content in sorted(CAFES):
            http.post("/v1/users/u1/facts", json={"content": content, "confidence": 0.6})
        plain = http.get("/v1/users/u1/context").json()["context"]
        assert not any(content in plain for content in CAFES)
        for query in ("cafe", "café", "CAFÉ"):
            found = http.get("/v1/users/u1/facts", params={"q": query}).json()["facts"]
            assert {f["content"] for f in found} == CAFES, query
            context = http.get("/v1/users/u1/context", params={"q": query}).json()["context"]
            assert all(content in context for content in CAFES), query

    async def session() -> None:
        async with over_http(service.base_url, key) as mcp:
            for query in ("cafe", "café"):
                found = ok(await mcp.call_tool("search_facts", {"user_id": "u1", "query": query}))
                assert {f["content"] for f in found["facts"]} == CAFES, query
                context = ok(await mcp.call_tool("get_context", {"user_id": "u1", "query": query}))
                assert all(content in context["context"] for content in CAFES), query

    asyncio.run(session())
