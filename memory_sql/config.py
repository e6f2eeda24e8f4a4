"""memory_sql's settings: :class:`MemoryConfig`, in sections (``config.queue.debounce_seconds``).

Each setting is documented once, by its ``Field(description=...)`` below; ``docs/settings.md``
is the table of them (:func:`settings_table`, checked by a test against this module).

Where values come from, the first that has one winning:

1. ``MEMORY_SQL_<KEY>`` environment variables, by the setting's flat key
   (``MEMORY_SQL_DEBOUNCE_SECONDS=10``; lists as ``a,b`` or JSON ``["a", "b"]``; an empty value
   means "none" for optional keys and an empty list for lists);
2. the ``memory:`` section of a YAML file (:meth:`MemoryConfig.from_yaml`), by flat key
   (``debounce_seconds: 10``) or nested in its section (``queue: {debounce_seconds: 10}``);
3. for the LLM only, the usual OpenAI variables: ``OPENAI_API_KEY`` → ``llm_api_key``,
   ``OPENAI_BASE_URL`` → ``llm_base_url``, ``OPENAI_MODEL`` → ``model_name``;
4. the defaults below.

The flat keys (the names of the settings before they had sections, still those of the
environment variables, and accepted in YAML and by ``MemoryConfig(...)``) map to their section's
fields in one table, :data:`FLAT_KEYS`. Environment variables are read only by
:meth:`~MemoryConfig.from_yaml` and :meth:`~MemoryConfig.from_env`; ``MemoryConfig(...)`` takes
exactly what it is given (flat keys, sections as mappings or models). An unknown key is an error
wherever it comes from: in YAML, in ``MemoryConfig(...)``, and as a ``MEMORY_SQL_<KEY>`` variable
(a misspelt variable would otherwise silently do nothing), with a did-you-mean hint. Aliases
count as keys (``MEMORY_SQL_DATABASE_URL`` sets ``storage``). Only ``MEMORY_SQL_CONFIG`` (the
path of the config file: the CLI's ``--config``), ``MEMORY_SQL_TEST_*`` (test settings), and the
settings of the HTTP client and of ``memory-sql mcp`` (``MEMORY_SQL_SERVICE_URL``,
``MEMORY_SQL_API_KEY``, ``MEMORY_SQL_MCP_*``) are not config keys, and are left alone. Every
invalid value raises :class:`~memory_sql.errors.ConfigError` naming the key, where it came from
and what is allowed. The API key is a ``SecretStr``, and the storage and LLM URLs are shown
through :func:`memory_sql.database.redacted` (passwords and key-like query parameters masked) in
``repr`` and in error messages; log :meth:`~MemoryConfig.redacted`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

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
"""Other names accepted for a flat key (DeerFlow's newer names, and ``database_url``)."""
OPENAI_FALLBACKS = {
    "llm_api_key": "OPENAI_API_KEY",
    "llm_base_url": "OPENAI_BASE_URL",
    "model_name": "OPENAI_MODEL",
}
_STORAGE_FORM_KEYS = ("use", "url", "path")
_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*")
_SECRET = "**********"

REPLY_OVERHEAD_TOKENS = 1536
"""What a memory-LLM reply needs beyond its facts and summaries (JSON keys, labels, reasoning):
the earlier default's margin, kept for the benchmarks that compare against it."""
DEFAULT_REPLY_TOKENS = 2048
"""The default ``max_tokens`` of a memory-LLM call (issue 34): 3.5 times the longest reply
measured (580 tokens, ``benchmarks/bench_reply_sizes.py``; small local models' real replies ran
167 to 420), room for every list at the schema's bounds with short items. Small models given
more write until it runs out (the earlier default, 4 036, let them repeat an item for minutes
on a CPU). A reasoning model that thinks before answering needs ``llm_max_tokens`` set."""


class _Origin(NamedTuple):
    source: str  # a file's path or a variable's name
    written: str  # the key as it was written there (flat, or section.field)


# Where each flat key's value came from, for error messages of the build in progress.
_ORIGINS: ContextVar[Mapping[str, _Origin] | None] = ContextVar("memory_sql_origins", default=None)


def _categories(value: Any) -> Any:
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


class _Settings(BaseModel):
    """What every section (and :class:`MemoryConfig`) shares: immutable, no unknown keys, no
    booleans for numbers, a blank string is None for an optional setting."""

    # protected_namespaces=(): no pydantic method is named like a setting (pydantic 2.6, the
    # floor, warns about every field starting with ``model_`` otherwise).
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        hide_input_in_errors=True,
        protected_namespaces=(),
    )

    @field_validator("*", mode="before")
    @classmethod
    def _plain_values(cls, value: Any, info: ValidationInfo) -> Any:
        annotation = cls.model_fields[info.field_name or ""].annotation
        if annotation in (int, float) and isinstance(value, bool):
            raise ValueError("a boolean is not a number")
        if _is_optional(annotation) and isinstance(value, str):
            return value.strip() or None
        return value


def _is_optional(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, UnionType) and NoneType in get_args(annotation)


class LLMSettings(_Settings):
    """The memory LLM: where it is, how it is called, what one tenant may spend on it."""

    model: str | None = Field(
        None, description="The memory LLM's model name; without one updates wait in the queue."
    )
    base_url: str | None = Field(
        None, description="The chat-completions endpoint (an http(s) URL); none: OpenAI's."
    )
    api_key: SecretStr | None = Field(None, description="The LLM's API key (never shown).")
    timeout_seconds: float = Field(60.0, gt=0, le=600, description="One call's timeout.")
    max_retries: int = Field(
        2, ge=0, le=10, description="Retries of a call that fails on the network or with 5xx/429."
    )
    temperature: float = Field(0.0, ge=0, le=2, description="The calls' sampling temperature.")
    json_mode: bool = Field(
        True, description="false: structured_output is off (no response_format is sent)."
    )
    structured_output: Literal["auto", "json_schema", "json_object", "off"] = Field(
        "auto",
        description="How the update's JSON Schema is sent as response_format: auto (json_schema, "
        "falling back when the server refuses it), json_schema, json_object or off.",
    )
    max_tokens: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="A call's max_tokens; 0: 2 048, sized to real replies (the longest "
        "recorded reply is 580 tokens).",
    )
    repair_attempts: int = Field(
        1,
        ge=0,
        le=5,
        description="How often an unusable reply (no JSON, cut at max_tokens, no part that "
        "holds) is asked for again in the same run, warmer, naming the problem (0: never).",
    )
    daily_calls_per_tenant: int = Field(
        0,
        ge=0,
        le=1_000_000_000,
        description="A tenant's memory-LLM calls per UTC day; past it its updates wait "
        "(0: no limit).",
    )
    daily_tokens_per_tenant: int = Field(
        0,
        ge=0,
        le=10**15,
        description="A tenant's memory-LLM tokens per UTC day; past it its updates wait "
        "(0: no limit).",
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, redacted(value) if name == "base_url" and value is not None else value

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"https?://[^\s/]+", value):
            raise ValueError(f"{redacted(value)!r} is not an http:// or https:// URL")
        return value

    @field_validator("structured_output", mode="before")
    @classmethod
    def _structured_output(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class TokenSettings(_Settings):
    """How tokens are counted (budgets of the prompt and the injected memory)."""

    counting: bool = Field(
        True,
        description="Count with tiktoken (true, 'tiktoken') or estimate by characters "
        "(false, 'char').",
    )
    encoding_file: Path | None = Field(
        None, description="A local tiktoken encoding file (cl100k_base), for machines offline."
    )

    @field_validator("counting", mode="before")
    @classmethod
    def _counting_mode(cls, value: Any) -> Any:
        # DeerFlow's newer spelling: "tiktoken" or "char".
        return {"tiktoken": True, "char": False}.get(value, value)

    @field_validator("encoding_file")
    @classmethod
    def _encoding_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.expanduser().is_file():
            raise ValueError(f"{value} is not a file")
        return None if value is None else value.expanduser()


class QueueSettings(_Settings):
    """The debounced update queue and its worker (:mod:`memory_sql.queue`)."""

    debounce_seconds: float = Field(
        30.0, ge=0, le=3600, description="How long a thread waits after its latest conversation."
    )
    max_debounce_seconds: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="How long a thread waits at most after its first pending conversation.",
    )
    workers: int = Field(2, ge=1, le=32, description="Threads running updates.")
    lease_seconds: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="How long a claimed update is a worker's before another may take it.",
    )
    max_attempts: int = Field(
        5, ge=1, le=100, description="Runs of an update before it stays failed."
    )
    retry_backoff_seconds: float = Field(
        30.0, ge=0, le=86400, description="Wait before a failed update runs again (it may grow)."
    )
    sweep_interval_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How often the scheduler looks for due and abandoned work (other "
        "processes' rows wake it at once).",
    )
    max_row_messages: int = Field(
        500,
        ge=2,
        le=1_000_000,
        description="Messages one queue row holds at most; past it the oldest are cut (counted).",
    )
    max_row_bytes: int = Field(
        512 * 1024,
        ge=1024,
        le=1024**3,
        description="Bytes one queue row holds at most; past it the oldest messages are cut.",
    )

    @model_validator(mode="after")
    def _debounce_order(self) -> QueueSettings:
        if self.max_debounce_seconds < self.debounce_seconds:
            raise ValueError(
                f"max_debounce_seconds ({self.max_debounce_seconds:g}) must be at least "
                f"debounce_seconds ({self.debounce_seconds:g})"
            )
        return self


class DatabaseSettings(_Settings):
    """How memory_sql talks to its PostgreSQL database (SQLite ignores this section)."""

    prepare_threshold: int | None = Field(
        5,
        ge=0,
        le=1_000_000,
        description="Executions of one statement on a connection before psycopg prepares it on "
        "the server (parsed and planned once; 0: at once); empty: never (a pooler that does not "
        "keep prepared statements).",
    )


class SpoolSettings(_Settings):
    """Conversations kept on local disk while the queue's database cannot take them
    (:mod:`memory_sql.queue.spool`); past its bounds a conversation is refused, not dropped."""

    max_conversations: int = Field(
        100_000,
        ge=0,
        le=10_000_000,
        description="Conversations the spool holds at most (0: no spool; refuse instead).",
    )
    max_per_tenant: int = Field(
        10_000, ge=1, le=10_000_000, description="Conversations of one tenant it holds at most."
    )
    retry_seconds: float = Field(
        2.0, gt=0, le=600, description="How often it tries to write what it holds."
    )
    directory: Path | None = Field(
        None,
        description="Its folder; default: next to a SQLite database (<file>.spool/), else "
        "$XDG_STATE_HOME/memory_sql/spool/<digest of the storage URL>/.",
    )


class ReplicaSettings(_Settings):
    """Read replicas (docs/replication.md): the HTTP service's context, search, facts listing,
    export, history and console read from a streaming standby whose replay lag is within
    bounds; writes, the queue and reads that need the newest version go to ``storage``."""

    url: str | None = Field(
        None,
        description="A replica's database URL (postgresql+psycopg://…; a libpq multi-host URL "
        "with target_session_attrs=prefer-standby or read-only); none: every read goes to "
        "storage.",
    )
    max_lag_seconds: float = Field(
        5.0,
        ge=0,
        le=86_400,
        description="A replica whose replay lag is beyond this many seconds is not read; its "
        "reads go to storage until it catches up.",
    )
    lag_check_seconds: float = Field(
        1.0,
        gt=0,
        le=3_600,
        description="How long a replica's measured lag is trusted before it is measured again.",
    )

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, redacted(value) if name == "url" and value is not None else value


class UpdateSettings(_Settings):
    """What an update asks the LLM and keeps of its reply (:mod:`memory_sql.update`)."""

    min_confidence: float = Field(
        0.7, ge=0, le=1, description="Facts the LLM is less sure of are not stored."
    )
    memory_max_tokens: int = Field(
        16000,
        ge=500,
        le=1_000_000,
        description="The facts listed in the update prompt; of a larger memory, those the "
        "conversation's words find and the newest.",
    )
    scope_gate_allow_unlabeled: bool = Field(
        False,
        description="Also store facts the LLM left without user-scoped/durable/descriptive "
        "labels (for models that leave them out).",
    )
    dedupe_cosine: float = Field(
        0.88,
        gt=0,
        le=1,
        description="With embeddings, a new fact whose vector has at least this cosine with a "
        "live fact of the same memory confirms that fact instead of being added (1: off).",
    )


class RecallSettings(_Settings):
    """The memory block in the prompt, and the ranking of facts by a query
    (:mod:`memory_sql.recall`)."""

    injected_memory_max_tokens: int = Field(
        2000, ge=100, le=32000, description="The memory block's budget in the prompt."
    )
    semantic_weight: float = Field(
        1.0,
        ge=0,
        le=100,
        description="With embeddings, the weight of the vector ranking beside the text "
        "ranking in the reciprocal-rank fusion (0: lexical only).",
    )
    semantic_expansion_weight: float = Field(
        1.0,
        ge=0,
        le=100,
        description="With embeddings, the weight in the fusion of a second text lookup made "
        "after it, by the terms of the best fused facts that the query lacks (0: none).",
    )
    semantic_expansion_facts: int = Field(
        1,
        ge=1,
        le=50,
        description="With embeddings, how many of the best fused facts give their terms to "
        "that second lookup.",
    )
    guaranteed_categories: tuple[str, ...] = Field(
        ("correction",),
        description="Categories shown first, within guaranteed_token_budget.",
    )
    guaranteed_token_budget: int = Field(
        500, ge=0, le=8000, description="Tokens kept for the guaranteed categories."
    )
    relevance_weight: float = Field(
        1.0, ge=0, le=100, description="The weight of the text match in the ranking score."
    )
    confidence_weight: float = Field(
        0.2, ge=0, le=100, description="The weight of a fact's confidence."
    )
    recency_weight: float = Field(0.1, ge=0, le=100, description="The weight of its recency.")
    recency_half_life_days: float = Field(
        180.0, gt=0, le=36500, description="Days over which recency halves."
    )
    duplicate_overlap: float = Field(
        0.7,
        gt=0,
        le=1,
        description="The term overlap from which a fact counts as a near-duplicate of a "
        "better one.",
    )
    candidates: int = Field(
        100, ge=1, le=2000, description="How many text matches the index returns to be scored."
    )
    expansion_weight: float = Field(
        0.0,
        ge=0,
        le=10,
        description="The weight of a second lookup by the best matches' own terms (0: none).",
    )
    expansion_facts: int = Field(
        1,
        ge=1,
        le=50,
        description="How many of the best matches give their terms to the second lookup.",
    )
    heat_flush_seconds: float = Field(
        30.0, gt=0, le=86400, description="How often shown facts' access heat is written."
    )

    @field_validator("guaranteed_categories", mode="before")
    @classmethod
    def _categories(cls, value: Any) -> Any:
        return _categories(value)


class EvictionSettings(_Settings):
    """What goes when a memory is over ``max_facts`` (:mod:`memory_sql.update.eviction`)."""

    max_facts: int = Field(200, ge=10, le=10000, description="Live facts a memory keeps.")
    policy: Literal["confidence", "hybrid"] = Field(
        "confidence",
        description="confidence (lowest goes first) or hybrid (lowest of the weighted "
        "confidence, freshness and access heat).",
    )
    confidence_weight: float = Field(0.65, ge=0, le=100, description="hybrid: confidence.")
    freshness_weight: float = Field(0.25, ge=0, le=100, description="hybrid: freshness.")
    heat_weight: float = Field(0.10, ge=0, le=100, description="hybrid: access heat.")
    freshness_half_life_days: float = Field(
        90.0, gt=0, le=36500, description="hybrid: days over which freshness halves."
    )
    guaranteed_share: float = Field(
        0.1,
        ge=0,
        le=1,
        description="hybrid: the share of max_facts kept for the guaranteed categories.",
    )


class StalenessSettings(_Settings):
    """Aging of facts (:mod:`memory_sql.update.review`): facts past their expected validity are
    offered to the LLM to remove or extend."""

    review_enabled: bool = Field(True, description="Offer stale facts in the regular update.")
    age_days: int = Field(
        90,
        ge=1,
        le=36500,
        description="How long a fact holds after its last confirmation, when neither the LLM "
        "nor its category says.",
    )
    category_days: dict[str, int] = Field(
        default_factory=lambda: {
            "context": 90,
            "goal": 90,
            "behavior": 180,
            "preference": 365,
            "knowledge": 365,
        },
        description="How long a fact of each category holds (category name: days).",
    )
    min_candidates: int = Field(
        3, ge=1, le=1000, description="Stale facts due before any is offered."
    )
    max_candidates: int = Field(20, ge=1, le=1000, description="Stale facts offered at most.")
    prompt_tokens: int = Field(
        600, ge=50, le=32000, description="Tokens the offered facts take at most."
    )
    max_removals_per_cycle: int = Field(
        10, ge=0, le=1000, description="Offered facts one reply may remove (lowest confidence)."
    )
    protected_categories: tuple[str, ...] = Field(
        ("correction",), description="Categories never offered."
    )
    max_lifetime_multiplier: int = Field(
        20,
        ge=1,
        le=400,
        description="The LLM's expected validity is bounded by age_days times this.",
    )
    max_extension_days: int = Field(
        3650, ge=1, le=36500, description="An extension reaches at most this far from the start."
    )
    review_interval_hours: float = Field(
        0.0,
        ge=0,
        le=87600,
        description="A memory with stale facts due is reviewed without new turns when its "
        "last review is this old (0: never without new turns).",
    )

    @field_validator("category_days", mode="before")
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

    @field_validator("protected_categories", mode="before")
    @classmethod
    def _categories(cls, value: Any) -> Any:
        return _categories(value)


class ConsolidationSettings(_Settings):
    """Merging near-duplicate facts in the regular update."""

    enabled: bool = Field(False, description="Let the LLM merge near-duplicate facts.")
    min_facts: int = Field(
        8, ge=2, le=10000, description="Live facts a category holds before it is offered."
    )
    max_groups_per_cycle: int = Field(3, ge=1, le=100, description="Merges per update at most.")
    max_sources: int = Field(8, ge=2, le=100, description="Facts one merge takes at most.")


class RetentionSettings(_Settings):
    """Closed facts (superseded, removed, evicted: kept as past versions)."""

    closed_fact_days: int = Field(
        0,
        ge=0,
        le=36500,
        description="Closed facts older than this are deleted by the worker or memory-sql db "
        "purge (0: kept until the memory is forgotten).",
    )
    purge_interval_seconds: float = Field(
        3600.0, gt=0, le=86400 * 7, description="How often the worker purges them."
    )


class ServerSettings(_Settings):
    """The HTTP service's limits (``memory-sql serve``)."""

    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, le=1024**3, description="A request body over it gets 413."
    )
    max_messages: int = Field(
        1000, ge=2, le=1_000_000, description="A conversation of more messages gets 413."
    )
    max_message_chars: int = Field(
        100_000, ge=100, le=100_000_000, description="A longer message gets 413."
    )
    header_timeout_seconds: float = Field(
        10.0, gt=0, le=600, description="A connection whose headers are not in by then closes."
    )
    body_timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="A body not in by then gets 408."
    )
    keep_alive_seconds: float = Field(
        5.0, gt=0, le=600, description="An idle kept-alive connection closes after it."
    )
    max_connections: int = Field(
        1000, ge=1, le=1_000_000, description="Past this many connections or requests: 503."
    )
    max_header_bytes: int = Field(
        65536,
        ge=1024,
        le=16 * 1024 * 1024,
        description="A connection whose headers exceed it closes.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="How `memory-sql serve` writes its log: `text` (one line a record, the "
        "request's id in brackets) or `json` (one JSON object a line, for a log collector).",
    )
    log_third_party: bool = Field(
        False,
        description="Let the libraries' INFO records through (APScheduler's job lines, the "
        "MCP SDK's session lines); off: only their warnings and errors are logged.",
    )


class SafetySettings(_Settings):
    """What memory never keeps or replays (``docs/security.md``): secrets are replaced by typed
    placeholders at intake, on every write and on every output; instructions are refused."""

    redaction: Literal["on", "off"] = Field(
        "on",
        description="Replace secrets (API keys, tokens, private keys, passwords, card numbers) "
        "with typed placeholders at intake, on every write and on every output; 'off' only "
        "when set explicitly.",
    )
    patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Extra secret patterns: kind label -> regex (its 'value' group, else the "
        "whole match, is redacted as [redacted: <kind>]).",
    )
    allow: list[str] = Field(
        default_factory=list,
        description="Exact values never redacted (besides AWS's documented example keys).",
    )
    refuse_instructions: bool = Field(
        True,
        description="Refuse facts and summaries worded as instructions to the assistant "
        "(reason 'instruction').",
    )

    @field_validator("allow", mode="before")
    @classmethod
    def _allow(cls, value: Any) -> Any:
        if isinstance(value, str):  # from the environment: a,b or a JSON list
            text = value.strip()
            return json.loads(text) if text.startswith("[") else [v for v in text.split(",") if v]
        return value

    @field_validator("patterns")
    @classmethod
    def _patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for kind, pattern in value.items():
            if not re.fullmatch(r"[a-z0-9-]{1,40}", kind):
                raise ValueError(f"kind {kind!r} is not a label ([a-z0-9-]+)")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {kind!r} does not compile: {exc}") from None
        return value


class EmbeddingSettings(_Settings):
    """Semantic recall (``docs/semantic-recall.md``): facts get vectors from an
    OpenAI-compatible ``/embeddings`` endpoint after each save, and recall ranks by meaning
    beside the text. Without ``base_url`` and ``model``: lexical ranking only."""

    base_url: str | None = Field(
        None,
        description="An OpenAI-compatible endpoint serving /embeddings (e.g. "
        "http://127.0.0.1:8088/v1); with model set, facts get vectors and recall ranks by "
        "meaning too. Unset: lexical ranking only.",
    )
    model: str | None = Field(
        None, description="The embedding model's name at that endpoint; vectors are kept per model."
    )
    api_key: SecretStr | None = Field(
        None, description="The endpoint's API key (none sent when unset; never shown)."
    )
    dimensions: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Ask the model for vectors of this length (models that can shorten them); "
        "unset: the model's own.",
    )
    timeout_seconds: float = Field(
        30.0, gt=0, le=600, description="The deadline of one batch embedded by the worker."
    )
    batch_size: int = Field(64, ge=1, le=2048, description="Facts embedded per request.")
    query_timeout_seconds: float = Field(
        0.3,
        gt=0,
        le=30,
        description="The deadline of a query's embedding in a context or search; past it, "
        "the ranking is lexical (counted).",
    )
    retry_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="The first wait after a failed embedding pass; doubled at each failure "
        "in a row, up to 64 times it.",
    )
    interval_seconds: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="How often the worker looks for facts lacking a vector in every memory "
        "(those of an update are embedded right after its save).",
    )

    @property
    def enabled(self) -> bool:
        """True when an embedding endpoint and model are configured."""
        return self.base_url is not None and self.model is not None


SECTIONS: dict[str, type[_Settings]] = {
    "llm": LLMSettings,
    "tokens": TokenSettings,
    "queue": QueueSettings,
    "database": DatabaseSettings,
    "spool": SpoolSettings,
    "update": UpdateSettings,
    "recall": RecallSettings,
    "eviction": EvictionSettings,
    "staleness": StalenessSettings,
    "consolidation": ConsolidationSettings,
    "retention": RetentionSettings,
    "server": ServerSettings,
    "safety": SafetySettings,
    "embedding": EmbeddingSettings,
    "replicas": ReplicaSettings,
}
"""The sections of :class:`MemoryConfig`, by name (its fields of the same names)."""

FLAT_KEYS: dict[str, tuple[str, str]] = {
    "model_name": ("llm", "model"),
    "llm_base_url": ("llm", "base_url"),
    "llm_api_key": ("llm", "api_key"),
    "llm_timeout_seconds": ("llm", "timeout_seconds"),
    "llm_max_retries": ("llm", "max_retries"),
    "llm_temperature": ("llm", "temperature"),
    "llm_json_mode": ("llm", "json_mode"),
    "llm_structured_output": ("llm", "structured_output"),
    "llm_max_tokens": ("llm", "max_tokens"),
    "llm_repair_attempts": ("llm", "repair_attempts"),
    "llm_daily_calls_per_tenant": ("llm", "daily_calls_per_tenant"),
    "llm_daily_tokens_per_tenant": ("llm", "daily_tokens_per_tenant"),
    "token_counting": ("tokens", "counting"),
    "tiktoken_encoding_file": ("tokens", "encoding_file"),
    "debounce_seconds": ("queue", "debounce_seconds"),
    "max_debounce_seconds": ("queue", "max_debounce_seconds"),
    "workers": ("queue", "workers"),
    "lease_seconds": ("queue", "lease_seconds"),
    "max_attempts": ("queue", "max_attempts"),
    "retry_backoff_seconds": ("queue", "retry_backoff_seconds"),
    "sweep_interval_seconds": ("queue", "sweep_interval_seconds"),
    "queue_max_row_messages": ("queue", "max_row_messages"),
    "queue_max_row_bytes": ("queue", "max_row_bytes"),
    "database_prepare_threshold": ("database", "prepare_threshold"),
    "spool_max_conversations": ("spool", "max_conversations"),
    "spool_max_per_tenant": ("spool", "max_per_tenant"),
    "spool_retry_seconds": ("spool", "retry_seconds"),
    "spool_dir": ("spool", "directory"),
    "min_confidence": ("update", "min_confidence"),
    "update_memory_max_tokens": ("update", "memory_max_tokens"),
    "scope_gate_allow_unlabeled": ("update", "scope_gate_allow_unlabeled"),
    "injected_memory_max_tokens": ("recall", "injected_memory_max_tokens"),
    "guaranteed_categories": ("recall", "guaranteed_categories"),
    "guaranteed_token_budget": ("recall", "guaranteed_token_budget"),
    "recall_relevance_weight": ("recall", "relevance_weight"),
    "recall_confidence_weight": ("recall", "confidence_weight"),
    "recall_recency_weight": ("recall", "recency_weight"),
    "recall_recency_half_life_days": ("recall", "recency_half_life_days"),
    "recall_duplicate_overlap": ("recall", "duplicate_overlap"),
    "recall_candidates": ("recall", "candidates"),
    "recall_expansion_weight": ("recall", "expansion_weight"),
    "recall_expansion_facts": ("recall", "expansion_facts"),
    "access_heat_flush_seconds": ("recall", "heat_flush_seconds"),
    "max_facts": ("eviction", "max_facts"),
    "eviction_policy": ("eviction", "policy"),
    "eviction_confidence_weight": ("eviction", "confidence_weight"),
    "eviction_freshness_weight": ("eviction", "freshness_weight"),
    "eviction_heat_weight": ("eviction", "heat_weight"),
    "eviction_freshness_half_life_days": ("eviction", "freshness_half_life_days"),
    "eviction_guaranteed_share": ("eviction", "guaranteed_share"),
    "staleness_review_enabled": ("staleness", "review_enabled"),
    "staleness_age_days": ("staleness", "age_days"),
    "staleness_category_days": ("staleness", "category_days"),
    "staleness_min_candidates": ("staleness", "min_candidates"),
    "staleness_max_candidates": ("staleness", "max_candidates"),
    "staleness_prompt_tokens": ("staleness", "prompt_tokens"),
    "staleness_max_removals_per_cycle": ("staleness", "max_removals_per_cycle"),
    "staleness_protected_categories": ("staleness", "protected_categories"),
    "staleness_max_lifetime_multiplier": ("staleness", "max_lifetime_multiplier"),
    "staleness_max_extension_days": ("staleness", "max_extension_days"),
    "staleness_review_interval_hours": ("staleness", "review_interval_hours"),
    "consolidation_enabled": ("consolidation", "enabled"),
    "consolidation_min_facts": ("consolidation", "min_facts"),
    "consolidation_max_groups_per_cycle": ("consolidation", "max_groups_per_cycle"),
    "consolidation_max_sources": ("consolidation", "max_sources"),
    "closed_fact_retention_days": ("retention", "closed_fact_days"),
    "purge_interval_seconds": ("retention", "purge_interval_seconds"),
    "server_max_body_bytes": ("server", "max_body_bytes"),
    "server_max_messages": ("server", "max_messages"),
    "server_max_message_chars": ("server", "max_message_chars"),
    "server_header_timeout_seconds": ("server", "header_timeout_seconds"),
    "server_body_timeout_seconds": ("server", "body_timeout_seconds"),
    "server_keep_alive_seconds": ("server", "keep_alive_seconds"),
    "server_max_connections": ("server", "max_connections"),
    "server_max_header_bytes": ("server", "max_header_bytes"),
    "log_format": ("server", "log_format"),
    "log_third_party": ("server", "log_third_party"),
    "redaction": ("safety", "redaction"),
    "redaction_patterns": ("safety", "patterns"),
    "redaction_allow": ("safety", "allow"),
    "refuse_instructions": ("safety", "refuse_instructions"),
    "embedding_base_url": ("embedding", "base_url"),
    "embedding_model": ("embedding", "model"),
    "embedding_api_key": ("embedding", "api_key"),
    "embedding_dimensions": ("embedding", "dimensions"),
    "embedding_timeout_seconds": ("embedding", "timeout_seconds"),
    "embedding_batch_size": ("embedding", "batch_size"),
    "embedding_query_timeout_seconds": ("embedding", "query_timeout_seconds"),
    "embedding_retry_seconds": ("embedding", "retry_seconds"),
    "embedding_interval_seconds": ("embedding", "interval_seconds"),
    "recall_semantic_weight": ("recall", "semantic_weight"),
    "recall_semantic_expansion_weight": ("recall", "semantic_expansion_weight"),
    "recall_semantic_expansion_facts": ("recall", "semantic_expansion_facts"),
    "dedupe_cosine": ("update", "dedupe_cosine"),
    "replica_url": ("replicas", "url"),
    "replica_max_lag_seconds": ("replicas", "max_lag_seconds"),
    "replica_lag_check_seconds": ("replicas", "lag_check_seconds"),
}
"""Every flat key (an environment variable's name, and a key YAML and ``MemoryConfig(...)``
accept) of a setting in a section: ``flat key → (section, field)``. The settings outside the
sections (``enabled``, ``storage``, ``storage_class``, ``auto_migrate``, ``patterns_dir``) are
their own flat keys."""
_TOP_KEYS = ("enabled", "storage", "storage_class", "auto_migrate", "patterns_dir")
_FLAT_OF = {place: flat for flat, place in FLAT_KEYS.items()}
_URL_KEYS = ("storage", "llm_base_url", "embedding_base_url", "replica_url")  # redacted()


class MemoryConfig(_Settings):
    """Every setting of memory_sql, validated, in sections; immutable once built.

    Seed keys keep the seed's names and defaults (as flat keys). ``enabled`` defaults to true
    (DeerFlow's host class says false but its ``memory:`` section switches it on: a config that
    is loaded is meant to be used). Each setting is described where it is declared (the
    sections' classes); the flat keys and the sections' fields are in :data:`FLAT_KEYS`.
    """

    enabled: bool = Field(True, description="Memory on: learn after turns, recall before them.")
    storage: str = Field(
        "sqlite:///memory_sql.db",
        description="A database URL (sqlite:///…, postgresql+psycopg://…) or a folder (the "
        "JSON-file store); also database_url. The seed's {use: 'pkg.module:Class', url|path: "
        "…} form sets storage_class too.",
    )
    storage_class: str | None = Field(
        None,
        description="A MemoryStorage class ('package.module:Class'), built with storage when "
        "one is given.",
    )
    auto_migrate: bool = Field(
        False,
        description="Also migrate a PostgreSQL database, or a SQLite file with an older "
        "schema, when the service opens it (a new SQLite file always is).",
    )
    patterns_dir: Path | None = Field(
        None, description="A folder of pattern files (correction/reinforcement phrases)."
    )
    llm: LLMSettings = Field(default_factory=LLMSettings, description=LLMSettings.__doc__)
    tokens: TokenSettings = Field(default_factory=TokenSettings, description=TokenSettings.__doc__)
    queue: QueueSettings = Field(default_factory=QueueSettings, description=QueueSettings.__doc__)
    database: DatabaseSettings = Field(
        default_factory=DatabaseSettings, description=DatabaseSettings.__doc__
    )
    spool: SpoolSettings = Field(default_factory=SpoolSettings, description=SpoolSettings.__doc__)
    update: UpdateSettings = Field(
        default_factory=UpdateSettings, description=UpdateSettings.__doc__
    )
    recall: RecallSettings = Field(
        default_factory=RecallSettings, description=RecallSettings.__doc__
    )
    eviction: EvictionSettings = Field(
        default_factory=EvictionSettings, description=EvictionSettings.__doc__
    )
    staleness: StalenessSettings = Field(
        default_factory=StalenessSettings, description=StalenessSettings.__doc__
    )
    consolidation: ConsolidationSettings = Field(
        default_factory=ConsolidationSettings, description=ConsolidationSettings.__doc__
    )
    retention: RetentionSettings = Field(
        default_factory=RetentionSettings, description=RetentionSettings.__doc__
    )
    server: ServerSettings = Field(
        default_factory=ServerSettings, description=ServerSettings.__doc__
    )
    safety: SafetySettings = Field(
        default_factory=SafetySettings, description=SafetySettings.__doc__
    )
    embedding: EmbeddingSettings = Field(
        default_factory=EmbeddingSettings, description=EmbeddingSettings.__doc__
    )
    replicas: ReplicaSettings = Field(
        default_factory=ReplicaSettings, description=ReplicaSettings.__doc__
    )

    def reply_token_limit(self) -> int:
        """The ``max_tokens`` of a memory-LLM call: ``llm.max_tokens``, or by default
        :data:`DEFAULT_REPLY_TOKENS` (2 048), sized to real replies, not to the memory."""
        return self.llm.max_tokens or DEFAULT_REPLY_TOKENS

    def value(self, key: str) -> Any:
        """The value of the setting a flat key (or alias) names: ``value("debounce_seconds")``
        is ``queue.debounce_seconds``.

        Raises:
            KeyError: ``key`` names no setting.
        """
        key = ALIASES.get(key, key)
        if key in _TOP_KEYS:
            return getattr(self, key)
        section, field = FLAT_KEYS[key]
        return getattr(getattr(self, section), field)

    def replace(self, **changes: Any) -> MemoryConfig:
        """A copy with ``changes`` (by flat key or alias), validated like a new config.

        Raises:
            ConfigError: a change names no setting or holds an invalid value.
        """
        data: dict[str, Any] = {name: getattr(self, name) for name in self.model_fields_set}
        for key, value in changes.items():
            flat = ALIASES.get(key, key)
            place = FLAT_KEYS.get(flat)
            if place is None:
                data[flat] = value
                continue
            section = data.get(place[0])
            if not isinstance(section, dict):
                section = getattr(self, place[0]).model_dump(exclude_unset=True)
                data[place[0]] = section
            section[place[1]] = value
        return MemoryConfig(**data)

    def __init__(self, **data: Any) -> None:
        """Build from keyword arguments (no environment): flat keys, aliases, or sections (a
        mapping or the section's model); :class:`ConfigError` if invalid.

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
        cls, given: Mapping[Any, Any], source: str, env: Mapping[str, str] | None
    ) -> MemoryConfig:
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        origins: dict[str, _Origin] = {}
        for key, value in given.items():
            if not isinstance(key, str):
                raise ConfigError(f"{source}: memory: key {key!r} is not a string", path=source)
            data[key] = value
            if key in SECTIONS and isinstance(value, Mapping):
                for field in value:
                    flat = _FLAT_OF.get((key, str(field)))
                    if flat is not None:
                        origins[flat] = _Origin(source, f"{key}.{field}")
            else:
                origins[ALIASES.get(key, key)] = _Origin(source, key)
        for flat, var in OPENAI_FALLBACKS.items():
            if env.get(var) and not _given(flat, data):
                data[flat] = env[var]
                origins[flat] = _Origin(var, flat)
        overrides: dict[str, Any] = {}
        for var, value in env.items():
            if not var.startswith(ENV_PREFIX) or _ENV_IGNORED.fullmatch(var):
                continue
            name = var[len(ENV_PREFIX) :].lower()
            flat = ALIASES.get(name, name)
            if flat not in FLAT_KEYS and flat not in _TOP_KEYS:
                raise _unknown_variable(var, name)
            if flat in overrides:
                raise ConfigError(f"{var} and another alias of {flat!r} are both set", key=flat)
            overrides[flat] = _parse_env(flat, value, var)
            origins[flat] = _Origin(var, flat)
        for flat, value in overrides.items():
            _forget(flat, data)
            data[flat] = value
        token = _ORIGINS.set(origins)
        try:
            return cls(**data)
        finally:
            _ORIGINS.reset(token)

    # Presentation ------------------------------------------------------------------------

    def redacted(self) -> dict[str, Any]:
        """All settings as JSON-ready values, by section, safe to log: no API key, and the
        storage and LLM URLs through :func:`~memory_sql.database.redacted` (no password, no
        key-like query parameter)."""
        data = self.model_dump(mode="json")
        data["llm"]["api_key"] = _SECRET if self.llm.api_key is not None else None
        if data["llm"]["base_url"] is not None:
            data["llm"]["base_url"] = redacted(data["llm"]["base_url"])
        data["embedding"]["api_key"] = _SECRET if self.embedding.api_key is not None else None
        if data["embedding"]["base_url"] is not None:
            data["embedding"]["base_url"] = redacted(data["embedding"]["base_url"])
        data["storage"] = redacted(data["storage"])
        if data["replicas"]["url"] is not None:
            data["replicas"]["url"] = redacted(data["replicas"]["url"])
        return data

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, redacted(value) if name == "storage" else value

    # Validation --------------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat keys and aliases into their sections; the seed's ``storage: {use: …}``."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for alias, flat in ALIASES.items():
            if alias in data:
                if flat in data:
                    raise ValueError(f"give either {flat!r} or {alias!r}, not both")
                data[flat] = data.pop(alias)
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
        for flat, (section, field) in FLAT_KEYS.items():
            if flat not in data:
                continue
            value = data.pop(flat)
            nested = data.get(section)
            if isinstance(nested, BaseModel):
                nested = nested.model_dump(exclude_unset=True)
            nested = dict(nested) if isinstance(nested, Mapping) else {}
            if field in nested:
                raise ValueError(f"give either {flat!r} or {section}.{field}, not both")
            nested[field] = value
            data[section] = nested
        return data

    @field_validator("storage", mode="before")
    @classmethod
    def _storage(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("storage is empty; give a database URL or a folder")
        return value.strip() if isinstance(value, str) else value

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

    @field_validator("patterns_dir")
    @classmethod
    def _patterns(cls, value: Path | None) -> Path | None:
        if value is not None:
            load_patterns(value)  # refuse a broken pattern file now, not mid-conversation
        return value


# The flat keys, the settings table -------------------------------------------------------


def flat_keys() -> list[str]:
    """Every flat key, in the order of the settings table (aliases not included)."""
    return [*_TOP_KEYS, *FLAT_KEYS]


def field_of(key: str) -> FieldInfo:
    """The declaration of the setting a flat key names (its ``description``, bounds, default)."""
    key = ALIASES.get(key, key)
    if key in _TOP_KEYS:
        return MemoryConfig.model_fields[key]
    section, field = FLAT_KEYS[key]
    return SECTIONS[section].model_fields[field]


def settings_table() -> str:
    """The Markdown table of every setting: its section field, flat key (the
    ``MEMORY_SQL_<KEY>`` variable's name), default and description (``docs/settings.md``
    holds it; a test checks that it is this)."""
    rows = [
        "| Setting | Flat key / `MEMORY_SQL_` variable | Default | Description |",
        "|---|---|---|---|",
    ]
    for key in flat_keys():
        name = key if key in _TOP_KEYS else ".".join(FLAT_KEYS[key])
        info = field_of(key)
        default = info.get_default(call_default_factory=True)
        shown = json.dumps(list(default) if isinstance(default, tuple) else default)
        description = " ".join((info.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}` | `{key}` | `{shown}` | {description} |")
    return "\n".join(rows) + "\n"


# Loading helpers ---------------------------------------------------------------------------


def _given(flat: str, data: Mapping[str, Any]) -> bool:
    """Whether ``data`` (a ``memory:`` mapping) sets the setting ``flat`` names, in any form."""
    if flat in data or any(alias in data for alias, target in ALIASES.items() if target == flat):
        return True
    place = FLAT_KEYS.get(flat)
    nested = data.get(place[0]) if place else None
    return isinstance(nested, Mapping) and place is not None and place[1] in nested


def _forget(flat: str, data: dict[str, Any]) -> None:
    """Remove the setting ``flat`` names from ``data``, in any form (an override replaces it)."""
    for name in [flat, *(a for a, f in ALIASES.items() if f == flat)]:
        data.pop(name, None)
    place = FLAT_KEYS.get(flat)
    if place is not None and isinstance(data.get(place[0]), Mapping):
        nested = dict(data[place[0]])
        nested.pop(place[1], None)
        data[place[0]] = nested


def _unknown_variable(var: str, name: str) -> ConfigError:
    close = difflib.get_close_matches(name, [*flat_keys(), *ALIASES], n=1)
    if close:
        hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}?)"
    else:
        hint = "; known: " + ", ".join(ENV_PREFIX + key.upper() for key in flat_keys())
    return ConfigError(
        f"unknown environment variable {var}{hint}; {ENV_PREFIX}<KEY> variables set config keys "
        f"({ENV_PREFIX}CONFIG and {ENV_PREFIX}TEST_* excepted)",
        key=name,
    )


def _parse_env(flat: str, value: str, var: str) -> Any:
    if flat in ("staleness_category_days", "redaction_patterns"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{var}: invalid JSON object: {exc.msg}", key=flat) from None
    if flat in ("guaranteed_categories", "staleness_protected_categories") and (
        value.strip().startswith("[")
    ):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{var}: invalid JSON list: {exc.msg}", key=flat) from None
    return value


# Error messages ----------------------------------------------------------------------------


def _config_error(exc: ValidationError, origins: Mapping[str, _Origin]) -> ConfigError:
    problems = []
    first_key = None
    list_known = False
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        message = error["msg"].removeprefix("Value error, ")
        if not loc:
            problems.append(message)
            continue
        # A section's field is named by its flat key (or as it was written).
        flat = _FLAT_OF.get((loc[0], loc[1])) if len(loc) > 1 else None
        key = flat or loc[0]
        first_key = first_key or key
        origin = origins.get(key)
        written = origin.written if origin is not None else key
        rest = loc[2:] if flat else loc[1:]
        label = ".".join([written, *rest]) + (f" (from {origin.source})" if origin else "")
        if error["type"] == "extra_forbidden":
            known = [*flat_keys(), *ALIASES, *SECTIONS]
            if len(loc) > 1:  # an unknown field of a section
                known = [*SECTIONS[loc[0]].model_fields] if loc[0] in SECTIONS else known
                label = ".".join(loc)
            close = difflib.get_close_matches(loc[-1], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            list_known = list_known or not close
            problems.append(f"unknown key {label}{hint}")
        elif error["type"] == "value_error" and key in SECTIONS:
            problems.append(f"{label}: {message}")
        elif error["type"] == "value_error":
            problems.append(f"{label}: {message}; allowed: {_allowed(key)}")
        else:
            shown = _show(key, error.get("input"))
            problems.append(f"{label}: got {shown}, allowed: {_allowed(key)}")
    if list_known:
        problems.append("known keys: " + ", ".join(flat_keys()))
    return ConfigError("invalid memory config: " + "; ".join(problems), key=first_key)


def _show(key: str, value: Any) -> str:
    if key == "llm_api_key":
        return _SECRET
    if isinstance(value, str):
        value = redacted(value)
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _allowed(key: str) -> str:
    try:
        field = field_of(key)
    except KeyError:
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
        "log_format": "text or json",
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
    return special.get(key, "a section of settings" if key in SECTIONS else "a string")
