"""MemoryConfig: defaults, YAML, environment overrides, error messages and secrets."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import pytest

from memory_sql.config import (
    FLAT_KEYS,
    SECTIONS,
    MemoryConfig,
    QueueSettings,
    field_of,
    flat_keys,
    settings_table,
)
from memory_sql.errors import ConfigError
from memory_sql.recall.context import Recall
from memory_sql.storage import FileStorage
from memory_sql.storage.configured import open_configured
from memory_sql.tokens import make_token_counter

SECRET = "sk-test-DO-NOT-LEAK-1234"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_seeds() -> None:
    config = MemoryConfig.from_env({})
    assert config.enabled is True
    assert config.queue.debounce_seconds == 30
    assert config.eviction.max_facts == 200
    assert config.update.min_confidence == 0.7
    assert config.llm.model is None
    assert config.tokens.counting is True
    assert config.recall.injected_memory_max_tokens == 2000
    assert config.recall.guaranteed_categories == ("correction",)
    assert config.recall.guaranteed_token_budget == 500
    assert config.storage == "sqlite:///memory_sql.db"
    assert config.queue.max_debounce_seconds >= config.queue.debounce_seconds
    assert config == MemoryConfig()


def test_from_yaml_reads_the_memory_section(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
models: [gpt-4o]            # other sections of the app's config are ignored
memory:
  enabled: false
  debounce_seconds: 5
  max_facts: 50
  model_name: gpt-4o-mini
  token_counting: char
  guaranteed_categories: [correction, Goal]
  storage:
    use: my_app.storage:RedisStorage
    url: redis://localhost/0
""",
    )
    config = MemoryConfig.from_yaml(path, env={})
    assert config.enabled is False
    assert config.queue.debounce_seconds == 5
    assert config.eviction.max_facts == 50
    assert config.llm.model == "gpt-4o-mini"
    assert config.tokens.counting is False
    assert config.recall.guaranteed_categories == ("correction", "goal")
    assert config.storage_class == "my_app.storage:RedisStorage"
    assert config.storage == "redis://localhost/0"


@pytest.mark.parametrize("text", ["", "other: 1\n", "memory:\n", "memory: {}\n"])
def test_yaml_without_settings_gives_defaults(tmp_path: Path, text: str) -> None:
    assert MemoryConfig.from_yaml(write(tmp_path, text), env={}) == MemoryConfig()


def test_environment_overrides_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  debounce_seconds: 5\n  storage: sqlite:///a.db\n")
    env = {
        "MEMORY_SQL_DEBOUNCE_SECONDS": "10",
        "MEMORY_SQL_DATABASE_URL": "sqlite:///b.db",
        "MEMORY_SQL_GUARANTEED_CATEGORIES": "correction, identity",
        "MEMORY_SQL_ENABLED": "no",
        "MEMORY_SQL_MODEL_NAME": "",
        "MEMORY_SQL_TEST_PG_URL": "postgresql://elsewhere",
    }
    config = MemoryConfig.from_yaml(path, env=env)
    assert config.queue.debounce_seconds == 10
    assert config.storage == "sqlite:///b.db"
    assert config.recall.guaranteed_categories == ("correction", "identity")
    assert config.enabled is False
    assert config.llm.model is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [('["a", "b"]', ("a", "b")), ("a,b,a", ("a", "b")), ("", ()), ("[]", ())],
)
def test_env_lists(value: str, expected: tuple[str, ...]) -> None:
    env = {"MEMORY_SQL_GUARANTEED_CATEGORIES": value}
    assert MemoryConfig.from_env(env).recall.guaranteed_categories == expected


@pytest.mark.parametrize(
    ("yaml_text", "env", "key", "expected"),
    [
        ("", {"OPENAI_API_KEY": "sk-env"}, "llm_api_key", "sk-env"),
        ("  llm_api_key: sk-yaml\n", {"OPENAI_API_KEY": "sk-env"}, "llm_api_key", "sk-yaml"),
        (
            "  llm_api_key: sk-yaml\n",
            {"OPENAI_API_KEY": "sk-env", "MEMORY_SQL_LLM_API_KEY": "sk-mine"},
            "llm_api_key",
            "sk-mine",
        ),
        (
            "",
            {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"},
            "llm_base_url",
            "http://127.0.0.1:8000/v1",
        ),
        ("", {"OPENAI_MODEL": "qwen3"}, "model_name", "qwen3"),
        ("  model_name: m1\n", {"OPENAI_MODEL": "qwen3"}, "model_name", "m1"),
    ],
)
def test_openai_variables_are_the_lowest_priority(
    tmp_path: Path, yaml_text: str, env: dict[str, str], key: str, expected: str
) -> None:
    config = MemoryConfig.from_yaml(write(tmp_path, "memory:\n" + yaml_text), env=env)
    value: Any = config.value(key)
    assert (value.get_secret_value() if key == "llm_api_key" else value) == expected


def test_constructor_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_SQL_MAX_FACTS", "20")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    config = MemoryConfig()
    assert config.eviction.max_facts == 200 and config.llm.api_key is None
    assert MemoryConfig.from_env().eviction.max_facts == 20


BAD_VALUES = [
    ("debounce_seconds", -1, "a number from 0 to 3600"),
    ("debounce_seconds", True, "a boolean is not a number"),
    ("debounce_seconds", "soon", "got 'soon'"),
    ("max_debounce_seconds", 10, "must be at least debounce_seconds (30)"),
    ("max_facts", 5, "a whole number from 10 to 10000"),
    ("max_facts", 10001, "a whole number from 10 to 10000"),
    ("max_facts", 20.5, "a whole number from 10 to 10000"),
    ("min_confidence", 1.5, "a number from 0 to 1"),
    ("min_confidence", float("nan"), "a number from 0 to 1"),
    ("injected_memory_max_tokens", 50, "a whole number from 100 to 32000"),
    ("guaranteed_token_budget", 9000, "from 0 to 8000"),
    ("guaranteed_categories", ["Bad Name"], "is not a category name"),
    ("guaranteed_categories", [3], "is not a category name"),
    ("workers", 0, "a whole number from 1 to 32"),
    ("lease_seconds", 0, "a number greater than 0 and at most 86400"),
    ("max_attempts", 0, "from 1 to 100"),
    ("llm_timeout_seconds", 601, "greater than 0 and at most 600"),
    ("llm_temperature", 3, "from 0 to 2"),
    ("llm_base_url", "ftp://x", "is not an http:// or https:// URL"),
    ("storage", "  ", "storage is empty"),
    ("storage", {"use": "x:Y", "bucket": 1}, "a mapping must be {use:"),
    ("storage_class", "not a path!", "is not a class path"),
    ("token_counting", "sometimes", "true, false, 'tiktoken' or 'char'"),
    ("enabled", "perhaps", "true or false"),
    ("tiktoken_encoding_file", "/no/such/cl100k_base.tiktoken", "is not a file"),
    ("patterns_dir", "/no/such/folder", "is not a directory"),
]


@pytest.mark.parametrize(("key", "value", "fragment"), BAD_VALUES)
def test_bad_value_names_key_and_allowed_range(key: str, value: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        MemoryConfig(**{key: value})
    message = str(info.value)
    assert key in message
    assert fragment in message


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_env({"MEMORY_SQL_MAX_FACTS": "many"})
    assert "max_facts (from MEMORY_SQL_MAX_FACTS): got 'many'" in str(info.value)
    assert info.value.key == "max_facts"


def test_bad_yaml_value_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  workers: 99\n")
    with pytest.raises(ConfigError, match=rf"workers \(from {path}\).*from 1 to 32"):
        MemoryConfig.from_yaml(path, env={})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("memory:\n  max_factz: 10\n", "(did you mean 'max_facts'?)"),
        ("memory:\n  colour: blue\n", "unknown key colour (from"),
        ("memory:\n  storage: a\n  database_url: b\n", "either 'storage' or 'database_url'"),
        ("memory:\n  1: x\n", "key 1 is not a string"),
    ],
)
def test_unknown_keys_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_yaml(write(tmp_path, text), env={})
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("var", "fragment"),
    [
        ("MEMORY_SQL_MAX_FACTZ", "(did you mean MEMORY_SQL_MAX_FACTS?)"),
        ("MEMORY_SQL_DATABASE_ULR", "(did you mean MEMORY_SQL_DATABASE_URL?)"),
        ("MEMORY_SQL_COLOUR", "known: MEMORY_SQL_ENABLED, MEMORY_SQL_STORAGE"),
    ],
)
def test_unknown_env_variable_is_refused(
    tmp_path: Path, var: str, fragment: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_env({var: "10"})
    assert f"unknown environment variable {var}" in str(info.value)
    assert fragment in str(info.value)
    with pytest.raises(ConfigError, match=f"unknown environment variable {var}"):
        MemoryConfig.from_yaml(write(tmp_path, "memory:\n  max_facts: 20\n"), env={var: "x"})


def test_non_config_env_variables_are_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    env = {
        "MEMORY_SQL_CONFIG": "/etc/app/config.yaml",
        "MEMORY_SQL_TEST_PG_URL": "postgresql://elsewhere",
        "MEMORY_SQL_TEST_": "",
        "MEMORY_SQLITE": "not our prefix",
        "OTHER_MEMORY_SQL_X": "1",
    }
    with caplog.at_level(logging.WARNING, logger="memory_sql"):
        assert MemoryConfig.from_env(env) == MemoryConfig()
    assert not caplog.records
    aliased = MemoryConfig.from_env(
        {
            "MEMORY_SQL_DATABASE_URL": "sqlite:///b.db",
            "MEMORY_SQL_MAX_INJECTION_TOKENS": "900",
            "MEMORY_SQL_FACT_CONFIDENCE_THRESHOLD": "0.8",
        }
    )
    assert aliased.storage == "sqlite:///b.db"
    assert aliased.recall.injected_memory_max_tokens == 900
    assert aliased.update.min_confidence == 0.8


@pytest.mark.parametrize(
    ("use", "expected"),
    [
        ("my_app.storage:RedisStorage", "my_app.storage:RedisStorage"),
        ("my_app.storage.RedisStorage", "my_app.storage:RedisStorage"),
        ("  store.Backend ", "store:Backend"),
    ],
)
def test_storage_use_is_normalised_to_module_colon_class(
    tmp_path: Path, use: str, expected: str
) -> None:
    path = write(tmp_path, f"memory:\n  storage:\n    use: '{use}'\n    path: /srv/memory\n")
    config = MemoryConfig.from_yaml(path, env={})
    assert config.storage_class == expected
    assert config.storage == "/srv/memory"
    assert "storage" in config.model_fields_set
    assert MemoryConfig(storage_class=use).storage_class == expected
    assert MemoryConfig.from_env({"MEMORY_SQL_STORAGE_CLASS": use}).storage_class == expected
    # Without url or path, storage keeps its default and is not among the fields set.
    bare = MemoryConfig(storage={"use": use})
    assert bare.storage_class == expected
    assert "storage" not in bare.model_fields_set


@pytest.mark.parametrize("use", ["RedisStorage", "my_app:", "my_app.storage:Redis.Storage", "a..b"])
def test_storage_use_must_be_a_class_path(use: str) -> None:
    with pytest.raises(ConfigError, match="is not a class path like 'package.module:Class'"):
        MemoryConfig(storage={"use": use})


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        (None, "not found", None),
        ("memory:\n  max_facts: [1,\n", "invalid YAML", 3),
        ("memory:\n\tmax_facts: 1\n", "invalid YAML", 2),
        ("- just\n- a list\n", "expected a mapping", None),
        ("memory: [1, 2]\n", "'memory:' must be a mapping", None),
    ],
)
def test_bad_config_file_names_the_path(
    tmp_path: Path, text: str | None, fragment: str, line: int | None
) -> None:
    path = tmp_path / "config.yaml" if text is None else write(tmp_path, text)
    with pytest.raises(ConfigError, match=fragment) as info:
        MemoryConfig.from_yaml(path, env={})
    assert str(path) in str(info.value)
    assert info.value.path == str(path)
    assert info.value.line == line


def test_broken_pattern_file_is_refused_at_load(tmp_path: Path) -> None:
    folder = tmp_path / "patterns"
    folder.mkdir()
    (folder / "correction.txt").write_text("fine\n(broken\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_yaml(write(tmp_path, f"memory:\n  patterns_dir: {folder}\n"), env={})
    assert f"{(folder / 'correction.txt').resolve()}:2:" in str(info.value)
    assert "patterns_dir" in str(info.value)


def test_secrets_never_show() -> None:
    url = "postgresql+psycopg://app:hunter2@db.internal/memory"
    config = MemoryConfig.from_env({"OPENAI_API_KEY": SECRET, "MEMORY_SQL_STORAGE": url})
    assert config.llm.api_key is not None and config.llm.api_key.get_secret_value() == SECRET
    for shown in (repr(config), str(config), str(config.redacted())):
        assert SECRET not in shown and "hunter2" not in shown
    assert "app:***@db.internal" in repr(config)
    assert config.redacted()["llm"]["api_key"] == "**********"

    with pytest.raises(ConfigError) as info:
        MemoryConfig(llm_api_key=SECRET, storage=url, max_facts=1, workers=url)
    rendered = "".join(traceback.format_exception(info.value))
    assert SECRET not in rendered and "hunter2" not in rendered
    with pytest.raises(ValueError) as validated:
        MemoryConfig.model_validate({"llm_api_key": SECRET, "max_facts": 1})
    assert SECRET not in str(validated.value)


SECRET_URLS = [
    # (key, value, what must not show, what is shown instead)
    ("storage", "postgresql+psycopg://app@h/db?password=s3cret", "s3cret", "?password=***"),
    ("storage", "postgresql+psycopg://app:pw@h/db?sslpassword=s3cret", "s3cret", "app:***@h"),
    ("storage", "postgresql://u:p%40ss/w@h/db", "p%40ss", "u:***@h/db"),
    ("llm_base_url", "https://user:sk-live@proxy/v1", "sk-live", "user:***@proxy"),
    ("llm_base_url", "https://proxy/v1?api_key=sk-live", "sk-live", "?api_key=***"),
]


@pytest.mark.parametrize(("key", "value", "secret", "shown"), SECRET_URLS)
def test_secret_parts_of_urls_never_show(key: str, value: str, secret: str, shown: str) -> None:
    config = MemoryConfig(**{key: value})
    assert config.value(key) == value  # the setting itself is untouched
    for text in (repr(config), str(config), str(config.redacted())):
        assert secret not in text
        assert shown in text
    assert shown in str(config.redacted())


@pytest.mark.parametrize(("key", "value", "secret", "shown"), SECRET_URLS)
def test_secret_parts_of_urls_never_show_in_errors(
    key: str, value: str, secret: str, shown: str
) -> None:
    # An invalid value shown in an error message (a URL given for a number, a bad base URL).
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_env({"MEMORY_SQL_WORKERS": value})
    assert secret not in str(info.value) and shown in str(info.value)
    with pytest.raises(ConfigError) as info:
        MemoryConfig(llm_base_url=value.replace("https://", "ftp://").replace("postgresql", "ftp"))
    assert secret not in str(info.value)
    assert "is not an http:// or https:// URL" in str(info.value)


def test_config_is_immutable() -> None:
    config = MemoryConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.eviction.max_facts = 10  # type: ignore[misc]


# Sections -----------------------------------------------------------------------------------


def test_nested_yaml_sections_and_flat_keys_mean_the_same(tmp_path: Path) -> None:
    nested = write(
        tmp_path,
        """
memory:
  queue: {debounce_seconds: 5, workers: 3}
  llm:
    model: gpt-4o-mini
    base_url: http://127.0.0.1:9/v1
  recall: {guaranteed_categories: [Goal], expansion_facts: 2}
  spool_max_conversations: 7
""",
    )
    config = MemoryConfig.from_yaml(nested, env={})
    flat = MemoryConfig(
        debounce_seconds=5,
        workers=3,
        model_name="gpt-4o-mini",
        llm_base_url="http://127.0.0.1:9/v1",
        guaranteed_categories=["goal"],
        recall_expansion_facts=2,
        spool_max_conversations=7,
    )
    assert config == flat
    assert config.queue.debounce_seconds == 5 and config.queue.workers == 3
    assert config.llm.model == "gpt-4o-mini"
    assert config.recall.guaranteed_categories == ("goal",)
    assert config.spool.max_conversations == 7
    assert config.value("debounce_seconds") == 5
    assert config.value("max_injection_tokens") == 2000  # an alias


def test_the_environment_overrides_a_nested_yaml_value(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  queue: {debounce_seconds: 5, workers: 3}\n")
    config = MemoryConfig.from_yaml(path, env={"MEMORY_SQL_DEBOUNCE_SECONDS": "9"})
    assert config.queue.debounce_seconds == 9 and config.queue.workers == 3


def test_openai_variables_do_not_override_a_nested_llm_key(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  llm: {model: mine, api_key: sk-yaml}\n")
    config = MemoryConfig.from_yaml(path, env={"OPENAI_MODEL": "x", "OPENAI_API_KEY": "sk-env"})
    assert config.llm.model == "mine"
    assert config.llm.api_key is not None and config.llm.api_key.get_secret_value() == "sk-yaml"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "memory:\n  debounce_seconds: 5\n  queue: {debounce_seconds: 6}\n",
            "give either 'debounce_seconds' or queue.debounce_seconds",
        ),
        ("memory:\n  queue: {debounce_secondz: 5}\n", "unknown key queue.debounce_secondz"),
        ("memory:\n  queue: {debounce_secondz: 5}\n", "(did you mean 'debounce_seconds'?)"),
        ("memory:\n  queue: {workers: 99}\n", "queue.workers (from "),
        ("memory:\n  queue: {workers: 99}\n", "a whole number from 1 to 32"),
        ("memory:\n  queue: 3\n", "queue"),
        ("memory:\n  queu: {workers: 2}\n", "(did you mean 'queue'?)"),
    ],
)
def test_nested_mistakes_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_yaml(write(tmp_path, text), env={})
    assert fragment in str(info.value)


def test_a_section_model_is_accepted_and_replace_keeps_the_rest() -> None:
    config = MemoryConfig(queue=QueueSettings(workers=4), storage="sqlite:///x.db")
    assert config.queue.workers == 4
    changed = config.replace(debounce_seconds=0, max_debounce_seconds=0, model_name="m")
    assert changed.queue.workers == 4 and changed.queue.debounce_seconds == 0
    assert changed.llm.model == "m" and changed.storage == "sqlite:///x.db"
    assert "storage" in changed.model_fields_set
    with pytest.raises(ConfigError, match="workers"):
        config.replace(workers=0)


def test_every_flat_key_names_a_documented_field_and_every_field_has_one() -> None:
    fields = {(name, field) for name, section in SECTIONS.items() for field in section.model_fields}
    assert set(FLAT_KEYS.values()) == fields
    assert len(FLAT_KEYS) == len(fields)  # one flat key each
    assert set(MemoryConfig.model_fields) == {*flat_keys(), *SECTIONS} - set(FLAT_KEYS)
    for key in flat_keys():
        assert field_of(key).description, f"{key} has no description"


def test_the_configuration_page_is_the_settings_table() -> None:
    """docs/settings.md holds :func:`settings_table` as it is now (its generator)."""
    page = (Path(__file__).parent.parent / "docs" / "settings.md").read_text("utf-8")
    assert settings_table() in page


def test_the_expansion_facts_reach_the_ranking(tmp_path: Path) -> None:
    config = MemoryConfig(recall_expansion_facts=3, recall_expansion_weight=0.5)
    recall = Recall(config.recall, FileStorage(tmp_path), make_token_counter(False))
    try:
        assert recall.weights.expansion_facts == 3 and recall.weights.expansion == 0.5
    finally:
        recall.close()


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, 5), ({"MEMORY_SQL_DATABASE_PREPARE_THRESHOLD": "0"}, 0)]
    + [({"MEMORY_SQL_DATABASE_PREPARE_THRESHOLD": ""}, None)],
)
def test_the_prepare_threshold_is_read_flat_and_blank_is_never(
    env: dict[str, str], expected: int | None
) -> None:
    assert MemoryConfig.from_env(env).database.prepare_threshold == expected


def test_the_prepare_threshold_comes_from_the_database_section(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  database: {prepare_threshold: 2}\n")
    assert MemoryConfig.from_yaml(path).value("database_prepare_threshold") == 2
    with pytest.raises(ConfigError, match="database.prepare_threshold"):
        MemoryConfig(database={"prepare_threshold": -1})


@pytest.mark.postgres
@pytest.mark.parametrize("threshold", [None, 0, 7])
def test_the_prepare_threshold_reaches_psycopg(pg_url: str, threshold: int | None) -> None:
    owned: list[Any] = []
    config = MemoryConfig(storage=pg_url, database_prepare_threshold=threshold)
    storage = open_configured(config, owned)
    try:
        with owned[0].connect() as conn:
            assert conn.connection.dbapi_connection.prepare_threshold == threshold
    finally:
        storage.close()
        for engine in owned:
            engine.dispose()
