"""API keys while the database is away: the outage grace list holds only keys the database
last said were live. A key revoked before the outage is refused during it; a forged secret
with a real key id never takes a live key's grace away."""

from __future__ import annotations

import time

import pytest

from memory_sql import StorageError, migrations
from memory_sql.database import create_engine
from memory_sql.server.keys import GRACE_SYNC_INTERVAL, KeyChecker, create_key, revoke_key
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

pytestmark = pytest.mark.postgres


@pytest.fixture
def keys(private_pg):
    url = private_pg.create_database("memory")
    migrations.upgrade(url)
    engine = create_engine(url)
    made = [create_key(engine, tenant_id="acme", role="write") for _ in range(2)]
    yield engine, made
    engine.dispose()


def forged(secret_text: str) -> str:
    """The same key id with another secret."""
    prefix, key_id, _secret = secret_text.split("_", 2)
    return f"{prefix}_{key_id}_{'A' * 43}"


def test_a_key_revoked_before_the_outage_is_refused_during_it(private_pg, keys):
    engine, ((revoked, revoked_text), (live, live_text)) = keys
    checker = KeyChecker(engine)
    assert checker.check(revoked_text).key_id == revoked.key_id
    assert checker.check(live_text).key_id == live.key_id
    revoke_key(engine, revoked.key_id)  # as `memory-sql keys revoke` does, from elsewhere
    time.sleep(GRACE_SYNC_INTERVAL.total_seconds() + 0.1)
    assert checker.check(live_text) is not None  # a check that reaches the database
    private_pg.stop()
    with pytest.raises(StorageError):
        checker.check(revoked_text)
    assert checker.check(live_text).key_id == live.key_id


def test_a_key_found_revoked_by_its_own_check_loses_its_grace(private_pg, keys):
    engine, ((key, text), _other) = keys
    checker = KeyChecker(engine)
    assert checker.check(text) is not None
    revoke_key(engine, key.key_id)
    assert checker.check(text) is None  # refused at once
    private_pg.stop()
    with pytest.raises(StorageError):
        checker.check(text)


def test_a_forged_secret_does_not_take_a_live_keys_grace_away(private_pg, keys):
    engine, ((key, text), _other) = keys
    checker = KeyChecker(engine)
    assert checker.check(text) is not None
    assert checker.check(forged(text)) is None
    private_pg.stop()
    assert checker.check(text).key_id == key.key_id  # still taken during the outage
    with pytest.raises(StorageError):  # the forgery is not, during the outage either
        checker.check(forged(text))
    assert checker.check(text).key_id == key.key_id  # nor did it change anything then


def test_an_unknown_key_id_and_a_wrong_secret_are_both_refused(keys):
    engine, ((_key, text), _other) = keys
    checker = KeyChecker(engine)
    unknown = f"msk_{'0' * 16}_{'A' * 43}"
    assert checker.check(unknown) is None
    assert checker.check(forged(text)) is None
    assert checker.check("not a key") is None
    assert checker.check(text) is not None


def test_a_full_spool_share_answers_503_with_retry_after_and_keeps_the_rest(
    private_pg, keys, tmp_path, llm
):
    engine, ((_key, text), _other) = keys
    url = engine.url.render_as_string(hide_password=False)
    settings = {
        **service_settings_for(llm),
        "storage": url,
        "spool_dir": str(tmp_path / "spool"),
        "spool_max_per_tenant": 3,
    }
    conversation = [
        {"role": "user", "content": "I like tea."},
        {"role": "assistant", "content": "Noted."},
    ]
    with (
        ServiceProcess(tmp_path, settings, with_worker=False) as service,
        service.client(text) as http,
    ):
        assert http.get("/v1/queue").status_code == 200  # the key is seen live
        private_pg.stop()
        answers = [
            http.post(
                "/v1/conversations",
                json={"user_id": "u1", "thread_id": f"t{n}", "messages": conversation},
            )
            for n in range(5)
        ]
        private_pg.start()
    assert [a.status_code for a in answers] == [202, 202, 202, 503, 503]
    refused = answers[3]
    assert refused.json()["error"]["code"] == "not_kept"
    assert "spool_max_per_tenant 3" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
