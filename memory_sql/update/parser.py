"""Reading the memory LLM's reply: find the JSON object in it, then validate it item by item.

The reply should be one JSON object (the shape is spelled out in :mod:`memory_sql.update.prompt`)::

    {"user": {"workContext": {"summary": "…", "shouldUpdate": true}, …},
     "history": {"recentMonths": {"summary": "…", "shouldUpdate": false}, …},
     "newFacts": [{"content": "…", "category": "preference", "confidence": 0.9,
                   "sourceError": "…"}],
     "factsToRemove": ["fact_1a2b3c4d5e6f"]}

Finding it: ``<think>…</think>`` blocks (and everything before a lone ``</think>``) are dropped;
the first JSON object that has the keys ``user``, ``history`` and ``newFacts`` is taken, whether
it stands alone, sits in a code fence or in prose, or is nested in another object; failing
that, the first object with any of them (a small model may leave one out). A reply that is a
JSON array is refused even if it holds such an object. Raw control characters (newlines, tabs)
inside strings are accepted, as grammar-constrained servers write them. Truncated JSON is not
repaired. A reply longer than :data:`MAX_REPLY_CHARS` (or, once reasoning is dropped,
:data:`MAX_JSON_CHARS`) is refused unread, and at most :data:`MAX_CANDIDATES` places where an
object could start are tried, so a hostile reply costs little time.

Validating it, item by item: each section, each new fact and each removal is checked on its own
with the models below; one that cannot be stored is dropped and recorded with its reason
(:mod:`memory_sql.update.rejections`, in :attr:`MemoryUpdate.dropped`), and the rest is kept.
Only a reply none of whose parts holds fails (:class:`~memory_sql.errors.InvalidUpdateError`,
its ``rejected`` counting why); a reply that proposes nothing (``{"user": {}, "history": {},
"newFacts": []}``) is a valid "nothing to learn".

- ``user`` and ``history`` are objects; each section in them is optional and, when present, an
  object ``{summary: string, shouldUpdate: boolean}``. Section names other than the six known
  are ignored. A summary is empty or storable text (below).
- ``newFacts`` is a list of objects, each with storable ``content`` and a ``confidence``: a
  JSON number, or a string holding one (``"0.9"``); words (``"high"``), booleans, NaN and
  infinities are refused. A confidence outside [0, 1] by at most :data:`CONFIDENCE_TOLERANCE`
  is clamped into it (a model's 1.2 is read as "certain", 1.0); further out it is refused.
  ``category`` defaults to ``context`` and is lower-cased, spaces read as ``_``
  (``"Programming Language"`` is ``programming_language``); ``sourceError`` is an optional
  string (a placeholder there is dropped, not the fact).
- ``factsToRemove`` (optional) is a list of fact ids, as strings or as ``{"id": …}`` objects.
- Aging (:mod:`memory_sql.update.review`, all optional): on a new fact ``expectedValidDays`` (a
  whole number of days; an unusable one is read as not given) and ``replaces`` (ids of the
  facts it corrects); ``factsToReinforce`` (ids), ``staleFactsToRemove`` (``{id, reason}``),
  ``staleFactsToExtend`` (``{id, extendByDays, reason}``, the days clamped into [1,
  :data:`~memory_sql.update.review.MAX_EXTENSION_DAYS`]) and ``factsToConsolidate``
  (``{sourceIds, consolidated: {content, category, confidence}}``). Each id and each item is
  read on its own like a removal: a bad one is dropped and counted, the rest kept.
- NUL characters are removed from every text. Storable text has a letter or digit, is not
  longer than its field's limit, and is no placeholder (:func:`placeholder`): not the
  prompt's example text, not a template word (``"..."``, ``"string"``, ``"fact_id"``), not
  a ``<slot>``.
- Scope-gate labels, on each new fact and each section: ``scope`` (``user`` | ``thread`` |
  ``project``), ``durability`` (``durable`` | ``temporary``), ``authority`` (``descriptive`` |
  ``transactional``). Each is optional here and read lower-cased; a label that is not a string
  is kept as ``"invalid"``. They never drop an item here: the updater's scope gate
  (:func:`memory_sql.update.updater.gate_reason`) decides what a missing or unknown label means.
- Keys may be camelCase or snake_case (``shouldUpdate``/``should_update``, ``newFacts``/
  ``new_facts``, ``workContext``/``work_context``, …); other keys are ignored.

The JSON Schema sent as ``response_format`` (:func:`update_json_schema`) is generated from the
same models, limits included (enums, ``minimum``/``maximum``, ``minLength``/``maxLength``,
``maxItems``): a reply valid under it always parses, and loses no part except one whose text
is a :func:`placeholder` (blank, no letter or digit, a template word), which no schema keyword
says in a form every server takes.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
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
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from ..errors import InvalidUpdateError
from ..intake.instructions import instruction_in
from ..models import HISTORY_SECTIONS, MAX_VALID_DAYS, USER_SECTIONS, check_text, clean_category
from . import review
from .prompt import EXAMPLE_TEXTS
from .rejections import Rejection, count, describe
from .review import FACT_CATEGORIES, MAX_FACT_CHARS

MAX_REPLY_CHARS = 2_000_000
MAX_JSON_CHARS = 300_000
MAX_CANDIDATES = 64
# Bounds sized to real replies (at most 5 new facts measured, benchmarks/bench_reply_sizes.py),
# not 50: a small model given room for 50 repeats an item until cut. New facts keep room for a
# part of a long flush that reveals many (tests/test_service.py learns 60 from 3 parts).
MAX_NEW_FACTS = 32
"""Facts one reply may propose (the schema's ``maxItems``); later ones are dropped."""
MAX_REMOVALS = 20
"""Removals one reply may name (the schema's ``maxItems``); later ones are dropped."""
MAX_REPLACES = 10
"""Ids one new fact may replace (the schema's ``maxItems``); later ones are dropped."""
MAX_AGING_ITEMS = 20
"""Items of each aging list one reply may give (the schema's ``maxItems``); later ones are
dropped."""
MAX_ID_CHARS = 64
MAX_SUMMARY_CHARS = 800
MAX_SOURCE_ERROR_CHARS = 300
CONFIDENCE_TOLERANCE = 0.25
"""How far outside [0, 1] a confidence may be and still be read (clamped into the range)."""

# A letter: what storable text must hold (a lone number such as "1" or "16" is a small model's
# list index, not a fact; issue 34). Not in the JSON Schema: llama.cpp's converter copies a
# ``pattern`` into its grammar without JSON escaping, so a server may reject or mangle it; the
# parser refuses such text instead (as a ``placeholder``, or ``empty`` when blank).
_STORABLE = re.compile(r"[^\W\d_]")

TEMPLATE_WORDS = frozenset(
    {
        "...",
        "…",
        "string",
        "text",
        "content",
        "summary",
        "fact",
        "fact_id",
        "factid",
        "id",
        "none",
        "null",
        "nil",
        "n/a",
        "na",
        "todo",
        "tbd",
        "placeholder",
        "example",
        "sample",
        "value",
        "lorem ipsum",
        "your summary here",
        "fact content",
        "source error",
        "sourceerror",
        "the mistake to avoid",
        "one sentence about the user",
        "the complete new summary",
    }
)
"""Words a model writes when it fills a template instead of answering (compared casefolded,
without surrounding quotes, brackets and dots)."""
_EXAMPLES = frozenset(text.casefold() for text in EXAMPLE_TEXTS)
_SLOT = re.compile(r"\A\s*(?:<[^<>]*>|\{[^{}]*\}|\[[^\[\]]*\])\s*\Z")
_TRIM = " \t\r\n\"'`“”‘’«».,;:!?()[]{}<>*_-"


def placeholder(text: str) -> bool:
    """Whether ``text`` is a stand-in rather than an answer: one of the prompt's example texts
    (:data:`~memory_sql.update.prompt.EXAMPLE_TEXTS`), a template word (:data:`TEMPLATE_WORDS`),
    a lone ``<slot>``, ``{slot}`` or ``[slot]``, or text without a letter (``"..."``, ``"-"``,
    ``"16"``)."""
    stripped = text.strip()
    if not _STORABLE.search(stripped):
        return True
    folded = unicodedata.normalize("NFKC", stripped).casefold()
    if folded in _EXAMPLES or _SLOT.match(folded):
        return True
    return " ".join(folded.strip(_TRIM).split()) in TEMPLATE_WORDS


def _storable(value: str, *, field: str) -> str:
    """``value`` stripped, or a ``placeholder`` / ``empty`` / ``malformed`` error."""
    try:
        check_text(value)
    except ValueError as exc:
        raise PydanticCustomError(
            "malformed", "{field}: {problem}", {"field": field, "problem": str(exc)}
        ) from None
    stripped = value.strip()
    if not stripped:
        raise PydanticCustomError("empty", "{field} is empty", {"field": field})
    if placeholder(stripped):
        raise PydanticCustomError(
            "placeholder",
            "{field} '{text}' is a placeholder",
            {"field": field, "text": stripped[:40]},
        )
    found = instruction_in(stripped)
    if found is not None:
        raise PydanticCustomError(
            "instruction",
            "{field} is worded as an instruction to the assistant ('{text}')",
            {"field": field, "text": found[:40]},
        )
    return stripped


def _no_nul(value: Any) -> Any:
    """``value`` without NUL characters, which no database stores in text (a model's stray
    control character, not content)."""
    return value.replace("\x00", "") if isinstance(value, str) else value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


SCOPES = ("user", "thread", "project")
DURABILITIES = ("durable", "temporary")
AUTHORITIES = ("descriptive", "transactional")


def _enum(values: tuple[str, ...]) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "enum": list(values)})


ScopeLabel = Annotated[str | None, _enum(SCOPES)]
DurabilityLabel = Annotated[str | None, _enum(DURABILITIES)]
AuthorityLabel = Annotated[str | None, _enum(AUTHORITIES)]


def _read_label(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str):
        return "invalid"
    return value.strip().lower() or None


_LABELS = ("scope", "durability", "authority")


class SectionUpdate(_Strict):
    """What the LLM says about one summary section (a reply part of its own)."""

    summary: StrictStr = Field(default="", max_length=MAX_SUMMARY_CHARS)
    should_update: StrictBool = Field(
        default=False, validation_alias=AliasChoices("shouldUpdate", "should_update")
    )
    # The scope-gate labels (None: not given), after the content so the model writes it first.
    scope: ScopeLabel = None
    durability: DurabilityLabel = None
    authority: AuthorityLabel = None

    _labels = field_validator(*_LABELS, mode="before")(_read_label)

    @field_validator("summary", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        value = _no_nul(value)
        if value is None or (isinstance(value, str) and not value.strip()):
            return ""
        if isinstance(value, str) and placeholder(value):
            return _storable(value, field="summary")
        return value

    @field_validator("summary")
    @classmethod
    def _text(cls, value: str) -> str:
        return _storable(value, field="summary") if value.strip() else ""


def _section_field(name: str) -> Any:
    return Field(default=None, validation_alias=AliasChoices(_camel(name), name))


def _list_field(name: str, limit: int) -> Any:
    return Field(
        default_factory=list, validation_alias=AliasChoices(_camel(name), name), max_length=limit
    )


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


_Category = Annotated[str, WithJsonSchema({"type": "string", "enum": list(FACT_CATEGORIES)})]
_Id = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)]
_ValidDays = Annotated[
    int | None,
    WithJsonSchema(
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_VALID_DAYS}, {"type": "null"}]}
    ),
]


class NewFact(_Strict):
    """A fact the LLM proposes to remember (a reply part of its own)."""

    content: StrictStr = Field(min_length=1, max_length=MAX_FACT_CHARS)
    category: _Category = "context"
    confidence: float = Field(ge=0.0, le=1.0)
    source_error: StrictStr | None = Field(
        default=None,
        validation_alias=AliasChoices("sourceError", "source_error"),
        max_length=MAX_SOURCE_ERROR_CHARS,
    )
    scope: ScopeLabel = None
    durability: DurabilityLabel = None
    authority: AuthorityLabel = None
    expected_valid_days: _ValidDays = Field(
        default=None, validation_alias=AliasChoices("expectedValidDays", "expected_valid_days")
    )
    replaces: list[_Id] = Field(default_factory=list, max_length=MAX_REPLACES)

    _labels = field_validator(*_LABELS, mode="before")(_read_label)
    _valid_days = field_validator("expected_valid_days", mode="before")(review.read_valid_days)

    @field_validator("content", mode="before")
    @classmethod
    def _content_before(cls, value: Any) -> Any:
        value = _no_nul(value)
        if isinstance(value, str) and (not value.strip() or placeholder(value)):
            return _storable(value, field="content")
        return value

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        return _storable(value, field="content")

    @field_validator("category", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise PydanticCustomError("category_invalid", "category is not text")
        if isinstance(value, str):  # "Programming Language" is read as programming_language
            value = re.sub(r"\s+", "_", value.strip())
        try:
            return clean_category(value)
        except ValueError as exc:
            raise PydanticCustomError(
                "category_invalid", "{problem}", {"problem": str(exc)}
            ) from None

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise PydanticCustomError(
                "confidence_invalid",
                "confidence must be a number, not {kind}",
                {"kind": type(value).__name__},
            )
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise PydanticCustomError(
                    "confidence_invalid",
                    "confidence '{text}' is not a number",
                    {"text": value[:20]},
                ) from None
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise PydanticCustomError("confidence_invalid", "confidence is not finite")
        if not -CONFIDENCE_TOLERANCE <= value <= 1.0 + CONFIDENCE_TOLERANCE:
            raise PydanticCustomError(
                "confidence_out_of_range",
                "confidence {value} is not between 0 and 1",
                {"value": value},
            )
        return min(max(value, 0.0), 1.0)

    @field_validator("source_error", mode="before")
    @classmethod
    def _source_error_before(cls, value: Any) -> Any:
        return _no_nul(value)

    @field_validator("source_error")
    @classmethod
    def _source_error(cls, value: str | None) -> str | None:
        if value is None:
            return None
        text = check_text(value).strip()
        return None if not text or placeholder(text) else text


class MemoryUpdate(_Strict):
    """A validated reply of the memory LLM (see the module docstring for the JSON).

    ``dropped`` lists the parts the parser refused; it is not part of the JSON (a stored reply,
    applied again after version conflicts, does not count them twice)."""

    user: UserUpdate
    history: HistoryUpdate
    new_facts: list[NewFact] = Field(
        validation_alias=AliasChoices("newFacts", "new_facts"), max_length=MAX_NEW_FACTS
    )
    facts_to_remove: list[_Id] = _list_field("facts_to_remove", MAX_REMOVALS)
    facts_to_reinforce: list[_Id] = _list_field("facts_to_reinforce", MAX_AGING_ITEMS)
    stale_facts_to_remove: list[review.StaleRemoval] = _list_field(
        "stale_facts_to_remove", MAX_AGING_ITEMS
    )
    stale_facts_to_extend: list[review.StaleExtension] = _list_field(
        "stale_facts_to_extend", MAX_AGING_ITEMS
    )
    facts_to_consolidate: list[review.Consolidation] = _list_field(
        "facts_to_consolidate", MAX_AGING_ITEMS
    )
    dropped: SkipJsonSchema[tuple[Rejection, ...]] = Field(default=(), exclude=True)

    _ids = field_validator("facts_to_remove", "facts_to_reinforce", mode="before")(review.read_ids)

    @field_validator(
        "stale_facts_to_remove", "stale_facts_to_extend", "facts_to_consolidate", mode="before"
    )
    @classmethod
    def _none_is_no_list(cls, value: Any) -> Any:
        if isinstance(value, list):  # a bare id stands for {"id": …}
            return [{"id": item} if isinstance(item, str) else item for item in value]
        return [] if value is None else value

    @property
    def rejected(self) -> dict[str, int]:
        """:attr:`dropped` counted by reason."""
        return count(self.dropped)

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
        return {name: section.summary for name, section in self.proposed_sections().items()}


def _removal_id(item: Any) -> Any:
    if isinstance(item, dict):
        return item.get("id", item.get("factId", item.get("fact_id")))
    return item


def parse_update(text: str) -> MemoryUpdate:
    """The memory update in the LLM's reply ``text``, its unusable parts dropped (and listed
    in :attr:`MemoryUpdate.dropped`).

    Raises:
        InvalidUpdateError: no JSON object with ``user``, ``history`` or ``newFacts`` is found,
            or none of its parts holds; the reason names what is wrong, ``rejected`` counts
            the parts refused.
    """
    if not isinstance(text, str):
        raise InvalidUpdateError(f"the reply is {type(text).__name__}, not text")
    if len(text) > MAX_REPLY_CHARS:
        raise InvalidUpdateError(f"the reply is {len(text)} characters, over {MAX_REPLY_CHARS}")
    return read_update(_find_object(_drop_reasoning(text)))


def read_update(data: dict[str, Any]) -> MemoryUpdate:
    """The update in the reply object ``data``, read part by part (the module docstring)."""
    reading = _Reading()
    user = reading.group(UserUpdate, USER_SECTIONS, _pick(data, "user"), "user")
    history = reading.group(HistoryUpdate, HISTORY_SECTIONS, _pick(data, "history"), "history")
    facts = reading.facts(_pick(data, "newFacts", "new_facts"))
    removals = reading.ids("removal", _pick(data, "factsToRemove", "facts_to_remove"), MAX_REMOVALS)
    if removals and any(item.kind == "fact" for item in reading.dropped):
        # A removal is applied only with what replaces it: a new fact of this reply was
        # refused, so its removals are held back, the old facts kept (and counted).
        for fact_id in removals:
            reading.dropped.append(Rejection("removal", "replacement_refused", fact_id))
        removals = []
    reinforced = reading.ids(
        "reinforcement", _pick(data, "factsToReinforce", "facts_to_reinforce"), MAX_AGING_ITEMS
    )
    stale_removals = reading.items(
        "stale_removal",
        review.StaleRemoval,
        _pick(data, "staleFactsToRemove", "stale_facts_to_remove"),
    )
    stale_extensions = reading.items(
        "stale_extension",
        review.StaleExtension,
        _pick(data, "staleFactsToExtend", "stale_facts_to_extend"),
    )
    consolidations = reading.items(
        "consolidation",
        review.Consolidation,
        _pick(data, "factsToConsolidate", "facts_to_consolidate"),
    )
    if reading.dropped and not reading.kept:
        counts = count(reading.dropped)
        first = reading.problems[0] if reading.problems else ""
        raise InvalidUpdateError(
            f"no usable part in the reply ({describe(counts)}; {first})".replace("; )", ")"),
            rejected=counts,
        )
    return MemoryUpdate(
        user=user,
        history=history,
        new_facts=facts,
        facts_to_remove=removals,
        facts_to_reinforce=reinforced,
        stale_facts_to_remove=stale_removals,
        stale_facts_to_extend=stale_extensions,
        facts_to_consolidate=consolidations,
        dropped=tuple(reading.dropped),
    )


_MISSING = object()


def _pick(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in data:
            return data[key]
    return _MISSING


class _Reading:
    """What one :func:`read_update` kept and dropped so far."""

    def __init__(self) -> None:
        self.dropped: list[Rejection] = []
        self.problems: list[str] = []
        self.kept = 0

    def drop(self, kind: str, reason: str, text: Any, problem: str) -> None:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)[:200]
        self.dropped.append(Rejection(kind, reason, " ".join(str(shown).split())[:200]))
        self.problems.append(problem)

    def group(self, model: type[_Strict], names: tuple[str, ...], value: Any, where: str) -> Any:
        if value is _MISSING or value is None:
            return model()
        if not isinstance(value, dict):
            self.drop("section", "malformed", value, f"{where} is not an object")
            return model()
        sections: dict[str, SectionUpdate] = {}
        for name in names:
            raw = _pick(value, _camel(name), name)
            if raw is _MISSING or raw is None:
                continue
            try:
                sections[name] = SectionUpdate.model_validate(raw)
            except ValidationError as exc:
                self.drop(
                    "section",
                    _reason(exc),
                    _text_of(raw, "summary"),
                    _describe(exc, f"{where}.{_camel(name)}"),
                )
            else:
                self.kept += 1
        return model(**sections)

    def facts(self, value: Any) -> list[NewFact]:
        if value is _MISSING or value is None:
            return []
        if not isinstance(value, list):
            self.drop("fact", "malformed", value, "newFacts is not a list")
            return []
        facts: list[NewFact] = []
        for position, raw in enumerate(value):
            if len(facts) >= MAX_NEW_FACTS:
                self.drop(
                    "fact", "too_many", _text_of(raw, "content"), f"over {MAX_NEW_FACTS} facts"
                )
                continue
            replaces = _MISSING
            if isinstance(raw, dict) and "replaces" in raw:  # read once the fact holds
                raw = dict(raw)
                replaces = raw.pop("replaces")
            try:
                fact = NewFact.model_validate(raw)
            except ValidationError as exc:
                self.drop(
                    "fact",
                    _reason(exc),
                    _text_of(raw, "content"),
                    _describe(exc, f"newFacts.{position}"),
                )
            else:
                self.kept += 1
                ids = self.ids("replacement", replaces, MAX_REPLACES, part=False)
                facts.append(fact.model_copy(update={"replaces": ids}) if ids else fact)
        return facts

    def ids(self, kind: str, value: Any, limit: int, *, part: bool = True) -> list[str]:
        """The usable fact ids of the list ``value`` (strings or ``{"id": …}``), at most
        ``limit``; each other one dropped as a ``kind``. ``part``: each id kept is a part of
        the reply (not so a new fact's ``replaces``, which belong to the fact)."""
        if value is _MISSING or value is None:
            return []
        if not isinstance(value, list):
            self.drop(kind, "malformed", value, f"the {kind} ids are not a list")
            return []
        ids: list[str] = []
        for raw in value:
            item = _no_nul(_removal_id(raw))
            if not isinstance(item, str):
                self.drop(kind, "malformed", raw, "a fact id is not a string")
                continue
            item = item.strip()
            if not item:
                reason, problem = "empty", "a fact id is empty"
            elif len(ids) >= limit:
                reason, problem = "too_many", f"over {limit} {kind} ids"
            elif len(item) > MAX_ID_CHARS:
                reason, problem = "too_long", f"fact id {item[:40]!r}… is too long"
            elif placeholder(item):
                reason, problem = "placeholder", f"fact id {item[:40]!r} is a placeholder"
            else:  # an id the memory does not hold is refused when applied
                ids.append(item)
                self.kept += part
                continue
            self.drop(kind, reason, item, problem)
        return ids

    def items(self, kind: str, model: type[BaseModel], value: Any) -> list[Any]:
        """The aging items of the list ``value`` that hold, at most :data:`MAX_AGING_ITEMS`;
        each other one dropped as a ``kind``."""
        if value is _MISSING or value is None:
            return []
        if not isinstance(value, list):
            self.drop(kind, "malformed", value, f"the {kind} items are not a list")
            return []
        kept: list[Any] = []
        for position, raw in enumerate(value):
            raw = {"id": raw} if isinstance(raw, str) else _no_nuls(raw)
            if len(kept) >= MAX_AGING_ITEMS:
                self.drop(kind, "too_many", raw, f"over {MAX_AGING_ITEMS} {kind} items")
                continue
            try:
                item = model.model_validate(raw)
            except ValidationError as exc:
                self.drop(kind, _reason(exc), raw, _describe(exc, f"{kind}.{position}"))
                continue
            texts = [item.id] if hasattr(item, "id") else [*getattr(item, "source_ids", ())]
            if isinstance(item, review.Consolidation):
                texts.append(item.consolidated.content)
            bad = next((text for text in texts if placeholder(text)), None)
            if bad is not None:
                reason = "placeholder" if bad.strip() else "empty"
                self.drop(kind, reason, bad, f"{kind}.{position}: {bad[:40]!r} is a placeholder")
                continue
            kept.append(item)
            self.kept += 1
        return kept


def _no_nuls(value: Any) -> Any:
    """``value`` (JSON) without NUL characters in any text."""
    if isinstance(value, dict):
        return {key: _no_nuls(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_no_nuls(item) for item in value]
    return _no_nul(value)


_ERROR_REASONS = {
    "string_too_long": "too_long",
    "too_long": "too_long",
    "string_pattern_mismatch": "placeholder",
    "string_too_short": "empty",
    "less_than_equal": "confidence_out_of_range",
    "greater_than_equal": "confidence_out_of_range",
}


def _reason(exc: ValidationError) -> str:
    """The rejection reason of the first error of ``exc``."""
    error = exc.errors(include_url=False, include_input=False)[0]
    kind = error["type"]
    if kind in (
        "malformed",
        "empty",
        "placeholder",
        "instruction",
        "confidence_invalid",
        "confidence_out_of_range",
        "category_invalid",
    ):
        return kind
    if error["loc"] and error["loc"][0] == "confidence":
        return "confidence_out_of_range" if kind in _ERROR_REASONS else "confidence_invalid"
    return _ERROR_REASONS.get(kind, "malformed")


def _text_of(raw: Any, key: str) -> Any:
    if isinstance(raw, dict):
        return raw.get(key, raw)
    return raw


_REQUIRED = ("user", "history", "newFacts")
_KEY_ALIASES = {"user": ("user",), "history": ("history",), "newFacts": ("newFacts", "new_facts")}
_KNOWN_KEYS = frozenset(
    {
        "user",
        "history",
        "newFacts",
        "new_facts",
        "factsToRemove",
        "facts_to_remove",
        "factsToReinforce",
        "staleFactsToRemove",
        "staleFactsToExtend",
        "factsToConsolidate",
    }
)
_THINK_START = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_THINK_END = re.compile(r"</think(?:ing)?>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"\A```[\w-]*\s*")
# Where an object may start: "{" then a key or "}".
_OBJECT_START = re.compile(r"\{\s*[\"}]")


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
    decoder = json.JSONDecoder(strict=False)  # raw newlines and tabs inside strings
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
    partial: dict[str, Any] | None = None
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
        found, some = _search(value)
        if found is not None:
            return found
        partial = partial or some
        position = end
    if partial is not None:
        return partial
    if error is not None:
        raise InvalidUpdateError(f"no complete JSON object in the reply ({error})")
    raise InvalidUpdateError("no JSON object in the reply")


def _decode_problem(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (character {exc.pos})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return str(exc)  # e.g. an integer of more than 4300 digits


def _search(value: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The first object, ``value`` or one nested in it (breadth first), with all the required
    keys; else None and the first object that has some of them (or None)."""
    partial: dict[str, Any] | None = None
    queue = [value]
    for item in queue:
        if isinstance(item, dict):
            missing = [key for key in _REQUIRED if not any(a in item for a in _KEY_ALIASES[key])]
            if not missing:
                return item, None
            if partial is None and _KNOWN_KEYS.intersection(item):
                partial = item
            queue.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            queue.extend(v for v in item if isinstance(v, (dict, list)))
    return None, partial


def _describe(exc: ValidationError, where: str) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    field = ".".join(str(part) for part in error["loc"])
    place = f"{where}.{field}" if field else where
    return f"{place}: {error['msg'].removeprefix('Value error, ')}"


def update_json_schema() -> dict[str, Any]:
    """The JSON Schema of a reply, derived from :class:`MemoryUpdate` (the parser's own models,
    so the two cannot drift), in the form strict structured outputs accept: every property
    required, no other property allowed, no defaults or titles, every section an object (the
    prompt asks for all six). It keeps the models' limits: the label and category enums, the
    confidence's ``minimum``/``maximum``, texts' ``minLength``/``maxLength``, the
    lists' ``maxItems``. A reply valid under it always parses and loses no part except one
    whose text is a :func:`placeholder`; the parser still accepts more (snake_case keys,
    sections left out, confidences as strings or a little out of range)."""
    result: dict[str, Any] = json.loads(_schema_json())
    return result


@lru_cache(maxsize=1)
def _schema_json() -> str:
    schema = MemoryUpdate.model_json_schema(mode="validation")
    return json.dumps(_strict(schema))


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: _strict(value)
        for key, value in node.items()
        if key not in ("title", "default", "description")
    }
    branches = out.get("anyOf")
    if isinstance(branches, list) and any("$ref" in branch for branch in branches):
        # An optional section (absent: not proposed) is asked for as an object.
        [out] = [branch for branch in branches if "$ref" in branch]
    if out.get("type") == "object" and isinstance(out.get("properties"), dict):
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out
