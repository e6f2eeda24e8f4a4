"""Updating a stored memory from a finished conversation: prompt, LLM, parse, apply, save.

:meth:`MemoryUpdater.update_memory` loads the scope's memory, asks the LLM once
(:mod:`memory_sql.update.prompt`), reads its reply (:mod:`memory_sql.update.parser`), applies it
(:func:`apply_update`) and saves with ``expected_version``. When another writer saved first,
the memory is loaded again and the same reply applied to it, without asking the LLM again, after
a jittered back-off, up to :data:`MAX_SAVE_ATTEMPTS` saves in all; a run that still loses
returns the reply (``UpdateResult.reply``) so that a later run can apply it without the LLM.

:func:`apply_update` applies a reply, in this order:

1. sections the reply marks ``shouldUpdate`` (with a non-blank summary) are replaced whole,
   stamped ``now``;
2. facts named in ``factsToRemove`` are removed; ids the memory does not hold are ignored and
   logged;
3. new facts are added when their confidence is at least ``min_confidence``, they are not a
   casefold duplicate (:func:`~memory_sql.fact_key`) of a fact kept or of an earlier new fact,
   and they do not mention an uploaded file; each gets a new id, ``source_thread_id`` and
   ``created_at = updated_at = now``;
4. beyond ``max_facts`` facts, the lowest-confidence ones are evicted (on a tie, the oldest);
   facts of ``guaranteed_categories`` go only when no other fact is left; a new fact can be
   evicted at once, and is then not added;
5. upload mentions are scrubbed from every summary and fact
   (:func:`~memory_sql.strip_upload_mentions`).

Between 2 and 3, the aging parts of the reply (:mod:`memory_sql.update.review`): the stale
candidates the prompt offered are removed or extended, facts are confirmed (named in
``factsToReinforce``, or proposed again as a new fact); a new fact's ``expectedValidDays`` is
bounded, and the facts it ``replaces`` are removed with it as their successor; after 3,
near-duplicates are merged (``factsToConsolidate``). Every fact taken out of the memory
(removed, superseded, merged, evicted, scrubbed) is closed by the save, not erased.

Before all of this, the scope gate (:func:`gate_reason`) keeps out every proposed fact and
section rewrite the LLM did not label ``scope: user``, ``durability: durable`` and ``authority:
descriptive``: a rule for one task ("for this report use British spelling") is thread-scoped,
not a fact about the user. A correction fact needs only ``scope: user``, however it is phrased.
Items without labels are kept out too (reason ``label_missing``) unless
``scope_gate_allow_unlabeled`` is set, which stores them as before the gate; an item labelled
durable but written as a rule for the task at hand ("for this report …", "today …") is kept out
as ``one_off``.

What the parser dropped (:mod:`memory_sql.update.parser`), what the gate kept out, and removals
of ids the memory does not hold are counted by reason (:attr:`UpdateResult.rejected`, reasons
in :mod:`memory_sql.update.rejections`), logged at INFO with the counts (DEBUG with each text),
and written with the call's usage row (``memory_llm_rejections``).

Asking again: a reply that cannot be used at all (no JSON object, no part that holds, or cut at
``max_tokens``) is recorded as its own call (outcome ``invalid_reply`` or ``length``, with its
real token counts), then asked for again, up to ``llm_repair_attempts`` times in the run, with
a short message naming the problem (:func:`~memory_sql.update.prompt.repair_prompt`) and the
temperature raised by :data:`REPAIR_TEMPERATURE_STEP` each time (at most
:data:`MAX_REPAIR_TEMPERATURE`). A queue retry of a failed update (its ``attempt`` 2 or more)
starts that much warmer too, so no retry sends the request that already failed.
"""

from __future__ import annotations

import logging
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from ..config import MemoryConfig
from ..errors import (
    DuplicateFactError,
    InvalidUpdateError,
    LLMError,
    StorageError,
    VersionConflictError,
)
from ..intake.filter import filter_messages_for_memory
from ..intake.messages import Message
from ..intake.redact import Redactor, redactor_of
from ..intake.uploads import mentions_upload, strip_upload_mentions
from ..models import Fact, MemoryDocument, Section, fact_key, utcnow
from ..pattern_files import load_patterns
from ..schema import memory_llm_calls, memory_llm_rejections
from ..scope import Scope, check_thread_id
from ..storage import llm_usage
from ..storage.base import MemoryStorage, Seen
from ..storage.capabilities import Capability, has, require
from ..storage.with_save import WithTheSave, with_the_save
from ..tokens import make_token_counter
from . import review
from .dedupe import SemanticDedupe
from .eviction import Heat, evict, needs_heat
from .llm import LLMClient
from .parser import (
    AUTHORITIES,
    DURABILITIES,
    SCOPES,
    MemoryUpdate,
    NewFact,
    SectionUpdate,
    parse_update,
    update_json_schema,
)
from .prompt import build_update_prompt, repair_prompt
from .prompt_facts import facts_for_prompt
from .rejections import Rejection, count, describe

logger = logging.getLogger(__name__)
MAX_SAVE_ATTEMPTS = 6
PROMPT_MATCHES = 200
"""How many of the conversation's best text matches a memory too large for the prompt offers."""
CONFLICT_BACKOFF_SECONDS = 0.05
"""The first back-off after a version conflict; each next one doubles, each a random part of
it (full jitter), so writers that collided do not collide again in step."""
MAX_CONFLICT_BACKOFF_SECONDS = 2.0
REPAIR_TEMPERATURE_STEP = 0.3
"""How much warmer each new try after an unusable reply is."""
MAX_REPAIR_TEMPERATURE = 1.0


@dataclass(frozen=True)
class UpdateResult:
    """What one :meth:`MemoryUpdater.update_memory` did.

    ``ok`` is false when the update failed, ``error`` then says why in one line and nothing was
    stored. Fact ids: ``facts_added`` (new), ``facts_removed`` (named by the LLM, or dropped for
    mentioning an upload), ``facts_evicted`` (over ``max_facts``); ``sections_updated`` names
    the sections rewritten (``work_context`` …). Token counts are the LLM's (0 when it was not
    called or did not say). ``version`` is the stored version afterwards (``None`` when it is
    not known), ``attempts`` the number of saves tried, ``llm_called`` whether the LLM was asked.
    ``conflicted`` marks a run that failed because every save lost to another writer; its
    ``reply`` is the parsed LLM reply, to apply again later without asking the LLM.
    ``rejected`` counts, by reason, the parts of the reply refused: dropped by the parser,
    kept out by the scope gate, or removals of unknown ids (:mod:`~memory_sql.update.rejections`);
    on a failed update too. ``llm_calls`` is how many calls the run made (a repair adds one).
    ``llm_seconds`` is how long the LLM call took (0 when it was not called).

    Aging (:mod:`memory_sql.update.review`): ``facts_confirmed`` (confirmed again),
    ``stale_offered`` (how many stale facts the prompt offered), ``stale_removed`` and
    ``stale_extended`` (of those), ``stale_refused`` (ids the reply named that were not
    offered, or past the removal cap), ``facts_merged`` (the merged facts) and
    ``facts_consolidated`` (their sources, now closed).
    """

    ok: bool
    error: str | None = None
    facts_added: tuple[str, ...] = ()
    facts_removed: tuple[str, ...] = ()
    facts_evicted: tuple[str, ...] = ()
    sections_updated: tuple[str, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    version: int | None = None
    attempts: int = 0
    llm_called: bool = False
    conflicted: bool = False
    reply: MemoryUpdate | None = None
    rejected: dict[str, int] = field(default_factory=dict)
    llm_seconds: float = 0.0
    facts_confirmed: tuple[str, ...] = ()
    stale_offered: int = 0
    stale_removed: tuple[str, ...] = ()
    stale_extended: tuple[str, ...] = ()
    stale_refused: tuple[str, ...] = ()
    facts_merged: tuple[str, ...] = ()
    facts_consolidated: tuple[str, ...] = ()
    llm_calls: int = 0

    @property
    def changed(self) -> bool:
        """Whether the stored memory changed."""
        return bool(
            self.facts_added
            or self.facts_removed
            or self.facts_evicted
            or self.sections_updated
            or self.facts_confirmed
            or self.stale_removed
            or self.stale_extended
            or self.facts_merged
        )


@dataclass(frozen=True)
class AppliedChanges:
    """What :func:`apply_update` changed, and what it left out and why.

    ``ignored_removals`` are ids named for removal that the memory does not hold;
    ``skipped_facts`` are ``(content, reason)`` of proposed facts not added (``"low
    confidence"``, ``"duplicate"``, ``"restates a fact"``, ``"upload"``,
    ``"over max_facts"``); ``gated`` are
    ``(kind, text, reason)`` of the facts and sections (kind ``"fact"`` or ``"section"``) the
    scope gate kept out (:func:`gate_reason`).
    """

    facts_added: tuple[str, ...] = ()
    facts_removed: tuple[str, ...] = ()
    facts_evicted: tuple[str, ...] = ()
    sections_updated: tuple[str, ...] = ()
    ignored_removals: tuple[str, ...] = ()
    skipped_facts: tuple[tuple[str, str], ...] = ()
    gated: tuple[tuple[str, str, str], ...] = ()
    aging: review.ReviewOutcome = field(default_factory=review.ReviewOutcome)
    refused_merges: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        aging = self.aging
        return bool(
            self.facts_added
            or self.facts_removed
            or self.facts_evicted
            or self.sections_updated
            or aging.confirmed
            or aging.stale_removed
            or aging.stale_extended
            or aging.merged
        )


def apply_update(
    memory: MemoryDocument,
    update: MemoryUpdate,
    *,
    thread_id: str | None,
    config: MemoryConfig,
    now: datetime,
    heat: Heat | None = None,
    offer: review.Offer | None = None,
    restated: Mapping[str, str] | None = None,
) -> tuple[MemoryDocument, AppliedChanges]:
    """``memory`` with ``update`` applied by the rules of the module docstring, and what
    changed. ``memory`` itself is not modified; the result keeps its ``version``. ``heat``
    is the facts' access heat, for the hybrid eviction policy; ``offer`` what the prompt
    offered for review (None: what :func:`review.offer` finds in ``memory`` now);
    ``restated`` maps a new fact's text to the live fact it restates in other words
    (:mod:`memory_sql.update.dedupe`): that fact is confirmed instead, unless the new one
    replaces facts."""
    if offer is None:
        offer = review.offer(memory, config, now)
    doc = memory.clone()
    allow = config.update.scope_gate_allow_unlabeled
    gated: list[tuple[str, str, str]] = []
    sections: dict[str, str] = {}
    for name, section in update.proposed_sections().items():
        reason = gate_reason(section, correction=False, allow_unlabeled=allow, text=section.summary)
        if reason is None:
            sections[name] = section.summary
        else:
            gated.append(("section", f"{name}: {section.summary}", reason))
    sections_updated = _update_sections(doc, sections, now)

    wanted = dict.fromkeys(update.facts_to_remove)
    held = {fact.id for fact in doc.facts}
    removed = [fact_id for fact_id in wanted if fact_id in held]
    ignored = tuple(fact_id for fact_id in wanted if fact_id not in held)
    if removed:
        gone = set(removed)
        doc.facts = [fact for fact in doc.facts if fact.id not in gone]

    aging = review.ReviewOutcome()
    review.apply_review(
        doc,
        update.stale_facts_to_remove,
        update.stale_facts_to_extend,
        offer.stale,
        config,
        now,
        aging,
    )
    review.confirm(doc, update.facts_to_reinforce, now, aging)
    longest = review.max_valid_days(config)

    skipped: list[tuple[str, str]] = []
    redactor = redactor_of(config)
    by_key = {_key(fact.content): fact.id for fact in doc.facts} if update.new_facts else {}
    keys = set(by_key)
    new: list[Fact] = []
    replaced: dict[str, str] = {}
    for proposed in update.new_facts:
        reason = gate_reason(
            proposed,
            correction=proposed.category == "correction",
            allow_unlabeled=allow,
            text=proposed.content,
        )
        if reason is not None:
            gated.append(("fact", proposed.content, reason))
            continue
        key = _key(proposed.content)
        if proposed.confidence < config.update.min_confidence:  # the floor itself is accepted
            skipped.append((proposed.content, "low confidence"))
        elif key in keys:
            skipped.append((proposed.content, "duplicate"))
            if key in by_key:  # said again: the user confirms what memory holds
                review.confirm(doc, [by_key[key]], now, aging)
        elif (
            restated
            and not proposed.replaces
            and (same := restated.get(proposed.content)) is not None
            and same in held
            and same not in wanted
        ):
            skipped.append((proposed.content, "restates a fact"))
            review.confirm(doc, [same], now, aging)
        elif mentions_upload(proposed.content):
            skipped.append((proposed.content, "upload"))
        else:
            keys.add(key)
            days = proposed.expected_valid_days
            fact = Fact(
                content=redactor(proposed.content),
                category=proposed.category,
                confidence=proposed.confidence,
                source_thread_id=thread_id,
                source_error=proposed.source_error and redactor(proposed.source_error),
                created_at=now,
                updated_at=now,
                expected_valid_days=None if days is None else min(days, longest),
            )
            new.append(fact)
            for old_id in proposed.replaces:
                replaced.setdefault(old_id, fact.id)
    if removed and any(kind == "fact" for kind, _, _ in gated):
        # A removal is applied only with what replaces it: a new fact was kept out, so the
        # facts this reply removed stay live (the parser holds them back for its refusals).
        back = set(removed)
        doc.facts = sorted(
            [*doc.facts, *(fact for fact in memory.facts if fact.id in back)],
            key=lambda fact: (fact.created_at, fact.id),
        )
        gated.extend(("removal", fact_id, "replacement_refused") for fact_id in removed)
        removed = []
    doc.facts.extend(new)
    replaced = {old: new_id for old, new_id in replaced.items() if old in held}
    if replaced:
        doc.facts = [fact for fact in doc.facts if fact.id not in replaced]
        doc.superseded.update(replaced)
        removed.extend(i for i in replaced if i not in wanted)
    refused_merges = review.consolidate(
        doc, update.facts_to_consolidate, offer.merge_categories, config, now, aging
    )

    evicted = evict(doc, config, now=now, heat=heat)
    new_ids = {fact.id for fact in new}
    gone = set(evicted)
    skipped.extend((f.content, "over max_facts") for f in new if f.id in gone)

    doc, scrubbed_sections, scrubbed_facts = _scrub_uploads(doc)
    gone.update(scrubbed_facts)
    added = tuple(f.id for f in new if f.id not in gone)
    changes = AppliedChanges(
        facts_added=added,
        facts_removed=(*removed, *(i for i in scrubbed_facts if i not in new_ids)),
        facts_evicted=tuple(i for i in evicted if i not in new_ids),
        sections_updated=(
            *sections_updated,
            *(name for name in scrubbed_sections if name not in sections_updated),
        ),
        ignored_removals=ignored,
        skipped_facts=tuple(skipped),
        gated=tuple(gated),
        aging=aging,
        refused_merges=tuple(refused_merges),
    )
    if changes:
        doc.last_updated = now
    return doc, changes


_WANTED = (("scope", "user"), ("durability", "durable"), ("authority", "descriptive"))
_KNOWN_LABELS = {"scope": SCOPES, "durability": DURABILITIES, "authority": AUTHORITIES}


def gate_reason(
    item: NewFact | SectionUpdate,
    *,
    correction: bool,
    allow_unlabeled: bool,
    text: str | None = None,
) -> str | None:
    """Why the scope gate keeps a proposed fact or section rewrite out of memory
    (``thread_scope``, ``project_scope``, ``temporary``, ``transactional``, ``label_missing``,
    ``label_unknown``, ``one_off``), or ``None`` to let it through. The labels must say
    user-scoped, durable and descriptive; a ``correction`` needs only the user scope. A missing
    label is ``label_missing`` unless ``allow_unlabeled``, when it passes. ``text`` (the
    item's), when it reads as a rule for the task at hand, is ``one_off`` whatever the labels."""
    for label, wanted in _WANTED[:1] if correction else _WANTED:
        value = getattr(item, label)
        if value is None:
            if allow_unlabeled:
                continue
            return "label_missing"
        if value == wanted:
            continue
        if value not in _KNOWN_LABELS[label]:
            return "label_unknown"
        return f"{value}_scope" if label == "scope" else value
    if text is not None and one_off(text):
        return "one_off"
    return None


_ONE_OFF = re.compile(
    r"\b(?:for|in|on|during) (?:this|the current|today's|the next) (?:report|task|conversation|"
    r"chat|session|document|doc|email|message|request|reply|answer|draft|ticket|thread|run|"
    r"question|translation|summary|script|file|query|call)\b|\b(?:today|tonight|right now|"
    r"for now|this time|just this once)\b|这次|本次|今天|这份|这一次|此次",
    re.IGNORECASE,
)


def one_off(text: str) -> bool:
    """Whether ``text`` reads as a rule for the task at hand rather than a lasting fact: it
    names this report, task, conversation … or today (English and Chinese)."""
    return _ONE_OFF.search(text) is not None


# The casefold keys of a memory's facts are needed at every update: keep the recent ones.
_key = lru_cache(maxsize=16_384)(fact_key)


def _redacted(redact: Redactor, text: str, role: str) -> str:
    """``text`` redacted; the system message (the update prompt's fixed instructions, the same
    text every call) once per redactor: scanning it was a quarter of a worker's time."""
    return _redacted_once(redact, text) if role == "system" else redact(text)


@lru_cache(maxsize=16)
def _redacted_once(redact: Redactor, text: str) -> str:
    return redact(text)


@lru_cache(maxsize=1)
def _reply_schema() -> Mapping[str, Any]:
    """The reply's JSON Schema (:func:`update_json_schema`), built once and only read (the
    client copies what it sends): decoding a fresh copy for every call was a seventh of a
    worker's time."""
    return MappingProxyType(update_json_schema())


def _update_sections(doc: MemoryDocument, proposed: dict[str, str], now: datetime) -> list[str]:
    updated = []
    for name, summary in proposed.items():
        group = doc.user if hasattr(doc.user, name) else doc.history
        if getattr(group, name).summary != summary:
            setattr(group, name, Section(summary=summary, updated_at=now))
            updated.append(name)
    return updated


def _scrub_uploads(doc: MemoryDocument) -> tuple[MemoryDocument, list[str], list[str]]:
    """``doc`` without upload mentions, the sections that lost some, and the facts dropped."""
    sections = doc.sections()
    dirty = [name for name, section in sections.items() if mentions_upload(section.summary)]
    facts = [fact.id for fact in doc.facts if mentions_upload(fact.content)]
    if not dirty and not facts:
        return doc, [], []
    scrubbed = strip_upload_mentions(doc)
    after = scrubbed.sections()
    changed = [name for name in dirty if after[name].summary != sections[name].summary]
    return scrubbed, changed, facts


class MemoryUpdater:
    """Turns finished conversations into memory updates: one LLM call per conversation.

    ``llm`` defaults to :meth:`LLMClient.from_config(config) <LLMClient.from_config>`, which
    fails at the first update if no model is configured. Safe to share between threads; the
    LLM call is synchronous, meant for worker threads.
    """

    def __init__(
        self, config: MemoryConfig, storage: MemoryStorage, llm: LLMClient | None = None
    ) -> None:
        self.config = config
        self.storage = storage
        self._owns_llm = llm is None
        self.llm = llm if llm is not None else LLMClient.from_config(config)
        self._counter: Any = None
        self.dedupe: SemanticDedupe | None = None
        """Set (by the service) when facts have vectors: new facts restating one are
        confirmations (:mod:`memory_sql.update.dedupe`)."""
        self.failure_log_level = logging.WARNING
        """The level a failed update is logged at: the service lowers it to DEBUG, since its
        queue's worker logs each failed attempt itself (with the attempt and what comes next)."""

    def close(self) -> None:
        """Close the LLM client if this updater made it (the storage is the caller's)."""
        if self._owns_llm:
            self.llm.close()

    def update_memory(
        self,
        messages: Iterable[Any],
        *,
        thread_id: str,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        correction_detected: bool = False,
        reinforcement_detected: bool = False,
    ) -> UpdateResult:
        """Update the memory of the scope from one conversation.

        ``messages`` are raw chat messages (any shape :mod:`memory_sql.intake.messages` reads) or
        :class:`~memory_sql.Message` objects; they are filtered with
        :func:`~memory_sql.filter_messages_for_memory`, then go to :meth:`update_from`.

        Expected failures do not raise: the LLM failing or answering something unusable, the
        storage failing, or :data:`MAX_SAVE_ATTEMPTS` version conflicts in a row give a result
        with ``ok=False`` and ``error`` set (and a log line naming the scope and thread); the
        stored memory is then unchanged.

        Raises:
            InvalidScopeError: a scope argument, or ``thread_id``, is malformed.
            InvalidMessageError: ``messages`` is not a list of messages, or one is malformed.
        """
        scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
        check_thread_id(thread_id)
        conversation = filter_messages_for_memory(
            messages,
            patterns=load_patterns(self.config.patterns_dir),
            redactor=redactor_of(self.config),
        )
        return self.update_from(
            conversation,
            scope,
            thread_id,
            correction_detected=correction_detected,
            reinforcement_detected=reinforcement_detected,
        )

    def update_from(
        self,
        conversation: Sequence[Message],
        scope: Scope,
        thread_id: str,
        *,
        correction_detected: bool = False,
        reinforcement_detected: bool = False,
        reply: MemoryUpdate | None = None,
        in_transaction: Callable[[Any], object] | WithTheSave | None = None,
        context: Sequence[Message] = (),
        attempt: int = 1,
        seen: Seen | None = None,
    ) -> UpdateResult:
        """:meth:`update_memory` of a conversation already filtered (as the queue holds it),
        for a checked ``scope`` and ``thread_id``.

        A conversation with no user turn is not sent to the LLM: the result is ``ok`` with no
        change. ``correction_detected`` and ``reinforcement_detected`` choose the prompt's
        mode. ``reply``, when given, is applied instead of asking the LLM (a reply an earlier
        run parsed, then lost to version conflicts). ``in_transaction`` goes to the save
        (:meth:`SQLStorage.save <memory_sql.storage.SQLStorage.save>`), to commit other
        writes with it; it is not called when the update changes nothing. ``context`` is the
        already-learned exchange before ``conversation`` (the watermark's), shown to the LLM
        marked as such, never learned from. ``attempt`` is the queue's run of this update (2
        or more: a retry, asked at a higher temperature; see the module docstring). ``seen``:
        the memory's stamp as the caller just read it (:meth:`MemoryStorage.load_seen`).
        """
        review_only = False
        if not any(message.role == "user" for message in conversation):
            if reply is not None or not self._review_due(scope):
                logger.debug("memory %s, thread %s: nothing to learn from", scope, thread_id)
                return UpdateResult(ok=True)
            review_only = True  # stale facts wait, and the review interval has passed
            conversation, context = (), ()
        run = _Run(self, scope, thread_id, in_transaction, attempt)
        run.seen = seen
        run.review_only = review_only
        return run.execute(
            conversation, correction_detected, reinforcement_detected, reply, context
        )

    def counter(self) -> Any:
        """The token counter of the review's prompt budget (made once)."""
        if self._counter is None:
            self._counter = make_token_counter(
                self.config.tokens.counting, self.config.tokens.encoding_file
            )
        return self._counter

    def _review_due(self, scope: Scope) -> bool:
        """Whether an update with nothing new to learn still asks the LLM: stale candidates
        wait and the memory's last review (an LLM call that offered some) is at least
        ``staleness_review_interval_hours`` old. Needs the usage table (SQL storage)."""
        hours = self.config.staleness.review_interval_hours
        if hours <= 0 or not self.config.staleness.review_enabled or not _keeps_usage(self.storage):
            return False
        try:
            memory = self.storage.load(**scope.arguments())
            now = utcnow()
            if not review.offer(memory, self.config, now).stale:
                return False
            engine = require(self.storage, Capability.LLM_BUDGETS)
            reviewed = llm_usage.last_review_offered(engine, scope)
        except StorageError as exc:
            logger.warning("memory %s: cannot tell whether a review is due: %s", scope, exc)
            return False
        if reviewed is not None and reviewed.tzinfo is None:
            reviewed = reviewed.replace(tzinfo=timezone.utc)
        return reviewed is None or now - reviewed >= timedelta(hours=hours)


class _Run:
    """One update of one scope: the steps of :meth:`MemoryUpdater.update_memory`."""

    def __init__(
        self,
        updater: MemoryUpdater,
        scope: Scope,
        thread_id: str,
        in_transaction: Callable[[Any], object] | WithTheSave | None,
        attempt: int = 1,
    ) -> None:
        self.config = updater.config
        self.storage = updater.storage
        self.llm = updater.llm
        self.scope = scope
        self.thread_id = thread_id
        self.where = scope.arguments()
        self.in_transaction = in_transaction
        self.attempt = attempt
        self.failure_log_level = updater.failure_log_level
        self.tokens = (0, 0)
        self.llm_called = False
        self.calls = 0
        self.earlier_rejected: Counter[str] = Counter()
        self.call_rejected: dict[str, int] = {}
        self.dropped: tuple[Rejection, ...] = ()
        self.usage: _Usage | None = None
        self.usage_written = False
        self.usage_in_save = False
        self.counter = updater.counter
        self.dedupe = updater.dedupe
        self.review_only = False
        self.seen: Seen | None = None
        self.offer: review.Offer | None = None
        self.aging = review.ReviewOutcome()

    def execute(
        self,
        conversation: Sequence[Message],
        correction: bool,
        reinforcement: bool,
        reply: MemoryUpdate | None,
        context: Sequence[Message] = (),
    ) -> UpdateResult:
        try:
            if self.seen is not None:
                memory = self.storage.load_seen(self.seen, **self.where)
            else:
                memory = self.storage.load(**self.where)
        except StorageError as exc:
            return self.failed(f"cannot load the memory: {exc}")
        if reply is not None:
            return self.save(memory, reply)
        self.offer = review.offer(
            memory, self.config, utcnow(), self.counter(), review_only=self.review_only
        )
        shown = facts_for_prompt(
            memory,
            conversation,
            self.config.update.memory_max_tokens,
            self.counter(),
            lambda terms: self.match(memory, terms),
            first=self.offer.stale,
        )
        prompt = build_update_prompt(
            memory,
            conversation,
            correction=correction,
            reinforcement=reinforcement,
            context=context,
            review=self.offer.text,
            shown=shown,
        )
        # The client's own temperature (an LLMClient's, or the one a wrapper holds).
        base = getattr(getattr(self.llm, "inner", self.llm), "temperature", 0.0)
        warmer = 0
        if self.attempt > 1:  # a queue retry: not the request that already failed
            warmer = self.attempt - 1
        messages = prompt
        tries = 1 + self.config.llm.repair_attempts
        for number in range(1, tries + 1):
            steps = warmer + number - 1
            update, problem = self.ask(messages, _warmer(base, steps) if steps else None)
            if update is not None:
                return self.save(memory, update)
            assert problem is not None
            outcome, error, cut_at = problem
            if number == tries or outcome == "llm_error":
                return self.failed(error, outcome=outcome)
            self.record(outcome, error[:2000])  # this call, before the next one
            self.earlier_rejected.update(self.call_rejected)
            logger.info(
                "memory %s, thread %s: the reply was unusable (%s); asking again (%d of %d)",
                self.scope,
                self.thread_id,
                error,
                number,
                tries - 1,
            )
            messages = repair_prompt(prompt, error, cut_at=cut_at)
        raise AssertionError("unreachable")  # pragma: no cover

    def match(self, memory: MemoryDocument, terms: list[str]) -> Sequence[tuple[str, float]]:
        """The memory's facts holding any of ``terms``, best first; none when the index cannot
        be read (the prompt then shows the newest facts)."""
        try:
            return self.storage.match_facts(memory, self.scope, terms, limit=PROMPT_MATCHES)
        except StorageError as exc:
            logger.warning(
                "memory %s: the prompt's facts chosen without the index: %s", self.scope, exc
            )
            return []

    def ask(
        self, messages: list[dict[str, str]], temperature: float | None
    ) -> tuple[MemoryUpdate | None, tuple[str, str, int | None] | None]:
        """One LLM call and its parsed reply, or ``(None, (outcome, error, cut_at))`` when the
        reply cannot be used (outcome ``llm_error`` when the call itself failed). With no
        model configured nothing is sent, and nothing is counted or recorded as a call."""
        if not self.llm.model:
            self.usage = None
            return None, (
                "llm_error",
                "no memory LLM model configured: nothing was sent; "
                "set model_name (or MEMORY_SQL_MODEL_NAME / OPENAI_MODEL)",
                None,
            )
        self.llm_called = True
        self.calls += 1
        self.usage = None
        self.usage_written = False
        self.call_rejected = {}
        started = time.monotonic()
        try:
            options: dict[str, Any] = {"schema": _reply_schema()}
            if temperature is not None:  # else the client's own
                options["temperature"] = temperature
            # What reaches the LLM is redacted once more: memory written before redaction, a
            # queue row of an older version, or a conversation given as Message objects.
            redact = redactor_of(self.config)
            messages = [
                {**message, "content": _redacted(redact, message["content"], message["role"])}
                for message in messages
            ]
            completion = self.llm.complete(messages, **options)
        except LLMError as exc:
            self.usage = _Usage(self.llm.model or "", 0, 0, False, _ms_since(started))
            return None, ("llm_error", str(exc), None)
        counted = not completion.prompt_tokens and not completion.completion_tokens
        if counted:  # the endpoint reported no usage: count the texts
            counter = make_token_counter(
                self.config.tokens.counting, self.config.tokens.encoding_file
            )
            tokens = (
                sum(counter.count(message["content"]) for message in messages),
                counter.count(completion.text),
            )
        else:
            tokens = (completion.prompt_tokens, completion.completion_tokens)
        self.tokens = (self.tokens[0] + tokens[0], self.tokens[1] + tokens[1])
        self.usage = _Usage(
            completion.model or self.llm.model or "", *tokens, counted, _ms_since(started)
        )
        try:
            update = parse_update(completion.text)
        except InvalidUpdateError as exc:
            self.call_rejected = dict(exc.rejected)
            self.dropped = ()
            if completion.cut:
                return None, ("length", f"the reply was cut at max_tokens ({exc})", tokens[1])
            return None, ("invalid_reply", str(exc), None)
        self.call_rejected = update.rejected
        self.dropped = update.dropped
        if completion.cut:
            # A cut reply that still parsed (a complete object before the cut) is used.
            logger.info(
                "memory %s, thread %s: the reply hit max_tokens but holds a complete update",
                self.scope,
                self.thread_id,
            )
        return update, None

    def save(self, memory: MemoryDocument, update: MemoryUpdate) -> UpdateResult:
        attempts = 0
        restated = None
        if self.dedupe is not None and update.new_facts:
            texts = [fact.content for fact in update.new_facts]
            restated = self.dedupe.restated(memory, self.scope, texts)
        while True:
            heat = None
            if needs_heat(memory, self.config, len(update.new_facts)):
                heat = self.storage.access_heat(self.scope)
            doc, changes = apply_update(
                memory,
                update,
                thread_id=self.thread_id,
                config=self.config,
                now=utcnow(),
                heat=heat,
                offer=self.offer,
                restated=restated,
            )
            self.aging = changes.aging
            self.note_applied(changes)
            if not changes:
                self.log_details(changes)
                return self.result(changes, memory.version, attempts)
            attempts += 1
            self.usage_in_save = False
            try:
                version = self.storage.save(
                    doc, **self.where, expected_version=memory.version, **self.save_options()
                )
            except VersionConflictError as exc:
                if attempts >= MAX_SAVE_ATTEMPTS:
                    return self.failed(
                        f"gave up after {attempts} version conflicts: {exc}",
                        attempts=attempts,
                        conflicted=update,
                        outcome="conflicted",
                    )
                logger.debug("memory %s: %s; applying the update again", self.scope, exc)
                ceiling = CONFLICT_BACKOFF_SECONDS * 2 ** (attempts - 1)
                time.sleep(random.uniform(0, min(ceiling, MAX_CONFLICT_BACKOFF_SECONDS)))
            except (StorageError, DuplicateFactError) as exc:
                return self.failed(
                    f"cannot save the memory: {exc}", attempts=attempts, outcome="save_failed"
                )
            except BaseException as exc:
                # The caller's in_transaction raised (a lost lease …): the save and its usage
                # row rolled back, but the call was made; count it before passing it on.
                self.record("save_failed", " ".join(f"{type(exc).__name__}: {exc}".split()))
                raise
            else:
                self.usage_written = self.usage_in_save
                self.log_details(changes)
                logger.info(
                    "memory %s updated from thread %s: %d facts added, %d removed, "
                    "%d evicted, sections %s (version %d, %d saves)",
                    self.scope,
                    self.thread_id,
                    len(changes.facts_added),
                    len(changes.facts_removed),
                    len(changes.facts_evicted),
                    list(changes.sections_updated),
                    version,
                    attempts,
                )
                return self.result(changes, version, attempts)
            try:
                memory = self.storage.load(**self.where)
            except StorageError as exc:
                return self.failed(
                    f"cannot load the memory: {exc}", attempts=attempts, outcome="save_failed"
                )

    def save_options(self) -> dict[str, Any]:
        """The save's ``in_transaction``: the usage row of this run's LLM call, then the
        caller's own writes, all committed with the save."""
        outer = with_the_save(self.in_transaction)
        if self.usage is None or not _keeps_usage(self.storage):
            return {} if outer is None else {"in_transaction": outer}

        def written() -> None:
            self.usage_in_save = True

        call, rejected = self.usage_rows("ok", None)
        engine = require(self.storage, Capability.LLM_BUDGETS)
        usage = llm_usage.call_with_the_save(engine, call, rejected, written)
        return {"in_transaction": usage if outer is None else usage + outer}

    def usage_rows(
        self, outcome: str, error: str | None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The usage row of this run's LLM call, and the rows of its refused reply parts."""
        usage = self.usage
        assert usage is not None
        ok = outcome == "ok"
        call_id = uuid.uuid4().hex
        call = {
            "tenant_id": self.scope.tenant_id,
            "user_id": self.scope.user_id,
            "agent_name": self.scope.agent_name or "",  # "" for unnamed agents, as stored
            "call_id": call_id,
            "thread_id": self.thread_id,
            "model": usage.model[:256],
            "called_at": utcnow(),
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "tokens_counted": usage.counted,
            "latency_ms": usage.latency_ms,
            "outcome": outcome,
            "error": error,
            "stale_offered": len(self.offer.stale) if self.offer is not None else 0,
            "stale_removed": len(self.aging.stale_removed) if ok else 0,
            "stale_extended": len(self.aging.stale_extended) if ok else 0,
            "facts_merged": len(self.aging.consolidated) if ok else 0,
        }
        rejected = []
        if self.call_rejected and _keeps_table(self.storage, memory_llm_rejections.name):
            rejected = [
                {
                    "tenant_id": self.scope.tenant_id,
                    "user_id": self.scope.user_id,
                    "agent_name": self.scope.agent_name or "",
                    "call_id": call_id,
                    "reason": reason,
                    "items": items,
                }
                for reason, items in self.call_rejected.items()
            ]
        return call, rejected

    def record(self, outcome: str, error: str | None = None) -> None:
        """Write the usage row of this run's LLM call on its own (no save carried it)."""
        if self.usage is None or self.usage_written or not _keeps_usage(self.storage):
            return
        engine = require(self.storage, Capability.LLM_BUDGETS)
        try:
            with engine.begin() as connection:
                llm_usage.record_call(connection, *self.usage_rows(outcome, error))
            self.usage_written = True
        except Exception as exc:  # accounting never fails an update
            logger.warning(
                "memory %s: cannot record the LLM call's usage: %s",
                self.scope,
                " ".join(str(exc).split())[:300],
            )

    def result(self, changes: AppliedChanges, version: int, attempts: int) -> UpdateResult:
        self.record("ok")
        return UpdateResult(
            ok=True,
            facts_added=changes.facts_added,
            facts_removed=changes.facts_removed,
            facts_evicted=changes.facts_evicted,
            sections_updated=changes.sections_updated,
            prompt_tokens=self.tokens[0],
            completion_tokens=self.tokens[1],
            version=version,
            attempts=attempts,
            llm_called=self.llm_called,
            rejected=self.rejected(),
            llm_seconds=self.llm_seconds,
            facts_confirmed=tuple(changes.aging.confirmed),
            stale_offered=len(self.offer.stale) if self.offer is not None else 0,
            stale_removed=tuple(changes.aging.stale_removed),
            stale_extended=tuple(changes.aging.stale_extended),
            stale_refused=tuple(changes.aging.stale_refused),
            facts_merged=tuple(changes.aging.merged),
            facts_consolidated=tuple(changes.aging.consolidated),
            llm_calls=self.calls,
        )

    def failed(
        self,
        error: str,
        *,
        attempts: int = 0,
        conflicted: MemoryUpdate | None = None,
        outcome: str = "save_failed",
    ) -> UpdateResult:
        error = " ".join(error.split())
        self.record(outcome, error[:2000])
        rejected = self.rejected()
        logger.log(
            self.failure_log_level,
            "memory update of %s from thread %s failed: %s",
            self.scope,
            self.thread_id,
            error,
        )
        self.log_rejections(rejected)
        return UpdateResult(
            ok=False,
            error=error,
            prompt_tokens=self.tokens[0],
            completion_tokens=self.tokens[1],
            attempts=attempts,
            llm_called=self.llm_called,
            conflicted=conflicted is not None,
            reply=conflicted,
            rejected=rejected,
            llm_seconds=self.llm_seconds,
            llm_calls=self.calls,
        )

    @property
    def llm_seconds(self) -> float:
        return self.usage.latency_ms / 1000 if self.usage is not None else 0.0

    def note_applied(self, changes: AppliedChanges) -> None:
        """The current call's rejections: the parser's and those of this application."""
        applied = [Rejection(kind, reason, text) for kind, text, reason in changes.gated]
        applied += [Rejection("removal", "unknown_id", i) for i in changes.ignored_removals]
        self.call_rejected = count((*self.dropped, *applied))

    def rejected(self) -> dict[str, int]:
        """Every rejection of the run, by reason, most frequent first."""
        total = Counter(self.earlier_rejected)
        total.update(self.call_rejected)
        return dict(total.most_common())

    def log_rejections(self, rejected: dict[str, int]) -> None:
        if not rejected:
            return
        logger.info(
            "memory %s, thread %s: %d parts of the LLM's reply refused: %s",
            self.scope,
            self.thread_id,
            sum(rejected.values()),
            describe(rejected),
        )
        for item in self.dropped:
            logger.debug(
                "memory %s, thread %s: dropped %s (%s): %.200r",
                self.scope,
                self.thread_id,
                item.kind,
                item.reason,
                item.text,
            )

    def log_details(self, changes: AppliedChanges) -> None:
        self.log_rejections(self.rejected())
        for kind, text, reason in changes.gated:
            logger.debug(
                "memory %s, thread %s: scope gate keeps out %s (%s): %.200r",
                self.scope,
                self.thread_id,
                kind,
                reason,
                text,
            )
        for reason in changes.refused_merges:
            logger.info(
                "memory %s, thread %s: merge refused: %s", self.scope, self.thread_id, reason
            )
        if changes.aging.stale_refused:
            logger.info(
                "memory %s, thread %s: refusing stale-review ids %s (not offered, or over "
                "staleness_max_removals_per_cycle)",
                self.scope,
                self.thread_id,
                list(changes.aging.stale_refused),
            )
        if changes.ignored_removals:
            logger.debug(
                "memory %s, thread %s: ignoring removal of unknown fact ids %s",
                self.scope,
                self.thread_id,
                list(changes.ignored_removals),
            )
        for content, reason in changes.skipped_facts:
            logger.debug(
                "memory %s, thread %s: not adding fact (%s): %.80r",
                self.scope,
                self.thread_id,
                reason,
                content,
            )


@dataclass(frozen=True)
class _Usage:
    """What one LLM call cost."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    counted: bool
    latency_ms: int


def _keeps_usage(storage: MemoryStorage) -> bool:
    """Whether ``storage`` is a SQL database with the usage table (revision 0007 or later);
    checked once per engine. Without it (files, an older schema) usage is not recorded."""
    return _keeps_table(storage, memory_llm_calls.name, "LLM usage")


def _keeps_table(storage: MemoryStorage, table: str, what: str = "refused reply parts") -> bool:
    """Whether ``storage`` is a SQL database with ``table``, checked once per engine; a
    missing one is logged once, saying that ``what`` is not recorded."""
    if not has(storage, Capability.LLM_BUDGETS):
        return False
    return llm_usage.has_table(
        require(storage, Capability.LLM_BUDGETS),
        table,
        lambda: logger.warning(
            "memory_sql: the database has no %s table (upgrade it: memory-sql db upgrade); "
            "%s are not recorded",
            table,
            what,
        ),
    )


def _warmer(base: float, steps: int) -> float:
    """``base`` raised by ``steps`` × :data:`REPAIR_TEMPERATURE_STEP`, at most
    :data:`MAX_REPAIR_TEMPERATURE` (a base already above it is kept)."""
    if steps <= 0:
        return base
    return max(base, min(base + steps * REPAIR_TEMPERATURE_STEP, MAX_REPAIR_TEMPERATURE))


def _ms_since(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))
