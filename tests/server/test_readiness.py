"""``/readyz`` (ready to take conversations) apart from ``/healthz`` (alive), and the spool on a
persistent volume: a service whose database is away stays ready while its spool has room, and
says not ready before the spool is full; killed (SIGKILL) with conversations spooled, the next
process given the same ``spool_dir`` (the volume a pod's replacement mounts) adopts them and
every conversation answered 202 is learned."""

from __future__ import annotations

import json
import re
import time

import pytest
from llm_server import LABELS

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.server.keys import create_key
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LIKES = re.compile(r"User: I like (\S+)")


def learn(body: dict) -> str:
    conversation = body["messages"][-1]["content"].split("<conversation>")[1]
    facts = [
        {"content": f"Likes {thing}", "category": "preference", "confidence": 0.9, **LABELS}
        for thing in LIKES.findall(conversation.split("</conversation>")[0])
    ]
    return json.dumps({"user": {}, "history": {}, "newFacts": facts, "factsToRemove": []})


def conversation(n: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"I like thing{n}"},
        {"role": "assistant", "content": "Noted."},
    ]


def test_ready_while_the_spool_has_room_and_a_new_process_adopts_the_volume(
    private_pg, tmp_path, llm
):
    url = private_pg.create_database("memory")
    migrations.upgrade(url)
    engine = create_engine(url)
    key = create_key(engine, tenant_id="acme", role="write")[1]
    engine.dispose()
    llm.responder = learn
    volume = tmp_path / "volume"  # what a StatefulSet's persistent volume claim mounts
    settings = {
        **service_settings_for(llm),
        "storage": url,
        "spool_dir": str(volume),
        "spool_max_conversations": 10,
        "spool_retry_seconds": 0.5,
    }
    first = ServiceProcess(tmp_path, settings)
    try:
        with first.client(key) as http:
            assert http.get("/v1/users/u0/facts").status_code in (200, 404)  # key seen live
            ready = http.get("/readyz")
            assert ready.status_code == 200 and "database" not in ready.json()
            assert "warning" not in ready.headers

            private_pg.stop()
            assert http.get("/healthz").status_code == 200
            ready = http.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["database"] == "unavailable"
            assert ready.headers["warning"].startswith('199 memory-sql "the database is')

            for n in range(9):
                posted = http.post(
                    "/v1/conversations",
                    json={"user_id": f"u{n}", "thread_id": "t", "messages": conversation(n)},
                )
                assert posted.status_code == 202, posted.text
                ready = http.get("/readyz")
                # Ready below 90 % of the bound (9 of 10), not ready from there on.
                expected = 200 if n + 1 < 9 else 503
                assert ready.status_code == expected, (n, ready.text)
                if expected == 200:
                    assert ready.json()["spooled"] == n + 1
            assert ready.json()["error"]["code"] == "database_unavailable"
            assert http.get("/healthz").status_code == 200  # alive all the same
        first.process.kill()  # SIGKILL: no shutdown, the spool file is all that is left
        first.process.wait(10)
    finally:
        first.stop()
    assert list(volume.glob("spool-*.db"))

    private_pg.start()
    with ServiceProcess(tmp_path, settings) as second, second.client(key) as http:
        deadline = time.monotonic() + 60
        learned: dict[int, list[str]] = {}
        while time.monotonic() < deadline and len(learned) < 9:
            for n in set(range(9)) - set(learned):
                facts = http.get(f"/v1/users/u{n}/facts").json().get("facts", [])
                if facts:
                    learned[n] = [fact["content"] for fact in facts]
            time.sleep(0.3)
        assert learned == {n: [f"Likes thing{n}"] for n in range(9)}
        ready = http.get("/readyz")
        assert ready.status_code == 200 and "database" not in ready.json()
        assert "left in" in second.log and "by a process that stopped" in second.log
    # Each conversation was sent to the model once.
    assert len(llm.requests) == 9
