"""memory_sql's settings: :class:`MemoryConfig`.

Where values come from, the first that has one winning:

1. ``MEMORY_SQL_<KEY>`` environment variables (``MEMORY_SQL_DEBOUNCE_SECONDS=10``; lists as
   ``a,b`` or JSON ``["a", "b"]``; an empty value means "none" for optional keys and an empty
   list for lists);
2. the ``memory:`` section of a YAML file (:meth:`MemoryConfig.from_yaml`);
3. for the LLM only, the usual OpenAI variables: ``OPENAI_API_KEY`` → ``llm_api_key``,
   ``OPENAI_BASE_URL`` → ``llm_base_url``, ``OPENAI_MODEL`` → ``model_name``;
4. the defaults below.

Environment variables are read only by :meth:`~MemoryConfig.from_yaml` and
:meth:`~MemoryConfig.from_env`; ``MemoryConfig(...)`` takes exactly what it is given. An
unknown key is an error wherever it comes from: in YAML, in ``MemoryConfig(...)``, and as a
``MEMORY_SQL_<KEY>`` variable (a misspelt variable would otherwise silently do nothing), with a
did-you-mean hint. Aliases count as keys (``MEMORY_SQL_DATABASE_URL`` sets ``storage``). Only
``MEMORY_SQL_CONFIG`` (the path of the config file: the CLI's ``--config``),
``MEMORY_SQL_TEST_*`` (test settings), and the settings of the HTTP client and of ``memory-sql
mcp`` (``MEMORY_SQL_SERVICE_URL``, ``MEMORY_SQL_API_KEY``, ``MEMORY_SQL_MCP_*``) are not
config keys, and are left alone. Every invalid
value raises :class:`~memory_sql.errors.ConfigError` naming the key, where it came from and
what is allowed.
The API key is a ``SecretStr``, and the storage and LLM URLs are shown through
:func:`memory_sql.database.redacted` (passwords and key-like query parameters masked) in
``repr`` and in error messages; log :meth:`redacted`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from .database import redacted
from .errors import ConfigError
from .models import CATEGORY_PATTERN
from .pattern_files import load_patterns

ENV_PREFIX = "MEMORY_SQL_"
_ENV_IGNORED = re.compile(r"MEMORY_SQL_(?:CONFIG|TEST_\w*|SERVICE_URL|API_KEY|MCP_\w*)")
ALIASES = {
    "database_url": "storage",
    "max_injection_tokens": "injected_memory_max_tokens",
    "fact_confidence_threshold": "min_confidence",
}
"""Other names accepted for a key (DeerFlow's newer names, and ``database_url``)."""
OPENAI_FALLBACKS = {
    "llm_api_key": "OPENAI_API_KEY",
    "llm_base_url": "OPENAI_BASE_URL",
    "model_name": "OPENAI_MODEL",
}
_STORAGE_FORM_KEYS = ("use", "url", "path")
_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*")
_SECRET = "**********"
_URL_FIELDS = ("storage", "llm_base_url", "embedding_base_url")  # shown through database.redacted
# Where each key's value came from, for error messages of the build in progress.
_ORIGINS: ContextVar[Mapping[str, str] | None] = ContextVar("memory_sql_origins", default=None)

REPLY_OVERHEAD_TOKENS = 1536
"""What a memory-LLM reply needs beyond its facts and summaries (JSON keys, labels, reasoning)."""

_NUMBER_FIELDS = (
    "debounce_seconds",
    "max_debounce_seconds",
    "max_facts",
    "min_confidence",
    "injected_memory_max_tokens",
    "update_memory_max_tokens",
    "guaranteed_token_budget",
    "workers",
    "lease_seconds",
    "max_attempts",
    "retry_backoff_seconds",
    "sweep_interval_seconds",
    "spool_max_conversations",
    "spool_max_per_tenant",
    "spool_retry_seconds",
    "llm_daily_calls_per_tenant",
    "llm_daily_tokens_per_tenant",
    "queue_max_row_messages",
    "queue_max_row_bytes",
    "llm_timeout_seconds",
    "llm_max_retries",
    "llm_temperature",
    "llm_max_tokens",
    "llm_repair_attempts",
    "server_max_body_bytes",
    "server_max_messages",
    "server_max_message_chars",
    "recall_relevance_weight",
    "recall_confidence_weight",
    "recall_recency_weight",
    "recall_recency_half_life_days",
    "recall_duplicate_overlap",
    "recall_candidates",
    "recall_expansion_weight",
    "access_heat_flush_seconds",
    "eviction_confidence_weight",
    "eviction_freshness_weight",
    "eviction_heat_weight",
    "eviction_freshness_half_life_days",
    "eviction_guaranteed_share",
    "server_header_timeout_seconds",
    "server_body_timeout_seconds",
    "server_keep_alive_seconds",
    "server_max_connections",
    "server_max_header_bytes",
    "staleness_age_days",
    "staleness_min_candidates",
    "staleness_max_candidates",
    "staleness_prompt_tokens",
    "staleness_max_removals_per_cycle",
    "staleness_max_lifetime_multiplier",
    "staleness_max_extension_days",
    "staleness_review_interval_hours",
    "consolidation_min_facts",
    "consolidation_max_groups_per_cycle",
    "consolidation_max_sources",
    "closed_fact_retention_days",
    "purge_interval_seconds",
)
_OPTIONAL_TEXT_FIELDS = (
    "model_name",
    "storage_class",
    "llm_base_url",
    "llm_api_key",
    "tiktoken_encoding_file",
    "patterns_dir",
    "spool_dir",
)


class MemoryConfig(BaseModel):
    """Every setting of memory_sql, validated; immutable once built.

    Seed keys keep the seed's names and defaults. ``enabled`` defaults to true (DeerFlow's host
    class says false but its ``memory:`` section switches it on: a config that is loaded is
    meant to be used).

    Storage is ``storage``, a database URL (``sqlite:///…``, ``postgresql+psycopg://…``) or a
    folder, also accepted as ``database_url``; the seed's ``storage: {use: "pkg.module:Class"}``
    form sets ``storage_class`` (with an optional ``url`` or ``path`` next to ``use``, which
    sets ``storage``; ``"storage" in config.model_fields_set`` tells whether one was given).
    ``storage_class`` is kept as ``"package.module:Class"``; ``"package.module.Class"`` is
    accepted and rewritten to that form.

    Debounce: a key waits ``debounce_seconds`` after its latest conversation, but never more
    than ``max_debounce_seconds`` after its first pending one. The queue: ``workers`` threads
    claim due work for ``lease_seconds``; a failed run is retried after
    ``retry_backoff_seconds`` (the worker may grow it) up to ``max_attempts`` runs in all;
    every ``sweep_interval_seconds`` the scheduler looks for due and abandoned work (other
    processes' rows wake it at once: :mod:`memory_sql.queue.wakeups`). While
    the queue's database cannot be written, up to ``spool_max_conversations`` conversations,
    and ``spool_max_per_tenant`` of one tenant, wait in a spool file on local disk, synced
    before the conversation is acknowledged, in ``spool_dir`` (default: next to a SQLite
    database, ``<file>.spool/``; else ``$XDG_STATE_HOME/memory_sql/spool/<digest of the
    storage URL>/``), and are written every ``spool_retry_seconds`` until it answers; past
    those bounds, or with ``spool_max_conversations: 0``, a conversation is refused (not
    acknowledged) rather than dropped (:mod:`memory_sql.queue.spool`). One queue row (a
    thread's waiting turn, or its accumulated flushes) holds at most
    ``queue_max_row_messages`` messages and ``queue_max_row_bytes`` bytes: past them its
    oldest messages are cut and counted (what one update may cost is bounded). A tenant's
    memory-LLM calls of one UTC day stop at ``llm_daily_calls_per_tenant`` calls and
    ``llm_daily_tokens_per_tenant`` tokens (0: no limit); its updates then wait, not lost
    (:mod:`memory_sql.update.budget`).

    The schema: a new (or empty) SQLite database is always brought to the newest revision
    when it is first opened; ``auto_migrate`` (default false) also migrates a PostgreSQL
    database, or a SQLite file with an older schema, when the service opens it. It is off by
    default because migrating a shared database is an operator's decision, taken with a
    backup and the older workers stopped (``memory-sql db upgrade``); see
    :mod:`memory_sql.migrations`.

    The memory LLM's reply: ``llm_structured_output`` (``auto``, ``json_schema``,
    ``json_object``, ``off``) chooses how the update's JSON Schema is sent as
    ``response_format`` (see :mod:`memory_sql.update.llm`). The scope gate stores only facts and
    section updates the LLM labels user-scoped, durable and descriptive;
    ``scope_gate_allow_unlabeled`` (default false) stores those without labels too, as
    before the gate (for models that leave them out). Every call sends ``max_tokens``:
    ``llm_max_tokens``, or when it is 0 (the default) :meth:`reply_token_limit`, derived from
    the budgets. A reply that is unusable (no JSON, cut at ``max_tokens``, no part that holds)
    is asked for again up to ``llm_repair_attempts`` times (default 1; 0: never) in the same
    run, with a short message naming the problem and a higher temperature; a queue retry of an
    update that failed so starts warmer too (:mod:`memory_sql.update.updater`), so no retry
    repeats the same request.

    The HTTP service (``memory-sql serve``) refuses, with 413 naming the limit, a request body
    over ``server_max_body_bytes``, a conversation of more than ``server_max_messages``
    messages, and a message of more than ``server_max_message_chars`` characters. It closes a
    connection whose request headers are not in after ``server_header_timeout_seconds`` or
    exceed ``server_max_header_bytes``, answers 408 to a body not in after
    ``server_body_timeout_seconds``, closes an idle kept-alive connection after
    ``server_keep_alive_seconds``, and answers 503 past ``server_max_connections`` open
    connections or requests.

    The update prompt lists a memory's facts within ``update_memory_max_tokens`` (16 000: a
    memory of the default ``max_facts`` is shown whole); of a larger memory it shows the facts
    the conversation's words find and the newest (:mod:`memory_sql.update.prompt_facts`).

    Recall with a query (:mod:`memory_sql.recall.ranking`): ``recall_relevance_weight``,
    ``recall_confidence_weight`` and ``recall_recency_weight`` weigh the score (the recency
    halving every ``recall_recency_half_life_days``), ``recall_duplicate_overlap`` is the term
    overlap from which a fact counts as a near-duplicate of a better one, and
    ``recall_candidates`` how many text matches the index returns. Shown facts' access heat is
    written every ``access_heat_flush_seconds``.

    Eviction above ``max_facts``: ``eviction_policy`` ``confidence`` (lowest confidence goes
    first) or ``hybrid`` (:func:`memory_sql.update.eviction.evict`: the lowest of
    ``eviction_confidence_weight`` · confidence + ``eviction_freshness_weight`` · freshness
    (halving every ``eviction_freshness_half_life_days``) + ``eviction_heat_weight`` · access
    heat goes first, with ``eviction_guaranteed_share`` of ``max_facts`` kept for the
    guaranteed categories).

    Aging (:mod:`memory_sql.update.review`): a fact is expected to hold ``expected_valid_days``
    after its last confirmation (or its start): the LLM's figure, bounded by
    ``staleness_age_days`` × ``staleness_max_lifetime_multiplier``, else its category's in
    ``staleness_category_days``, else ``staleness_age_days``. With
    ``staleness_review_enabled``, facts past it (never those of
    ``staleness_protected_categories``) are offered to the LLM in the regular update, most
    overdue first, at most ``staleness_max_candidates`` of them and ``staleness_prompt_tokens``
    tokens, when at least ``staleness_min_candidates`` are due; the reply may remove at most
    ``staleness_max_removals_per_cycle`` of them (lowest confidence first) or extend them (to at
    most ``staleness_max_extension_days`` from their start). An update with nothing new to learn
    makes no LLM call, unless candidates wait and the memory's last review is
    ``staleness_review_interval_hours`` old (0: never without new turns). With
    ``consolidation_enabled`` the LLM may also merge near-duplicate facts of categories holding
    ``consolidation_min_facts`` live facts: at most ``consolidation_max_groups_per_cycle``
    merges of 2 to ``consolidation_max_sources`` facts each.

    Closed facts (superseded, removed, evicted: kept as past versions) older than
    ``closed_fact_retention_days`` are deleted every ``purge_interval_seconds`` by the
    service's worker, or by ``memory-sql db purge`` (0: kept until the memory is forgotten).
    """

    # protected_namespaces=(): the seed's key ``model_name`` is no pydantic method (pydantic
    # 2.6, the floor, warns about every field starting with ``model_`` otherwise).
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        hide_input_in_errors=True,
        protected_namespaces=(),
    )

    enabled: bool = True
    debounce_seconds: float = Field(30.0, ge=0, le=3600)
    max_debounce_seconds: float = Field(300.0, ge=0, le=86400)
    max_facts: int = Field(200, ge=10, le=10000)
    min_confidence: float = Field(0.7, ge=0, le=1)
    model_name: str | None = None
    token_counting: bool = True
    tiktoken_encoding_file: Path | None = None
    injected_memory_max_tokens: int = Field(2000, ge=100, le=32000)
    update_memory_max_tokens: int = Field(16000, ge=500, le=1_000_000)
    guaranteed_categories: tuple[str, ...] = ("correction",)
    guaranteed_token_budget: int = Field(500, ge=0, le=8000)
    storage: str = "sqlite:///memory_sql.db"
    storage_class: str | None = None
    workers: int = Field(2, ge=1, le=32)
    lease_seconds: float = Field(300.0, gt=0, le=86400)
    max_attempts: int = Field(5, ge=1, le=100)
    retry_backoff_seconds: float = Field(30.0, ge=0, le=86400)
    sweep_interval_seconds: float = Field(60.0, gt=0, le=3600)
    spool_max_conversations: int = Field(100_000, ge=0, le=10_000_000)
    spool_max_per_tenant: int = Field(10_000, ge=1, le=10_000_000)
    spool_retry_seconds: float = Field(2.0, gt=0, le=600)
    spool_dir: Path | None = None
    queue_max_row_messages: int = Field(500, ge=2, le=1_000_000)
    queue_max_row_bytes: int = Field(512 * 1024, ge=1024, le=1024**3)
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout_seconds: float = Field(60.0, gt=0, le=600)
    llm_max_retries: int = Field(2, ge=0, le=10)
    llm_temperature: float = Field(0.0, ge=0, le=2)
    llm_json_mode: bool = True
    llm_max_tokens: int = Field(0, ge=0, le=1_000_000)
    llm_repair_attempts: int = Field(1, ge=0, le=5)
    llm_daily_calls_per_tenant: int = Field(0, ge=0, le=1_000_000_000)
    llm_daily_tokens_per_tenant: int = Field(0, ge=0, le=10**15)
    patterns_dir: Path | None = None
    auto_migrate: bool = False
    llm_structured_output: Literal["auto", "json_schema", "json_object", "off"] = "auto"
    scope_gate_allow_unlabeled: bool = False
    server_max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=1024**3)
    server_max_messages: int = Field(1000, ge=2, le=1_000_000)
    server_max_message_chars: int = Field(100_000, ge=100, le=100_000_000)
    recall_relevance_weight: float = Field(1.0, ge=0, le=100)
    recall_confidence_weight: float = Field(0.2, ge=0, le=100)
    recall_recency_weight: float = Field(0.1, ge=0, le=100)
    recall_recency_half_life_days: float = Field(180.0, gt=0, le=36500)
    recall_duplicate_overlap: float = Field(0.7, gt=0, le=1)
    recall_candidates: int = Field(100, ge=1, le=2000)
    recall_expansion_weight: float = Field(0.0, ge=0, le=10)
    access_heat_flush_seconds: float = Field(30.0, gt=0, le=86400)
    eviction_policy: Literal["confidence", "hybrid"] = "confidence"
    staleness_review_enabled: bool = True
    staleness_age_days: int = Field(90, ge=1, le=36500)
    staleness_category_days: dict[str, int] = Field(
        default_factory=lambda: {
            "context": 90,
            "goal": 90,
            "behavior": 180,
            "preference": 365,
            "knowledge": 365,
        }
    )
    staleness_min_candidates: int = Field(3, ge=1, le=1000)
    staleness_max_candidates: int = Field(20, ge=1, le=1000)
    staleness_prompt_tokens: int = Field(600, ge=50, le=32000)
    staleness_max_removals_per_cycle: int = Field(10, ge=0, le=1000)
    staleness_protected_categories: tuple[str, ...] = ("correction",)
    staleness_max_lifetime_multiplier: int = Field(20, ge=1, le=400)
    staleness_max_extension_days: int = Field(3650, ge=1, le=36500)
    staleness_review_interval_hours: float = Field(0.0, ge=0, le=87600)
    consolidation_enabled: bool = False
    consolidation_min_facts: int = Field(8, ge=2, le=10000)
    consolidation_max_groups_per_cycle: int = Field(3, ge=1, le=100)
    consolidation_max_sources: int = Field(8, ge=2, le=100)
    closed_fact_retention_days: int = Field(0, ge=0, le=36500)
    purge_interval_seconds: float = Field(3600.0, gt=0, le=86400 * 7)
    eviction_confidence_weight: float = Field(0.65, ge=0, le=100)
    eviction_freshness_weight: float = Field(0.25, ge=0, le=100)
    eviction_heat_weight: float = Field(0.10, ge=0, le=100)
    eviction_freshness_half_life_days: float = Field(90.0, gt=0, le=36500)
    eviction_guaranteed_share: float = Field(0.1, ge=0, le=1)
    server_header_timeout_seconds: float = Field(10.0, gt=0, le=600)
    server_body_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    server_keep_alive_seconds: float = Field(5.0, gt=0, le=600)
    server_max_connections: int = Field(1000, ge=1, le=1_000_000)
    server_max_header_bytes: int = Field(65536, ge=1024, le=16 * 1024 * 1024)

    # Semantic recall (issue #31): embeddings, the hybrid ranking, the semantic dedupe ----------
    embedding_base_url: str | None = Field(
        None,
        description="an OpenAI-compatible endpoint serving /embeddings (e.g. "
        "http://127.0.0.1:8088/v1); with embedding_model set, facts get vectors and recall "
        "ranks by meaning too (docs/semantic-recall.md). Unset: lexical ranking only.",
    )
    embedding_model: str | None = Field(
        None, description="the embedding model's name at that endpoint; vectors are kept per model"
    )
    embedding_api_key: SecretStr | None = Field(
        None, description="the endpoint's API key (none sent when unset)"
    )
    embedding_dimensions: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="ask the model for vectors of this length (models that can shorten them); "
        "unset: the model's own",
    )
    embedding_timeout_seconds: float = Field(
        30.0, gt=0, le=600, description="the deadline of one batch embedded by the worker"
    )
    embedding_batch_size: int = Field(
        64, ge=1, le=2048, description="facts embedded per request by the worker"
    )
    embedding_query_timeout_seconds: float = Field(
        0.3,
        gt=0,
        le=30,
        description="the deadline of a query's embedding in a context or search; past it, "
        "the ranking is lexical (counted)",
    )
    embedding_retry_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="the first wait after a failed embedding pass; doubled at each failure "
        "in a row, up to 64 times it",
    )
    embedding_interval_seconds: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="how often the worker looks for facts lacking a vector in every memory "
        "(those of an update are embedded right after its save)",
    )
    recall_semantic_weight: float = Field(
        1.0,
        ge=0,
        le=100,
        description="the weight of the vector ranking beside the text ranking in the "
        "reciprocal-rank fusion (0: lexical only)",
    )
    dedupe_cosine: float = Field(
        0.88,
        gt=0,
        le=1,
        description="a new fact whose vector has at least this cosine with a live fact of "
        "the same memory confirms that fact instead of being added (1: off)",
    )

    @field_validator("embedding_base_url", "embedding_model", "embedding_api_key", mode="before")
    @classmethod
    def _blank_embedding_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator(
        "embedding_dimensions",
        "embedding_timeout_seconds",
        "embedding_batch_size",
        "embedding_query_timeout_seconds",
        "embedding_retry_seconds",
        "embedding_interval_seconds",
        "recall_semantic_weight",
        "dedupe_cosine",
        mode="before",
    )
    @classmethod
    def _embedding_numbers(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a boolean is not a number")
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @property
    def embeddings_enabled(self) -> bool:
        """True when an embedding endpoint and model are configured."""
        return self.embedding_base_url is not None and self.embedding_model is not None

    # (end of the semantic recall block) -----------------------------------------------------

    def reply_token_limit(self) -> int:
        """The ``max_tokens`` of a memory-LLM call: ``llm_max_tokens``, or by default what a
        full reply can need: as much as the memory can show in a prompt
        (``injected_memory_max_tokens`` + ``guaranteed_token_budget``: more would not be
        shown), plus :data:`REPLY_OVERHEAD_TOKENS` for the JSON, the labels and a short
        reasoning block (4 036 with the defaults)."""
        if self.llm_max_tokens:
            return self.llm_max_tokens
        return (
            self.injected_memory_max_tokens + self.guaranteed_token_budget + REPLY_OVERHEAD_TOKENS
        )

    def __init__(self, **data: Any) -> None:
        """Build from keyword arguments (no environment); :class:`ConfigError` if invalid.

        (``model_validate`` reports the same message inside a pydantic ``ValidationError``.)
        """
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc, _ORIGINS.get() or {}) from None

    # Loading -----------------------------------------------------------------------------

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
    ) -> MemoryConfig:
        """The ``memory:`` section of the YAML file at ``path`` (defaults when it has none),
        overridden by the environment (``env``, default ``os.environ``; see the module docstring).

        Raises:
            ConfigError: the file is missing or unreadable, is not valid YAML (the line is
                named), its ``memory:`` section is not a mapping, or a value is invalid.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found", path=str(path)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}", path=str(path)) from None
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else None
            where = f"{path}:{line}" if line else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(
                f"{where}: invalid YAML: {problem}", path=str(path), line=line
            ) from None
        if document is None:
            document = {}
        if not isinstance(document, Mapping):
            raise ConfigError(f"{path}: expected a mapping with a 'memory:' key", path=str(path))
        section = document.get("memory")
        if section is None:
            section = {}
        if not isinstance(section, Mapping):
            raise ConfigError(
                f"{path}: 'memory:' must be a mapping of settings, got {type(section).__name__}",
                key="memory",
                path=str(path),
            )
        return cls._build(section, str(path), env)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MemoryConfig:
        """Defaults overridden by the environment (``env``, default ``os.environ``).

        Raises:
            ConfigError: a variable holds an invalid value.
        """
        return cls._build({}, "", env)

    @classmethod
    def _build(
        cls, section: Mapping[Any, Any], source: str, env: Mapping[str, str] | None
    ) -> MemoryConfig:
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for key, value in section.items():
            if not isinstance(key, str):
                raise ConfigError(f"{source}: memory: key {key!r} is not a string", path=source)
            data[key] = value
            origins[ALIASES.get(key, key)] = source
        for field, var in OPENAI_FALLBACKS.items():
            if env.get(var) and field not in data and not _alias_given(field, data):
                data[field] = env[var]
                origins[field] = var
        overrides: dict[str, Any] = {}
        for var, value in env.items():
            if not var.startswith(ENV_PREFIX) or _ENV_IGNORED.fullmatch(var):
                continue
            name = var[len(ENV_PREFIX) :].lower()
            field = ALIASES.get(name, name)
            if field not in cls.model_fields:
                raise _unknown_variable(var, name)
            if field in overrides:
                raise ConfigError(f"{var} and another alias of {field!r} are both set", key=field)
            overrides[field] = _parse_env(field, value, var)
            origins[field] = var
        for field, value in overrides.items():
            for name in [field, *(a for a, f in ALIASES.items() if f == field)]:
                data.pop(name, None)
            data[field] = value
        token = _ORIGINS.set(origins)
        try:
            return cls(**data)
        finally:
            _ORIGINS.reset(token)

    # Presentation ------------------------------------------------------------------------

    def redacted(self) -> dict[str, Any]:
        """All settings as JSON-ready values, safe to log: no API key, and the storage and LLM
        URLs through :func:`~memory_sql.database.redacted` (no password, no key-like query
        parameter)."""
        data = self.model_dump(mode="json")
        data["llm_api_key"] = _SECRET if self.llm_api_key is not None else None
        data["embedding_api_key"] = _SECRET if self.embedding_api_key is not None else None
        for name in _URL_FIELDS:
            if data[name] is not None:
                data[name] = redacted(data[name])
        return data

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redacted(value) if name in _URL_FIELDS and value is not None else value

    # Validation --------------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _canonical_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for alias, field in ALIASES.items():
            if alias in data:
                if field in data:
                    raise ValueError(f"give either {field!r} or {alias!r}, not both")
                data[field] = data.pop(alias)
        storage = data.get("storage")
        if isinstance(storage, Mapping):
            unknown = sorted(str(k) for k in storage if k not in _STORAGE_FORM_KEYS)
            if unknown or "use" not in storage:
                raise ValueError(
                    "storage: a mapping must be {use: 'pkg.module:Class'} with an optional "
                    f"url or path; got keys {sorted(map(str, storage))}"
                )
            if data.get("storage_class") is not None:
                raise ValueError("give either storage.use or storage_class, not both")
            data["storage_class"] = storage["use"]
            location = storage.get("url") or storage.get("path")
            if location is None:
                data.pop("storage")
            else:
                data["storage"] = location
        return data

    @field_validator(*_NUMBER_FIELDS, mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a boolean is not a number")
        return value

    @field_validator(*_OPTIONAL_TEXT_FIELDS, mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("llm_structured_output", mode="before")
    @classmethod
    def _structured_output(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("token_counting", mode="before")
    @classmethod
    def _token_counting_mode(cls, value: Any) -> Any:
        # DeerFlow's newer spelling: "tiktoken" or "char".
        return {"tiktoken": True, "char": False}.get(value, value)

    @field_validator("staleness_category_days", mode="before")
    @classmethod
    def _category_days(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        days: dict[str, int] = {}
        for name, count in value.items():
            key = str(name).strip().lower()
            if not CATEGORY_PATTERN.fullmatch(key):
                raise ValueError(f"{name!r} is not a category name (^[a-z0-9_-]{{1,32}}$)")
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 36500:
                raise ValueError(f"{name}: {count!r} is not a number of days from 1 to 36500")
            days[key] = count
        return days

    @field_validator("guaranteed_categories", "staleness_protected_categories", mode="before")
    @classmethod
    def _categories(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)):
            return value
        categories: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise ValueError(f"{item!r} is not a category name")
            name = item.strip().lower()
            if not CATEGORY_PATTERN.fullmatch(name):
                raise ValueError(f"{item!r} is not a category name (^[a-z0-9_-]{{1,32}}$)")
            if name not in categories:
                categories.append(name)
        return categories

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("storage is empty; give a database URL or a folder")
        return value.strip()

    @field_validator("storage_class")
    @classmethod
    def _storage_class(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _CLASS_PATH.fullmatch(value):
            raise ValueError(f"{value!r} is not a class path like 'package.module:Class'")
        if ":" not in value:  # package.module.Class
            module, _, name = value.rpartition(".")
            value = f"{module}:{name}"
        return value

    @field_validator("llm_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"https?://[^\s/]+", value):
            raise ValueError(f"{redacted(value)!r} is not an http:// or https:// URL")
        return value

    @field_validator("tiktoken_encoding_file")
    @classmethod
    def _encoding_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"{value} is not a file")
        return None if value is None else value.expanduser()

    @field_validator("patterns_dir")
    @classmethod
    def _patterns(cls, value: Path | None) -> Path | None:
        if value is not None:
            load_patterns(value)  # refuse a broken pattern file now, not mid-conversation
        return value

    @model_validator(mode="after")
    def _debounce_order(self) -> MemoryConfig:
        if self.max_debounce_seconds < self.debounce_seconds:
            raise ValueError(
                f"max_debounce_seconds ({self.max_debounce_seconds:g}) must be at least "
                f"debounce_seconds ({self.debounce_seconds:g})"
            )
        return self


def _unknown_variable(var: str, name: str) -> ConfigError:
    keys = [*MemoryConfig.model_fields, *ALIASES]
    close = difflib.get_close_matches(name, keys, n=1)
    if close:
        hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}?)"
    else:
        hint = "; known: " + ", ".join(
            ENV_PREFIX + key.upper() for key in MemoryConfig.model_fields
        )
    return ConfigError(
        f"unknown environment variable {var}{hint}; {ENV_PREFIX}<KEY> variables set config keys "
        f"({ENV_PREFIX}CONFIG and {ENV_PREFIX}TEST_* excepted)",
        key=name,
    )


def _alias_given(field: str, data: Mapping[str, Any]) -> bool:
    return any(alias in data for alias, target in ALIASES.items() if target == field)


def _parse_env(field: str, value: str, var: str) -> Any:
    if field == "staleness_category_days":
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{var}: invalid JSON object: {exc.msg}", key=field) from None
    if field in ("guaranteed_categories", "staleness_protected_categories") and (
        value.strip().startswith("[")
    ):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{var}: invalid JSON list: {exc.msg}", key=field) from None
    return value


def _config_error(exc: ValidationError, origins: Mapping[str, str]) -> ConfigError:
    problems = []
    first_key = None
    list_known = False
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        key = loc[0] if loc else None
        first_key = first_key or key
        message = error["msg"].removeprefix("Value error, ")
        if key is None:
            problems.append(message)
            continue
        origin = origins.get(key)
        label = f"{'.'.join(loc)}" + (f" (from {origin})" if origin else "")
        if error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(key, [*MemoryConfig.model_fields, *ALIASES], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            list_known = list_known or not close
            problems.append(f"unknown key {label}{hint}")
        elif error["type"] == "value_error":
            problems.append(f"{label}: {message}; allowed: {_allowed(key)}")
        else:
            shown = _show(key, error.get("input"))
            problems.append(f"{label}: got {shown}, allowed: {_allowed(key)}")
    if list_known:
        problems.append("known keys: " + ", ".join(MemoryConfig.model_fields))
    return ConfigError("invalid memory config: " + "; ".join(problems), key=first_key)


def _show(key: str, value: Any) -> str:
    if key == "llm_api_key":
        return _SECRET
    if isinstance(value, str):
        value = redacted(value)
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _allowed(key: str) -> str:
    field = MemoryConfig.model_fields.get(key)
    if field is None:
        return "see MemoryConfig"
    special = {
        "guaranteed_categories": "a list of category names (^[a-z0-9_-]{1,32}$)",
        "staleness_protected_categories": "a list of category names (^[a-z0-9_-]{1,32}$)",
        "staleness_category_days": "a mapping of category name to days (1 to 36500)",
        "storage": "a database URL or a folder",
        "storage_class": "a class path like 'package.module:Class'",
        "llm_base_url": "an http(s) URL",
        "llm_api_key": "a string",
        "token_counting": "true, false, 'tiktoken' or 'char'",
        "tiktoken_encoding_file": "the path of an existing file",
        "patterns_dir": "a folder of pattern files",
        "max_debounce_seconds": "at least debounce_seconds",
        "llm_structured_output": "auto, json_schema, json_object or off",
        "eviction_policy": "confidence or hybrid",
    }
    bounds: dict[str, float] = {}
    for rule in field.metadata:
        for name in ("ge", "gt", "le"):
            if isinstance(getattr(rule, name, None), (int, float)):
                bounds[name] = getattr(rule, name)
    if field.annotation is bool:
        return special.get(key, "true or false")
    if field.annotation in (int, float):
        kind = "a whole number" if field.annotation is int else "a number"
        if "ge" in bounds:
            text = f"{kind} from {bounds['ge']:g} to {bounds['le']:g}"
        else:
            text = f"{kind} greater than {bounds['gt']:g} and at most {bounds['le']:g}"
        return f"{text}, {special[key]}" if key in special else text
    return special.get(key, "a string")
