"""Reading the memory LLM's reply: find the JSON object in it and validate its shape.

The reply should be one JSON object (the shape is spelled out in :mod:`memory_sql.update.prompt`)::

    {"user": {"workContext": {"summary": "…", "shouldUpdate": true}, …},
     "history": {"recentMonths": {"summary": "…", "shouldUpdate": false}, …},
     "newFacts": [{"content": "…", "category": "preference", "confidence": 0.9,
                   "sourceError": "…"}],
     "factsToRemove": ["fact_1a2b3c4d5e6f"]}

Finding it: ``<think>…</think>`` blocks (and everything before a lone ``</think>``) are dropped;
the first JSON object that has the keys ``user``, ``history`` and ``newFacts`` is taken, whether
it stands alone, sits in a code fence or in prose, or is nested in another object; objects
without them are skipped. A reply that is a JSON array is refused even if it holds such an
object. Truncated JSON is not repaired. A reply longer than :data:`MAX_REPLY_CHARS` (or, once
reasoning is dropped, :data:`MAX_JSON_CHARS`) is refused unread, and at most
:data:`MAX_CANDIDATES` places where an object could start are tried, so a hostile reply costs
little time.

Validating it (all or nothing: one bad part rejects the whole reply, and the memory stays as it
was):

- ``user`` and ``history`` are objects; each section in them is optional and, when present, an
  object ``{summary: string, shouldUpdate: boolean}``. Section names other than the six known
  are ignored.
- ``newFacts`` is a list of objects, each with a non-blank string ``content`` and a
  ``confidence`` between 0 and 1: a JSON number, or a string holding one (``"0.9"``); words
  (``"high"``), booleans, NaN and infinities are refused. ``category`` defaults to ``context``
  and is lower-cased; ``sourceError`` is an optional string.
- ``factsToRemove`` (optional) is a list of fact ids, as strings or as ``{"id": …}`` objects.
- Aging (:mod:`memory_sql.update.review`, all optional): ``expectedValidDays`` and ``replaces``
  (ids of the facts a new fact corrects) on a new fact, ``factsToReinforce`` (ids),
  ``staleFactsToRemove`` (``{id, reason}``), ``staleFactsToExtend`` (``{id, extend_by_days,
  reason}``) and ``factsToConsolidate`` (``{sourceIds, consolidated: {content, category,
  confidence}}``).
- Scope-gate labels, on each new fact and each section: ``scope`` (``user`` | ``thread`` |
  ``project``), ``durability`` (``durable`` | ``temporary``), ``authority`` (``descriptive`` |
  ``transactional``). Each is optional here and read lower-cased; a label that is not a string
  is kept as ``"invalid"``. They never reject a reply: the updater's scope gate
  (:func:`memory_sql.update.updater.gate_reason`) decides what a missing or unknown label means.
- Keys may be camelCase or snake_case (``shouldUpdate``/``should_update``, ``newFacts``/
  ``new_facts``, ``workContext``/``work_context``, …); other keys are ignored.

DeerFlow instead drops a fact with a bad confidence and keeps the rest, unless the reply also
removes facts; a reply that gets part of the shape wrong is not trusted with the rest of it
here.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from ..errors import InvalidUpdateError
from ..models import HISTORY_SECTIONS, USER_SECTIONS, check_text, clean_category, clean_content
from . import review

MAX_REPLY_CHARS = 2_000_000
MAX_JSON_CHARS = 300_000
MAX_CANDIDATES = 64
MAX_NEW_FACTS = 500
MAX_REMOVALS = 10_000

_REQUIRED = ("user", "history", "newFacts")
_KEY_ALIASES = {"user": ("user",), "history": ("history",), "newFacts": ("newFacts", "new_facts")}
_KNOWN_KEYS = frozenset({"user", "history", "newFacts", "new_facts", "factsToRemove"})
_LIST_CAP = 1000  # of each aging list
_THINK_START = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_THINK_END = re.compile(r"</think(?:ing)?>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"\A```[\w-]*\s*")
# Where an object may start: "{" then a key or "}".
_OBJECT_START = re.compile(r"\{\s*[\"}]")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


SCOPES = ("user", "thread", "project")
DURABILITIES = ("durable", "temporary")
AUTHORITIES = ("descriptive", "transactional")


def _label(values: tuple[str, ...]) -> Any:
    return Annotated[str | None, WithJsonSchema({"type": "string", "enum": list(values)})]


def _read_label(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        return "invalid"
    return value.strip().lower() or None


_LABELS = ("scope", "durability", "authority")


class SectionUpdate(_Strict):
    """What the LLM says about one summary section."""

    summary: StrictStr = ""
    should_update: StrictBool = Field(
        default=False, validation_alias=AliasChoices("shouldUpdate", "should_update")
    )
    # The scope-gate labels (None: not given), after the content so the model writes it first.
    scope: _label(SCOPES) = None  # type: ignore[valid-type]
    durability: _label(DURABILITIES) = None  # type: ignore[valid-type]
    authority: _label(AUTHORITIES) = None  # type: ignore[valid-type]

    _labels = field_validator(*_LABELS, mode="before")(_read_label)

    @field_validator("summary", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("summary")
    @classmethod
    def _text(cls, value: str) -> str:
        return check_text(value).strip()


def _section_field(name: str) -> Any:
    return Field(default=None, validation_alias=AliasChoices(_camel(name), name))


class UserUpdate(_Strict):
    """Proposed user-context sections (absent: not proposed)."""

    work_context: SectionUpdate | None = _section_field("work_context")
    personal_context: SectionUpdate | None = _section_field("personal_context")
    top_of_mind: SectionUpdate | None = _section_field("top_of_mind")


class HistoryUpdate(_Strict):
    """Proposed history sections (absent: not proposed)."""

    recent_months: SectionUpdate | None = _section_field("recent_months")
    earlier_context: SectionUpdate | None = _section_field("earlier_context")
    long_term_background: SectionUpdate | None = _section_field("long_term_background")


class NewFact(_Strict):
    """A fact the LLM proposes to remember."""

    content: StrictStr
    category: StrictStr = "context"
    confidence: float
    source_error: StrictStr | None = Field(
        default=None, validation_alias=AliasChoices("sourceError", "source_error")
    )
    expected_valid_days: int | None = Field(
        default=None, validation_alias=AliasChoices("expectedValidDays", "expected_valid_days")
    )
    replaces: list[StrictStr] = Field(default_factory=list, max_length=_LIST_CAP)
    scope: _label(SCOPES) = None  # type: ignore[valid-type]
    durability: _label(DURABILITIES) = None  # type: ignore[valid-type]
    authority: _label(AUTHORITIES) = None  # type: ignore[valid-type]

    _labels = field_validator(*_LABELS, mode="before")(_read_label)
    _valid_days = field_validator("expected_valid_days", mode="before")(review.read_valid_days)
    _replaces = field_validator("replaces", mode="before")(review.read_ids)

    _content = field_validator("content")(clean_content)
    _category = field_validator("category", mode="before")(clean_category)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"confidence must be a number, not {type(value).__name__}")
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ValueError(f"confidence {value[:20]!r} is not a number") from None
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"confidence {value!r} is not between 0 and 1")
        return float(value)

    @field_validator("source_error")
    @classmethod
    def _source_error(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return check_text(value).strip() or None


class MemoryUpdate(_Strict):
    """A validated reply of the memory LLM (see the module docstring for the JSON)."""

    user: UserUpdate
    history: HistoryUpdate
    new_facts: list[NewFact] = Field(
        validation_alias=AliasChoices("newFacts", "new_facts"), max_length=MAX_NEW_FACTS
    )
    facts_to_remove: list[StrictStr] = Field(
        default_factory=list,
        validation_alias=AliasChoices("factsToRemove", "facts_to_remove"),
        max_length=MAX_REMOVALS,
    )
    facts_to_reinforce: list[StrictStr] = Field(
        default_factory=list,
        validation_alias=AliasChoices("factsToReinforce", "facts_to_reinforce"),
        max_length=_LIST_CAP,
    )
    stale_facts_to_remove: list[review.StaleRemoval] = Field(
        default_factory=list,
        validation_alias=AliasChoices("staleFactsToRemove", "stale_facts_to_remove"),
        max_length=_LIST_CAP,
    )
    stale_facts_to_extend: list[review.StaleExtension] = Field(
        default_factory=list,
        validation_alias=AliasChoices("staleFactsToExtend", "stale_facts_to_extend"),
        max_length=_LIST_CAP,
    )
    facts_to_consolidate: list[review.Consolidation] = Field(
        default_factory=list,
        validation_alias=AliasChoices("factsToConsolidate", "facts_to_consolidate"),
        max_length=_LIST_CAP,
    )

    _ids = field_validator("facts_to_remove", "facts_to_reinforce", mode="before")(review.read_ids)

    @field_validator(
        "stale_facts_to_remove", "stale_facts_to_extend", "facts_to_consolidate", mode="before"
    )
    @classmethod
    def _none_is_no_list(cls, value: Any) -> Any:
        if isinstance(value, list):  # a bare id stands for {"id": …}
            return [{"id": item} if isinstance(item, str) else item for item in value]
        return [] if value is None else value

    def proposed_sections(self) -> dict[str, SectionUpdate]:
        """The sections the reply would rewrite (marked ``shouldUpdate``, non-blank summary),
        by name, with their labels; :meth:`section_updates` without the labels."""
        proposed: dict[str, SectionUpdate] = {}
        for group, names in ((self.user, USER_SECTIONS), (self.history, HISTORY_SECTIONS)):
            for name in names:
                section: SectionUpdate | None = getattr(group, name)
                if section is not None and section.should_update and section.summary:
                    proposed[name] = section
        return proposed

    def section_updates(self) -> dict[str, str]:
        """The sections to rewrite, by name (``work_context`` …), with their new summaries:
        those marked ``shouldUpdate`` with a non-blank summary."""
        proposed: dict[str, str] = {}
        for group, names in ((self.user, USER_SECTIONS), (self.history, HISTORY_SECTIONS)):
            for name in names:
                section: SectionUpdate | None = getattr(group, name)
                if section is not None and section.should_update and section.summary:
                    proposed[name] = section.summary
        return proposed


def parse_update(text: str) -> MemoryUpdate:
    """The memory update in the LLM's reply ``text``.

    Raises:
        InvalidUpdateError: no JSON object with ``user``, ``history`` and ``newFacts`` is found,
            or the one found does not have the expected shape; the reason names what is wrong.
    """
    if not isinstance(text, str):
        raise InvalidUpdateError(f"the reply is {type(text).__name__}, not text")
    if len(text) > MAX_REPLY_CHARS:
        raise InvalidUpdateError(f"the reply is {len(text)} characters, over {MAX_REPLY_CHARS}")
    data = _find_object(_drop_reasoning(text))
    try:
        return MemoryUpdate.model_validate(data)
    except ValidationError as exc:
        raise InvalidUpdateError(_describe(exc)) from None


def _drop_reasoning(text: str) -> str:
    if "think" not in text.lower():
        return text
    # Each block ends at the first closing tag after it; scanning on from there keeps hostile
    # replies (thousands of opening tags) linear, where a lazy regex would be quadratic.
    kept, position = [], 0
    while (start := _THINK_START.search(text, position)) is not None:
        end = _THINK_END.search(text, start.end())
        if end is None:
            break
        kept.append(text[position : start.start()])
        position = end.end()
    kept.append(text[position:])
    text = "".join(kept)
    ends = list(_THINK_END.finditer(text))
    return text[ends[-1].end() :] if ends else text


def _find_object(text: str) -> dict[str, Any]:
    stripped = text.strip()
    if not stripped:
        raise InvalidUpdateError("the reply is empty")
    if len(stripped) > MAX_JSON_CHARS:
        raise InvalidUpdateError(
            f"the reply is {len(stripped)} characters without reasoning, over {MAX_JSON_CHARS}"
        )
    decoder = json.JSONDecoder()
    body = _FENCE_OPEN.sub("", stripped, count=1)
    if body.startswith("["):
        try:
            value, _ = decoder.raw_decode(body)
        except (ValueError, RecursionError):
            pass
        else:
            raise InvalidUpdateError(
                f"the reply is a JSON array of {len(value)} items, not an object"
            )
    partial: list[str] | None = None
    error: str | None = None
    position = tried = 0
    while tried < MAX_CANDIDATES:
        match = _OBJECT_START.search(stripped, position)
        if match is None:
            break
        tried += 1
        try:
            value, end = decoder.raw_decode(stripped, match.start())
        except (ValueError, RecursionError) as exc:
            error = error or _decode_problem(exc)
            position = match.start() + 1
            continue
        found, missing = _search(value)
        if found is not None:
            return found
        partial = partial or missing
        position = end
    if partial:
        raise InvalidUpdateError(f"the JSON object lacks {', '.join(partial)}")
    if error is not None:
        raise InvalidUpdateError(f"no complete JSON object in the reply ({error})")
    raise InvalidUpdateError("no JSON object in the reply")


def _decode_problem(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (character {exc.pos})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return str(exc)  # e.g. an integer of more than 4300 digits


def _search(value: Any) -> tuple[dict[str, Any] | None, list[str] | None]:
    """The first object, ``value`` or one nested in it (breadth first), with all the required
    keys; else None and the keys missing from the first object that has some of them."""
    partial: list[str] | None = None
    queue = [value]
    for item in queue:
        if isinstance(item, dict):
            missing = [key for key in _REQUIRED if not any(a in item for a in _KEY_ALIASES[key])]
            if not missing:
                return item, None
            if partial is None and _KNOWN_KEYS.intersection(item):
                partial = missing
            queue.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            queue.extend(v for v in item if isinstance(v, (dict, list)))
    return None, partial


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False)[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "reply"
        problems.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def update_json_schema() -> dict[str, Any]:
    """The JSON Schema of a reply, derived from :class:`MemoryUpdate` (the parser's own models,
    so the two cannot drift), in the form strict structured outputs accept: every property
    required, no other property allowed, no defaults or titles, every section an object (the
    prompt asks for all six). A reply of this shape always parses; the parser still accepts
    more (snake_case keys, sections left out, confidences as strings)."""
    return _schema_copy()


@lru_cache(maxsize=1)
def _schema_json() -> str:
    schema = MemoryUpdate.model_json_schema(mode="validation")
    return json.dumps(_strict(schema))


def _schema_copy() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(_schema_json())
    return result


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: _strict(value)
        for key, value in node.items()
        if key not in ("title", "default", "description", "maxItems")
    }
    branches = out.get("anyOf")
    if isinstance(branches, list) and any("$ref" in branch for branch in branches):
        # An optional section (absent: not proposed) is asked for as an object.
        [out] = [branch for branch in branches if "$ref" in branch]
    if out.get("type") == "object" and isinstance(out.get("properties"), dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out
