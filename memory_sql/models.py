"""The memory document: typed models, fact identity, and DeerFlow's ``memory.json`` shape.

A document holds what one memory scope knows about its user: three user-context sections, three
history sections and a list of facts. Field names are snake_case; input also accepts DeerFlow's
camelCase (``workContext``, ``createdAt``, ``sourceError``) and the seed's snake_case fact fields.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import unicodedata
import uuid
from datetime import datetime, timezone
from typing import Any, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

USER_SECTIONS = ("work_context", "personal_context", "top_of_mind")
HISTORY_SECTIONS = ("recent_months", "earlier_context", "long_term_background")

MAX_TEXT_CHARS = 32_000
MAX_THREAD_ID_CHARS = 256
MAX_VALID_DAYS = 36_500
"""The longest ``expected_valid_days`` a fact may hold (the updater bounds the LLM's figure
further, as DeerFlow does)."""
FACT_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
CATEGORY_PATTERN = re.compile(r"[a-z0-9_-]{1,32}")
_WHITESPACE = re.compile(r"\s+")
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): invisible characters such
# as the zero-width space, the soft hyphen, joiners, bidi marks and variation selectors.
_DEFAULT_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f-\u1160\u17b4-\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def _deerflow_source_thread(source: Any) -> Any:
    """What ``source_thread_id`` holds for DeerFlow's ``source``: the thread of a conversation,
    else the source type (``unknown``: None), as DeerFlow's gateway shows it."""
    if isinstance(source, dict):
        kind = source.get("type")
        thread = source.get("threadId") or source.get("thread_id")
        if kind in (None, "", "conversation") and thread:
            return thread
        if isinstance(kind, str) and kind and kind != "unknown":
            return kind
        return thread or None
    if source in ("", "unknown"):
        return None
    return source


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_fact_id() -> str:
    return "fact_" + uuid.uuid4().hex[:12]


@functools.lru_cache(maxsize=65_536)
def fact_key(content: str) -> str:
    """The text two facts share when they are duplicates.

    Unicode's default-ignorable code points (zero-width space, soft hyphen, joiners, bidi marks,
    variation selectors, …) removed, then NFKC normalisation, Python's ``str.casefold()`` and
    whitespace folding, so ``"Straße"`` and ``"STRASSE"``, ``"Prefers  Python"`` and
    ``"prefers python"``, or ``"Py\\u200bthon"`` and ``"python"``, have one key. The stored
    content keeps its characters; only the key drops them.
    """
    folded = unicodedata.normalize("NFKC", _DEFAULT_IGNORABLE.sub("", content))
    folded = unicodedata.normalize("NFKC", folded.casefold())
    return _WHITESPACE.sub(" ", folded).strip()


def fact_digest(content: str) -> str:
    """SHA-256 hex digest of :func:`fact_key`: what the database's unique constraint compares."""
    return hashlib.sha256(fact_key(content).encode("utf-8")).hexdigest()


def check_text(value: str, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Refuse text no backend can store faithfully: NUL bytes, lone surrogates, huge strings."""
    if "\x00" in value:
        raise ValueError("text contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text is not valid Unicode ({exc.reason} at {exc.start})") from None
    if len(value) > max_chars:
        raise ValueError(f"text is {len(value)} characters, more than {max_chars}")
    return value


def clean_content(value: str) -> str:
    """Fact text as stored: checked (:func:`check_text`), stripped, and not empty."""
    value = check_text(value).strip()
    if not value:
        raise ValueError("fact content is empty")
    return value


def clean_category(value: Any) -> Any:
    """A category as stored: stripped, lower-cased, ``context`` when missing, a short label."""
    if value is None:
        return "context"
    if isinstance(value, str):
        value = value.strip().lower() or "context"
        if not CATEGORY_PATTERN.fullmatch(value):
            raise ValueError(f"category {value[:40]!r} is not a label (^[a-z0-9_-]{{1,32}}$)")
    return value


def _as_utc(value: Any) -> Any:
    if value in ("", None):
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime):
        return (
            value.replace(tzinfo=timezone.utc)
            if value.tzinfo is None
            else value.astimezone(timezone.utc)
        )
    return value


def format_timestamp(value: datetime | None) -> str:
    """DeerFlow's timestamp format: UTC, microseconds, ``Z``; ``""`` for none."""
    if value is None:
        return ""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Model(BaseModel):
    model_config = ConfigDict(validate_assignment=True, populate_by_name=True, extra="ignore")


class Section(_Model):
    """One summary paragraph and when it was last rewritten."""

    summary: str = ""
    updated_at: datetime | None = Field(
        default=None, validation_alias=AliasChoices("updated_at", "updatedAt")
    )

    _utc = field_validator("updated_at", mode="before")(_as_utc)

    @field_validator("summary")
    @classmethod
    def _summary(cls, value: str) -> str:
        return check_text(value)


class UserContext(_Model):
    """What the user is: work, personal life, and what is on their mind now."""

    work_context: Section = Field(
        default_factory=Section, validation_alias=AliasChoices("work_context", "workContext")
    )
    personal_context: Section = Field(
        default_factory=Section,
        validation_alias=AliasChoices("personal_context", "personalContext"),
    )
    top_of_mind: Section = Field(
        default_factory=Section, validation_alias=AliasChoices("top_of_mind", "topOfMind")
    )


class History(_Model):
    """What the user has been doing: recent months, earlier context, long-term background."""

    recent_months: Section = Field(
        default_factory=Section, validation_alias=AliasChoices("recent_months", "recentMonths")
    )
    earlier_context: Section = Field(
        default_factory=Section,
        validation_alias=AliasChoices("earlier_context", "earlierContext"),
    )
    long_term_background: Section = Field(
        default_factory=Section,
        validation_alias=AliasChoices("long_term_background", "longTermBackground"),
    )


class Fact(_Model):
    """One durable thing known about the user; immutable (change one with :meth:`replace`).

    ``content`` is stripped and non-empty; ``category`` is a lower-case label (``preference``,
    ``correction``, …); ``confidence`` is a finite number in [0, 1]; ``source_error`` is, for a
    correction, the mistake it corrects.

    Aging: ``expected_valid_days`` is how long the fact is expected to hold after its last
    confirmation (None: its category's default applies); ``confirmed_at`` and
    ``confirmation_count`` tell when and how often the user confirmed it. Supersession:
    ``valid_from`` is when it became believed (None: at its ``created_at``) and
    ``valid_to`` when it stopped (None: live; a closed fact is only read by a past view,
    :meth:`MemoryStorage.load(as_of=…) <memory_sql.storage.MemoryStorage.load>`), with
    ``superseded_by`` the id of the fact that took its place, if one did.

    ``source_thread_id`` is the thread the fact was learned from. A fact that came from no
    thread keeps DeerFlow's source type there instead (``manual``, ``consolidation``,
    ``import``, as DeerFlow's own ``source`` string does), so that it reads back as that type;
    ``None`` is DeerFlow's ``unknown``. A ``createdAt`` of ``""`` (DeerFlow's empty timestamp)
    counts as missing.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_fact_id)
    content: str
    category: str = "context"
    confidence: float = 0.5
    source_thread_id: str | None = Field(
        default=None,
        validation_alias=AliasChoices("source_thread_id", "sourceThreadId", "thread_id"),
    )
    source_error: str | None = Field(
        default=None, validation_alias=AliasChoices("source_error", "sourceError")
    )
    created_at: datetime = Field(
        default_factory=utcnow, validation_alias=AliasChoices("created_at", "createdAt")
    )
    updated_at: datetime | None = Field(
        default=None, validation_alias=AliasChoices("updated_at", "updatedAt")
    )
    expected_valid_days: int | None = Field(
        default=None,
        ge=1,
        le=MAX_VALID_DAYS,
        validation_alias=AliasChoices("expected_valid_days", "expectedValidDays"),
    )
    confirmed_at: datetime | None = Field(
        default=None,
        validation_alias=AliasChoices("confirmed_at", "lastConfirmedAt", "confirmedAt"),
    )
    confirmation_count: int = Field(
        default=0,
        ge=0,
        validation_alias=AliasChoices("confirmation_count", "confirmationCount"),
    )
    valid_from: datetime | None = Field(
        default=None, validation_alias=AliasChoices("valid_from", "validFrom")
    )
    valid_to: datetime | None = Field(
        default=None, validation_alias=AliasChoices("valid_to", "validTo")
    )
    superseded_by: str | None = Field(
        default=None, validation_alias=AliasChoices("superseded_by", "supersededBy")
    )

    _utc = field_validator(
        "created_at", "updated_at", "confirmed_at", "valid_from", "valid_to", mode="before"
    )(_as_utc)

    @field_validator("expected_valid_days", "confirmation_count", mode="before")
    @classmethod
    def _whole_days(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a whole number, not a boolean")
        return value

    @field_validator("superseded_by")
    @classmethod
    def _successor(cls, value: str | None) -> str | None:
        if value is not None and not FACT_ID_PATTERN.fullmatch(value):
            raise ValueError("superseded_by must be a fact id (^[A-Za-z0-9_-]{1,64}$)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _deerflow_source(cls, data: Any) -> Any:
        # DeerFlow stores where a fact came from as ``source``: a thread id, a type name, or
        # ``{"type": …, "threadId": …}``; the type is kept where there is no thread.
        if not isinstance(data, dict):
            return data
        for name in ("created_at", "createdAt"):
            if name in data and data[name] in ("", None):
                data = {key: value for key, value in data.items() if key != name}
        if "source" not in data:
            return data
        if any(k in data for k in ("source_thread_id", "sourceThreadId", "thread_id")):
            return data
        return {**data, "source_thread_id": _deerflow_source_thread(data["source"])}

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not FACT_ID_PATTERN.fullmatch(value):
            raise ValueError("fact id must match ^[A-Za-z0-9_-]{1,64}$")
        return value

    _content = field_validator("content")(clean_content)
    _category = field_validator("category", mode="before")(clean_category)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("confidence must be a number, not a boolean")
        if isinstance(value, (int, float)) and not math.isfinite(value):
            raise ValueError("confidence must be finite")
        if isinstance(value, (int, float)) and not 0.0 <= value <= 1.0:
            raise ValueError("confidence must be between 0 and 1")
        return value

    @field_validator("source_thread_id", "source_error")
    @classmethod
    def _optional_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        limit = MAX_THREAD_ID_CHARS if info.field_name == "source_thread_id" else MAX_TEXT_CHARS
        value = check_text(value, max_chars=limit).strip()
        return value or None

    @property
    def key(self) -> str:
        """This fact's :func:`fact_key`."""
        return fact_key(self.content)

    @property
    def since(self) -> datetime:
        """When the fact became believed: ``valid_from``, else ``created_at``."""
        return self.valid_from or self.created_at

    def replace(self, **changes: Any) -> Fact:
        """A validated copy with ``changes`` applied (``fact.replace(confidence=0.9)``)."""
        return Fact.model_validate({**self.__dict__, **changes})


_FACT_FIELDS = frozenset(Fact.model_fields)
_M = TypeVar("_M", bound=BaseModel)
_new_object = object.__new__


def trusted_fact(
    fact_id: str,
    content: str,
    category: str,
    confidence: float,
    source_thread_id: str | None,
    source_error: str | None,
    created_at: datetime,
    updated_at: datetime | None,
    expected_valid_days: int | None = None,
    confirmed_at: datetime | None = None,
    confirmation_count: int = 0,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    superseded_by: str | None = None,
) -> Fact:
    """A :class:`Fact` of values that were validated as a Fact before (a row the store wrote
    itself), built without validating them again: four times cheaper than
    ``Fact.model_construct``, which a cold load of a large memory would spend most of its
    time in. Input from anywhere else goes through ``Fact(...)``."""
    fact = _new_object(Fact)
    _set_dict(
        fact,
        {
            "id": fact_id,
            "content": content,
            "category": category,
            "confidence": confidence,
            "source_thread_id": source_thread_id,
            "source_error": source_error,
            "created_at": created_at,
            "updated_at": updated_at,
            "expected_valid_days": expected_valid_days,
            "confirmed_at": confirmed_at,
            "confirmation_count": confirmation_count,
            "valid_from": valid_from,
            "valid_to": valid_to,
            "superseded_by": superseded_by,
        },
    )
    _set_fields_set(fact, _FACT_FIELDS)
    _set_extra(fact, None)
    _set_private(fact, None)
    return fact


def copy_model(model: _M, **values: Any) -> _M:
    """A shallow copy of ``model`` with ``values`` in place of some fields, none of them
    validated: what ``model_copy(update=values)`` does, at a third of its cost. Only for
    values that are valid already (what the store holds, computed by the store)."""
    return _copy_of(model, {**model.__dict__, **values})


# BaseModel's slots, set through their descriptors (cheaper than object.__setattr__ by name).
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _copy_of(model: _M, values: dict[str, Any]) -> _M:
    """A copy of ``model`` holding ``values`` (a new dict, all fields) as its fields."""
    copy = _new_object(model.__class__)
    _set_dict(copy, values)
    _set_fields_set(copy, set(model.__pydantic_fields_set__))
    _set_extra(copy, None)
    _set_private(copy, None)
    return copy


class MemoryDocument(_Model):
    """Everything one scope remembers, plus the storage ``version`` it was loaded at.

    ``version`` is 0 for a memory that has never been saved; each successful save makes it one
    higher. Pass it back as ``expected_version`` when saving.

    A fact taken out of ``facts`` is closed by the save (kept as a past version, see
    :class:`Fact`), not erased; ``superseded`` maps the id of such a fact to the id of the
    fact that took its place, where one did (a correction, a merge): the save records it as
    ``superseded_by``. It is not part of the exported document.
    """

    user: UserContext = Field(default_factory=UserContext)
    history: History = Field(default_factory=History)
    facts: list[Fact] = Field(default_factory=list)
    version: int = Field(default=0, ge=0)
    last_updated: datetime | None = Field(
        default=None, validation_alias=AliasChoices("last_updated", "lastUpdated")
    )
    superseded: dict[str, str] = Field(default_factory=dict, exclude=True)

    _utc = field_validator("last_updated", mode="before")(_as_utc)

    @field_validator("version", mode="before")
    @classmethod
    def _deerflow_version(cls, value: Any) -> Any:
        # DeerFlow's "version" is a schema label such as "1.0", not a counter.
        return 0 if isinstance(value, str) else value

    def clone(self) -> MemoryDocument:
        """A copy that shares nothing mutable with this one, much cheaper than a deep copy:
        facts are immutable, so the copy has a new list of the same facts (and new
        sections, the only other mutable parts)."""
        values = self.__dict__.copy()
        for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
            model = values[group]
            sections = model.__dict__.copy()
            for name in names:
                section = sections[name]
                copy = _new_object(section.__class__)  # _copy_of, inlined: a load's hot path
                _set_dict(copy, section.__dict__.copy())
                _set_fields_set(copy, set(section.__pydantic_fields_set__))
                _set_extra(copy, None)
                _set_private(copy, None)
                sections[name] = copy
            values[group] = _copy_of(model, sections)
        values["facts"] = values["facts"][:]
        values["superseded"] = values["superseded"].copy()
        return _copy_of(self, values)

    def sections(self) -> dict[str, Section]:
        """All six sections by name (``work_context`` … ``long_term_background``)."""
        return {
            **{name: getattr(self.user, name) for name in USER_SECTIONS},
            **{name: getattr(self.history, name) for name in HISTORY_SECTIONS},
        }

    def is_empty(self) -> bool:
        return not self.facts and not any(s.summary for s in self.sections().values())

    def duplicate_fact(self) -> Fact | None:
        """The first fact whose casefold key an earlier fact already has, or None."""
        seen: set[str] = set()
        for fact in self.facts:
            key = fact.key
            if key in seen:
                return fact
            seen.add(key)
        return None

    # DeerFlow's memory.json ------------------------------------------------------------------

    def to_deerflow(self) -> dict[str, Any]:
        """This document in DeerFlow's ``memory.json`` shape (camelCase, ``Z`` timestamps)."""

        def section(s: Section) -> dict[str, str]:
            return {"summary": s.summary, "updatedAt": format_timestamp(s.updated_at)}

        def fact(f: Fact) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": f.id,
                "content": f.content,
                "category": f.category,
                "confidence": f.confidence,
                "createdAt": format_timestamp(f.created_at),
                "source": f.source_thread_id or "unknown",
            }
            if f.updated_at is not None:
                out["updatedAt"] = format_timestamp(f.updated_at)
            if f.source_error:
                out["sourceError"] = f.source_error
            if f.expected_valid_days is not None:
                out["expected_valid_days"] = f.expected_valid_days
            if f.confirmed_at is not None:
                out["lastConfirmedAt"] = format_timestamp(f.confirmed_at)
            if f.confirmation_count:
                out["confirmationCount"] = f.confirmation_count
            # DeerFlow has no validity interval: memory_sql's own names, read back by import.
            if f.valid_from is not None:
                out["validFrom"] = format_timestamp(f.valid_from)
            if f.valid_to is not None:
                out["validTo"] = format_timestamp(f.valid_to)
            if f.superseded_by is not None:
                out["supersededBy"] = f.superseded_by
            return out

        return {
            "version": "1.0",
            "revision": self.version,
            "lastUpdated": format_timestamp(self.last_updated),
            "user": {
                "workContext": section(self.user.work_context),
                "personalContext": section(self.user.personal_context),
                "topOfMind": section(self.user.top_of_mind),
            },
            "history": {
                "recentMonths": section(self.history.recent_months),
                "earlierContext": section(self.history.earlier_context),
                "longTermBackground": section(self.history.long_term_background),
            },
            "facts": [fact(f) for f in self.facts],
        }

    @classmethod
    def from_deerflow(cls, data: dict[str, Any] | str | bytes) -> MemoryDocument:
        """Read DeerFlow's ``memory.json`` (a dict or its JSON text). ``version`` starts at 0.

        Raises:
            pydantic.ValidationError: the data does not have the memory.json shape.
        """
        if isinstance(data, (str, bytes)):
            data = json.loads(data)
        doc = cls.model_validate(data)
        doc.version = 0
        return doc
