"""``memory-sql keys create|list|revoke``: the secret shown once and never stored, revocation,
and refusals that name what is wrong."""

from __future__ import annotations

import json

import sqlalchemy as sa
from typer.testing import CliRunner

from memory_sql.cli import app
from memory_sql.database import create_engine
from memory_sql.server.keys import KeyChecker

runner = CliRunner()


def test_keys_are_made_listed_and_revoked(tmp_path):
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    made = runner.invoke(
        app, ["keys", "create", "--tenant", "acme", "--role", "read", "--url", url]
    )
    assert made.exit_code == 0, made.output
    secret = made.output.strip().splitlines()[-1]
    assert secret.startswith("msk_")
    key_id = secret.split("_")[1]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            stored = " ".join(
                map(str, conn.execute(sa.text("SELECT * FROM memory_api_keys")).one())
            )
        assert secret.split("_", 2)[2] not in stored  # only its hash is kept
        never_used = json.loads(runner.invoke(app, ["keys", "list", "--json", "--url", url]).output)
        assert never_used[0]["last_used_at"] is None
        assert KeyChecker(engine).check(secret).tenant_id == "acme"

        listed = runner.invoke(app, ["keys", "list", "--json", "--url", url])
        (entry,) = json.loads(listed.output)
        assert (entry["key_id"], entry["role"], entry["revoked_at"]) == (key_id, "read", None)
        assert entry["last_used_at"] is not None  # a check records the key's use
        assert secret not in listed.output

        revoked = runner.invoke(app, ["keys", "revoke", key_id, "--url", url])
        assert revoked.exit_code == 0 and key_id in revoked.output
        assert KeyChecker(engine).check(secret) is None
        (entry,) = json.loads(runner.invoke(app, ["keys", "list", "--json", "--url", url]).output)
        assert entry["revoked_at"] is not None
    finally:
        engine.dispose()


def test_bad_keys_are_refused_naming_the_problem(tmp_path):
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    cases = [
        (["--tenant", "acme", "--role", "owner"], "role must be one of read, write, admin"),
        (["--tenant", "_operator", "--role", "write"], "must be admin keys"),
        (["--tenant", "bad tenant!"], "tenant_id"),
    ]
    for arguments, named in cases:
        result = runner.invoke(app, ["keys", "create", *arguments, "--url", url])
        assert result.exit_code == 1, result.output
        assert named in " ".join(result.output.split()), result.output
    missing = runner.invoke(app, ["keys", "revoke", "0123456789abcdef", "--url", url])
    assert missing.exit_code == 1 and "no API key" in missing.output
    assert json.loads(runner.invoke(app, ["keys", "list", "--json", "--url", url]).output) == []
