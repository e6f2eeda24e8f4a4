"""DeerFlow's ``memory.backend_config`` → the settings of :class:`SQLMemoryManager`.

Keys (all optional)::

    memory:
      manager_class: memory_sql.integrations.deerflow:SQLMemoryManager
      backend_config:
        url: postgresql+psycopg://memory@db/memory   # default: sqlite:///{storage_path}/memory_sql.db
        tenant_id: acme                              # default: default
        in_process_worker: true                      # false: `memory-sql worker` runs the updates
        max_facts: 100                               # …and every other MemoryConfig key
        max_injection_tokens: 2000                   # DeerFlow's names are accepted too
        model: {model: gpt-4o-mini, api_key: $OPENAI_API_KEY, base_url: …, temperature: 0}

- ``url``: the database (``sqlite:///…`` or ``postgresql+psycopg://…``; ``storage`` and
  ``database_url``, MemoryConfig's names, mean the same). Default: a SQLite file
  ``memory_sql.db`` in ``storage_path``, the state folder DeerFlow injects.
- ``spool_dir`` (MemoryConfig's): where conversations wait while the database cannot take
  them. Default: ``memory_sql.spool`` in ``storage_path``, whatever the database, so they
  survive a restart of DeerFlow's container along with its state folder.
- ``tenant_id``: the tenant every memory of this DeerFlow belongs to.
- ``in_process_worker``: whether the backend runs the queued updates itself (``workers``
  threads), or leaves them to ``memory-sql worker`` processes on the same database.
- every :class:`~memory_sql.MemoryConfig` key under its own name (``debounce_seconds``,
  ``max_facts``, ``model_name``, ``llm_base_url``, …), and DeerFlow's names where they
  differ: ``max_injection_tokens`` (``injected_memory_max_tokens``),
  ``fact_confidence_threshold`` (``min_confidence``), ``token_counting: tiktoken | char``, and
  ``model: {model, api_key, base_url, temperature}`` (DeerMem's model block; ``provider``
  may only say ``openai``: memory_sql's own client speaks the OpenAI-compatible protocol).

An unknown key, or a value MemoryConfig refuses, raises :class:`~memory_sql.ConfigError` naming
the key (DeerFlow then fails at startup, as it should). Values come from ``backend_config``
only; no ``MEMORY_SQL_*`` variable is read (DeerFlow resolves ``$VAR`` in its config.yaml), but
the LLM settings left unset fall back to ``OPENAI_*`` as everywhere in memory_sql.

No OpenAI-compatible settings (``model``, ``model_name``, ``llm_base_url``, ``llm_api_key``)
means: use the host's default chat model, when the host offers one (see ``llm.py``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import ALIASES, SECTIONS, MemoryConfig, flat_keys
from ...database import redacted, resolve_url
from ...errors import ConfigError
from ...scope import Scope
from ...storage.dialects import database_file

PREFIX = "memory.backend_config"
DATABASE_FILE = "memory_sql.db"
SPOOL_FOLDER = "memory_sql.spool"

_OWN_KEYS = ("url", "tenant_id", "in_process_worker", "storage_path", "model")
_URL_KEYS = ("url", "storage", "database_url")
_MODEL_KEYS = {
    "model": "model_name",
    "api_key": "llm_api_key",
    "base_url": "llm_base_url",
    "temperature": "llm_temperature",
}
LLM_KEYS = ("model", "model_name", "llm_base_url", "llm_api_key")
"""Keys whose presence means: memory_sql's own OpenAI-compatible client, not the host's model."""
_DEERMEM_ONLY = frozenset(
    {
        "fact_eviction_policy",
        "fact_eviction_shadow_enabled",
        "queue_max_depth",
        "prompts_dir",
        "manifest_filename",
        "strict_user_scope",
        "file_lock_timeout_seconds",
    }
)


@dataclass(frozen=True)
class BackendSettings:
    """What ``backend_config`` says, validated."""

    config: MemoryConfig
    """The memory settings; ``config.storage`` is the database URL."""
    tenant_id: str
    in_process_worker: bool
    own_llm: bool
    """Whether ``backend_config`` names OpenAI-compatible settings (see ``LLM_KEYS``)."""

    @property
    def url(self) -> str:
        return self.config.storage

    def redacted_url(self) -> str:
        return redacted(self.config.storage)


def read_backend_config(backend_config: Mapping[str, Any] | None) -> BackendSettings:
    """The settings ``backend_config`` holds (see the module docstring).

    Raises:
        ConfigError: an unknown key or an invalid value, named in the message.
    """
    given = dict(backend_config or {})
    for key in given:
        if not isinstance(key, str):
            raise ConfigError(f"{PREFIX}: key {key!r} is not a string")
    _check_keys(given)
    settings: dict[str, Any] = {
        k: v for k, v in given.items() if k not in _OWN_KEYS and k not in _URL_KEYS
    }
    if "storage_class" in settings:
        raise ConfigError(
            f"{PREFIX}.storage_class: the DeerFlow backend stores memory in SQL; give url "
            "(sqlite:///… or postgresql+psycopg://…) instead",
            key="storage_class",
        )
    settings.update(_model_block(given.get("model"), settings))
    settings["storage"] = _url(given)
    folder = given.get("storage_path")
    if "spool_dir" not in settings and isinstance(folder, (str, Path)) and folder != "":
        # DeerFlow's state folder outlives its container; the user's home inside it may not.
        settings["spool_dir"] = Path(folder) / SPOOL_FOLDER
    tenant = given.get("tenant_id", "default")
    try:
        tenant_id = Scope.of(tenant_id=tenant).tenant_id
    except ValueError as exc:
        raise ConfigError(f"{PREFIX}.tenant_id: {exc}", key="tenant_id") from None
    worker = given.get("in_process_worker", True)
    if not isinstance(worker, bool):
        raise ConfigError(
            f"{PREFIX}.in_process_worker: got {worker!r}, allowed: true or false",
            key="in_process_worker",
        )
    try:
        config = MemoryConfig(**settings)
    except ConfigError as exc:
        message = str(exc).removeprefix("invalid memory config: ")
        raise ConfigError(f"{PREFIX}: {message}", key=exc.key) from None
    return BackendSettings(
        config=config,
        tenant_id=tenant_id,
        in_process_worker=worker,
        own_llm=any(key in given for key in LLM_KEYS),
    )


def _check_keys(given: Mapping[str, Any]) -> None:
    known = [*_OWN_KEYS, *_URL_KEYS, *flat_keys(), *ALIASES, *SECTIONS]
    for key in given:
        if key in known:
            continue
        if key in _DEERMEM_ONLY:
            hint = " (a DeerMem setting memory_sql has no equivalent of; remove it)"
        else:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"{PREFIX}: unknown key {key!r}{hint}; known keys: {', '.join(dict.fromkeys(known))}",
            key=key,
        )
    urls = [key for key in _URL_KEYS if key in given]
    if len(urls) > 1:
        raise ConfigError(f"{PREFIX}: give one of {' or '.join(urls)}, not both", key=urls[1])


def _model_block(model: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """DeerMem's ``model: {model, api_key, base_url, temperature}`` as MemoryConfig keys."""
    if model is None:
        return {}
    if not isinstance(model, Mapping):
        raise ConfigError(
            f"{PREFIX}.model: got {type(model).__name__}, allowed: a mapping with model, "
            "api_key, base_url, temperature",
            key="model",
        )
    out: dict[str, Any] = {}
    for key, value in model.items():
        if key == "provider":
            if value not in (None, "", "openai"):
                raise ConfigError(
                    f"{PREFIX}.model.provider: {value!r} is not supported: memory_sql's LLM "
                    "client speaks the OpenAI-compatible chat-completions protocol (give "
                    "base_url for any such endpoint), or leave out model to use DeerFlow's "
                    "default chat model (any provider)",
                    key="model.provider",
                )
            continue
        field = _MODEL_KEYS.get(key)
        if field is None:
            raise ConfigError(
                f"{PREFIX}.model: unknown key {key!r}; known: provider, {', '.join(_MODEL_KEYS)}",
                key=f"model.{key}",
            )
        if field in settings or any(ALIASES.get(k) == field for k in settings):
            raise ConfigError(f"{PREFIX}: give either model.{key} or {field}, not both", key=field)
        if value is not None:
            out[field] = value
    return out


def _url(given: Mapping[str, Any]) -> str:
    key = next((k for k in _URL_KEYS if k in given), None)
    if key is None:
        folder = given.get("storage_path")
        if folder is None or folder == "":
            return f"sqlite:///{DATABASE_FILE}"
        if not isinstance(folder, (str, Path)):
            raise ConfigError(f"{PREFIX}.storage_path: got {folder!r}, allowed: a folder")
        return f"sqlite:///{Path(folder) / DATABASE_FILE}"
    value = given[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{PREFIX}.{key}: got {value!r}, allowed: a database URL", key=key)
    try:
        resolve_url(value.strip())
    except ValueError as exc:
        raise ConfigError(
            f"{PREFIX}.{key}: {redacted(value)!r} is not a database URL memory_sql can use "
            f"({exc}); give sqlite:///… or postgresql+psycopg://…",
            key=key,
        ) from None
    return value.strip()


def sqlite_folder(url: str) -> Path | None:
    """The folder of a SQLite file URL (to create before the database), else None."""
    database = database_file(resolve_url(url))
    return None if database is None else Path(database).parent
