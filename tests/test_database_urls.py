"""database.redacted: one way to show any database URL, http(s) URL or folder without secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from memory_sql.database import redacted

CASES = [
    # Database URLs, read as SQLAlchemy reads them.
    ("postgresql+psycopg://app:hunter2@db.internal/memory", "app:***@db.internal/memory"),
    ("postgresql://u:p%40ss/w@h/db", "postgresql://u:***@h/db"),  # "/" and "@" in a password
    ("postgresql://u:a@b@h/db", "postgresql://u:***@***@h/db"),  # a raw "@" in a password
    (
        "postgresql+psycopg://app@h/db?password=s3cret&sslmode=require",
        "postgresql+psycopg://app@h/db?password=***&sslmode=require",
    ),
    (
        "postgresql+psycopg://app:pw@h:5432/db?sslpassword=kp&application_name=memory",
        "postgresql+psycopg://app:***@h:5432/db?sslpassword=***&application_name=memory",
    ),
    ("mysql://h/db?api_key=1&api_key=2", "mysql://h/db?api_key=***&api_key=***"),
    ("sqlite:///memory_sql.db", "sqlite:///memory_sql.db"),
    ("sqlite:////var/lib/memory.db?mode=ro", "sqlite:////var/lib/memory.db?mode=ro"),
    # http(s) URLs, as written.
    ("https://user:sk-live@proxy/v1", "https://user:***@proxy/v1"),
    ("https://me@example.com:pw@proxy:8443/v1", "https://me@example.com:***@proxy:8443/v1"),
    (
        "https://api.example.com/v1?api_key=sk-1&model=x&access_token=t#part",
        "https://api.example.com/v1?api_key=***&model=x&access_token=***#part",
    ),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    # Neither: masked as written.
    ("not a scheme://u:pw@h/x?Token=1", "not a scheme://u:***@h/x?Token=***"),
    # Folders and files stay as they are.
    ("/var/lib/memory", "/var/lib/memory"),
    ("./memory data/@me:x", "./memory data/@me:x"),
    ("C:\\data\\memory", "C:\\data\\memory"),
]


@pytest.mark.parametrize(("url", "expected"), CASES)
def test_redacted(url: str, expected: str) -> None:
    shown = redacted(url)
    assert shown.endswith(expected)
    for secret in ("hunter2", "s3cret", "sk-live", "kp&", "p@ss", "a@b", "sk-1"):
        assert secret not in shown


def test_redacted_takes_sqlalchemy_urls_and_paths() -> None:
    url = make_url("postgresql+psycopg://app:hunter2@h/db?password=x")
    assert redacted(url) == "postgresql+psycopg://app:***@h/db?password=***"
    assert redacted(Path("/var/lib/memory")) == "/var/lib/memory"
