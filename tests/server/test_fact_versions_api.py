"""The HTTP service reads the past (revision 0015): ``as_of`` on the memory and facts routes,
closed versions on request, and a fact's history with its text before and after."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def test_as_of_reads_and_history_show_what_was_believed(service, make_key):
    with service.client(make_key("acme")) as http:
        made = http.post(
            "/v1/users/u1/facts",
            json={"content": "Lives in Lisbon", "category": "context", "confidence": 0.9},
        )
        fact_id = made.json()["fact"]["id"]
        time.sleep(0.05)
        believed = datetime.now(timezone.utc).isoformat()
        time.sleep(0.05)
        patched = http.patch(f"/v1/users/u1/facts/{fact_id}", json={"content": "Lives in Porto"})
        assert patched.status_code == 200
        other = http.post("/v1/users/u1/facts", json={"content": "Drinks tea"}).json()
        assert http.delete(f"/v1/users/u1/facts/{other['fact']['id']}").status_code == 200

        now = http.get("/v1/users/u1/facts").json()["facts"]
        assert [f["content"] for f in now] == ["Lives in Porto"]
        every = http.get("/v1/users/u1/facts", params={"include_closed": "true"}).json()
        closed = {f["content"]: f for f in every["facts"] if f["valid_to"] is not None}
        assert set(closed) == {"Drinks tea", "Lives in Lisbon"}  # removed; the text before
        assert closed["Lives in Lisbon"]["superseded_by"] == fact_id
        past = http.get("/v1/users/u1/facts", params={"as_of": believed})
        assert "etag" not in past.headers  # a past read is no base for a write
        assert [f["content"] for f in past.json()["facts"]] == ["Lives in Lisbon"]
        document = http.get("/v1/users/u1/memory", params={"as_of": believed})
        assert document.status_code == 200 and "etag" not in document.headers
        assert [f["content"] for f in document.json()["facts"]] == ["Lives in Lisbon"]
        before_tea = http.get("/v1/users/u1/memory").json()
        assert [f["content"] for f in before_tea["facts"]] == ["Lives in Porto"]
        missing = http.get("/v1/users/nobody/memory", params={"as_of": believed})
        assert missing.status_code == 404
        bad = http.get("/v1/users/u1/facts", params={"as_of": "yesterday"})
        assert bad.status_code in (400, 422)

        events = http.get(f"/v1/users/u1/facts/{fact_id}/history").json()["events"]
        added, updated = events  # oldest first
        assert (updated["event"], updated["content_before"], updated["content_after"]) == (
            "updated",
            "Lives in Lisbon",
            "Lives in Porto",
        )
        assert (added["event"], added["content_after"]) == ("added", "Lives in Lisbon")
        log = http.get("/v1/users/u1/changes").json()["events"]
        removed = next(e for e in log if e["event"] == "removed")
        assert removed["content_before"] == "Drinks tea" and removed["content_after"] is None
