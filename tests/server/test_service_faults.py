"""The service on a private PostgreSQL that is stopped and started again under it: 503 (never a
traceback) for what needs the database, conversations spooled and learned once it is back."""

from __future__ import annotations

import json
import time

import pytest
from llm_server import update_reply

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CONVERSATION = [
    {"role": "user", "content": "I deploy everything on Kubernetes."},
    {"role": "assistant", "content": "Understood."},
]


def error_of(response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    return response.status_code, body["error"]["code"]


@pytest.fixture
def database(private_pg):
    url = private_pg.create_database("memory")
    migrations.upgrade(url)
    engine = create_engine(url)
    keys = [create_key(engine, tenant_id="acme", role="write")[1] for _ in range(2)]
    engine.dispose()
    return url, keys


def test_a_database_that_stops_gets_503_and_conversations_wait_for_it(
    private_pg, database, tmp_path, llm
):
    url, (key, unseen_key) = database
    llm.reply(json.dumps(update_reply()))
    settings = {**service_settings_for(llm), "storage": url, "spool_retry_seconds": 0.5}
    with (
        ServiceProcess(tmp_path, settings) as service,
        service.client(key) as http,
        service.client(unseen_key) as stranger,
    ):
        assert http.post("/v1/users/u1/facts", json={"content": "Before"}).status_code == 201
        private_pg.stop()

        for response in (
            http.get("/v1/users/u1/facts"),
            http.get("/v1/users/u1/context"),
            http.post("/v1/users/u1/facts", json={"content": "During"}),
            http.get("/v1/export"),  # before its 200: the first line is read first
        ):
            assert error_of(response) == (503, "database_unavailable"), response.text
            assert "postgres" not in response.text and "127.0.0.1" not in response.text
            assert response.headers["x-request-id"] in response.text
        # Still ready: conversations are spooled (tests/server/test_readiness.py).
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["database"] == "unavailable"
        assert "postgres" not in ready.text and "127.0.0.1" not in ready.text
        # A key seen live before the outage still posts conversations: they are spooled.
        posted = http.post(
            "/v1/conversations",
            json={"user_id": "u1", "thread_id": "t1", "messages": CONVERSATION},
        )
        assert posted.status_code == 202, posted.text
        metrics = http.get("/metrics").text
        assert "memory_sql_spooled_conversations 1.0" in metrics
        # A key this process never checked cannot be: nothing vouches for it.
        refused = stranger.post(
            "/v1/conversations",
            json={"user_id": "u2", "thread_id": "t2", "messages": CONVERSATION},
        )
        assert error_of(refused) == (503, "database_unavailable")

        private_pg.start()
        deadline = time.monotonic() + 30
        contents: list[str] = []
        while time.monotonic() < deadline and "Prefers Python" not in contents:
            response = http.get("/v1/users/u1/facts")
            if response.status_code == 200:
                contents = [f["content"] for f in response.json()["facts"]]
            time.sleep(0.3)
        assert sorted(contents) == ["Before", "Prefers Python"]
        assert http.get("/v1/queue").json()["counts"] == {
            "pending": 0,
            "failed": 0,
            "leased": 0,
            "due": 0,
        }
        assert stranger.get("/v1/users/u1/facts").status_code == 200
        assert len(llm.requests) == 1
        assert "Traceback" not in service.log
