"""The storage contract every backend fulfils, and the change set a save writes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress, islice
from operator import attrgetter, is_not
from types import TracebackType
from typing import Any, ClassVar, Protocol

from ..errors import CapabilityMissingError, DuplicateFactError
from ..models import Fact, MemoryDocument, Section, copy_model, new_fact_id
from ..scope import Scope
from .capabilities import Capability
from .search import score_in_memory
from .with_save import WithTheSave


class WriteGuard(Protocol):
    """What every save passes the text it writes through (new and changed facts, changed
    sections): the text to store, or an error refusing the save. Installed on the storage
    (:attr:`MemoryStorage.write_guard`) by a layer above, which holds the rules
    (:mod:`memory_sql.intake.guard`)."""

    def fact(self, scope: Scope, fact: Fact, counts: dict[str, int]) -> Fact:
        """``fact`` as it may be stored (its text made safe, what was redacted added to
        ``counts`` by kind), or raise ``ValueError``."""
        ...

    def section(self, scope: Scope, name: str, section: Section, counts: dict[str, int]) -> Section:
        """``section`` as it may be stored (as :meth:`fact`), or raise ``ValueError``."""
        ...

    def saved(self, scope: Scope, counts: dict[str, int]) -> None:
        """A save that redacted ``counts`` (kind → number) was stored."""
        ...


@dataclass(frozen=True)
class Seen:
    """A memory's stamp as a statement of the caller's just read it (the queue's claim does,
    with each row): its version and creation time, None when nothing was stored."""

    stamp: tuple[int, datetime] | None


class MemoryStorage(ABC):
    """Versioned storage of memory documents, one per :class:`~memory_sql.Scope`.

    Every method validates its scope arguments first and raises
    :class:`~memory_sql.InvalidScopeError` (a ``ValueError``) naming the bad field; nothing is
    read or written for an invalid scope. ``tenant_id`` and ``user_id`` default to ``"default"``;
    ``agent_name=None`` is the memory of unnamed agents. Implementations are safe to share
    between threads.

    ``capabilities`` lists what the backend can do beyond this contract
    (:mod:`memory_sql.storage.capabilities`); a call needing one it lacks raises
    :class:`~memory_sql.errors.CapabilityMissingError`.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    default_write_guard: ClassVar[WriteGuard | None] = None
    """The guard of every storage that was given none (installed by ``memory_sql``'s package:
    the redactor and the instruction rule with their default settings)."""
    write_guard: WriteGuard | None = None
    """The guard this storage's saves pass new and changed text through (None: the default)."""

    @property
    def guard(self) -> WriteGuard | None:
        return self.write_guard if self.write_guard is not None else self.default_write_guard

    def load(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        as_of: datetime | None = None,
    ) -> MemoryDocument:
        """The stored document of a scope, with its ``version``: its live facts.

        A scope with nothing stored gives an empty document at version 0. Facts come ordered by
        ``created_at``, then ``id``. The document returned is the caller's to change: it shares
        nothing with the backend's cache.

        ``as_of`` (an aware datetime) reads the past instead: the facts believed at that
        moment (``valid_from <= as_of`` and not closed by then), closed ones with their
        ``valid_to`` and ``superseded_by``; sections keep no history and are today's. Such a
        document is a view of the past and cannot be saved (its ``version`` is 0).

        Raises:
            InvalidScopeError: a scope argument is malformed.
            ValueError: ``as_of`` has no time zone.
            StorageError: the backend could not be read (database down, corrupt file).
            NotImplementedError: ``as_of`` on a backend that keeps no past facts.
        """
        scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
        if as_of is None:
            return self._load(scope)
        if not isinstance(as_of, datetime) or as_of.tzinfo is None:
            raise ValueError("as_of must be a datetime with a time zone")
        return self._load_as_of(scope, as_of)

    def load_seen(
        self,
        seen: Seen,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
    ) -> MemoryDocument:
        """:meth:`load`, for a caller that read the memory's stamp a moment ago (``seen``): a
        backend that caches documents hands out the one it holds at that stamp (or an empty
        one when nothing was stored) without reading. Such a document may be a moment old; a
        save from it is refused (:class:`~memory_sql.errors.VersionConflictError`) if the
        memory moved since, as any save from an old version is. Here: :meth:`load`.

        Raises:
            as :meth:`load`.
        """
        return self.load(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)

    def _load_as_of(self, scope: Scope, as_of: datetime) -> MemoryDocument:
        raise CapabilityMissingError(Capability.HISTORY.value, type(self).__name__, "as_of")

    def purge_closed(self, older_than: datetime, *, tenant_id: str | None = None) -> int:
        """Delete the closed facts (past versions) closed before ``older_than``, of every
        memory (or of ``tenant_id``'s); returns how many. A backend that keeps none has none.

        Raises:
            StorageError: the backend could not be written.
        """
        return 0

    def save(
        self,
        doc: MemoryDocument,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        tenant_id: str | None = None,
        expected_version: int | None = None,
        in_transaction: Callable[[Any], object] | WithTheSave | None = None,
    ) -> int:
        """Store ``doc`` as the scope's memory if its stored version is still ``expected_version``.

        ``expected_version`` defaults to ``doc.version``. The save is all or nothing; facts new
        or changed since ``expected_version`` get ``updated_at`` set to now. A document equal to
        what is stored writes nothing and keeps the version. ``doc`` itself is not modified.

        Returns:
            The new stored version: ``expected_version + 1``, or ``expected_version`` when
            nothing changed.

        Raises:
            VersionConflictError: the stored version is no longer ``expected_version``; load
                again, re-apply the change, and save with the new version.
            DuplicateFactError: two facts of ``doc`` have the same casefold key.
            ValueError: two facts of ``doc`` share an ``id``.
            InvalidScopeError: a scope argument is malformed.
            StorageError: the backend could not be written; nothing was stored.
            CapabilityMissingError: ``in_transaction`` was given to a backend without the
                ``transactional_save`` capability (it is called, with the save's connection,
                after the rows are written and before the commit: what it writes commits with
                the save, and what it raises rolls the save back).
        """
        if in_transaction is not None:
            raise CapabilityMissingError(
                Capability.TRANSACTIONAL_SAVE.value, type(self).__name__, "save(in_transaction=…)"
            )
        scope, expected = _checked_save(doc, user_id, agent_name, tenant_id, expected_version)
        return self._save(scope, doc, expected)

    def match_facts(
        self, doc: MemoryDocument, scope: Scope, terms: Sequence[str], *, limit: int = 100
    ) -> list[tuple[str, float]]:
        """The ids of up to ``limit`` facts of ``doc`` (the memory of ``scope`` as just loaded)
        that hold any of ``terms`` (:func:`memory_sql.text_search.query_terms`), each with its
        BM25 score, best first. A backend with a full-text index asks it (the ids may then
        include facts saved since ``doc`` was loaded); this one scores ``doc`` itself.

        Raises:
            StorageError: the backend could not be read.
        """
        return score_in_memory(doc.facts, terms, limit=limit)

    def record_access(self, counts: Mapping[tuple[Scope, str], tuple[int, datetime]]) -> None:  # noqa: B027
        """Add to the access heat of facts (``(scope, fact id)``: times shown, last shown); a
        backend that keeps none ignores it. Facts gone since are skipped.

        Raises:
            StorageError: the backend could not be written.
        """

    def access_heat(self, scope: Scope) -> dict[str, tuple[int, datetime | None]]:
        """The access heat of the memory's facts that were ever shown: fact id → (times shown,
        last shown). A backend that keeps none has none.

        Raises:
            StorageError: the backend could not be read.
        """
        return {}

    def close(self) -> None:  # noqa: B027 - backends with nothing to release need not override
        """Release connections and files. The storage must not be used afterwards."""

    def __enter__(self) -> MemoryStorage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @abstractmethod
    def _load(self, scope: Scope) -> MemoryDocument: ...

    @abstractmethod
    def _save(self, scope: Scope, doc: MemoryDocument, expected_version: int) -> int: ...


def _checked_save(
    doc: MemoryDocument,
    user_id: str | None,
    agent_name: str | None,
    tenant_id: str | None,
    expected_version: int | None,
    *,
    fact_ids: bool = True,
) -> tuple[Scope, int]:
    """The scope and expected version of a :meth:`MemoryStorage.save`, its arguments checked,
    and (``fact_ids``) that no two facts share an id: a backend whose store refuses a
    repeated id itself may leave that to :func:`check_fact_ids` once the store refused."""
    scope = Scope.of(user_id=user_id, agent_name=agent_name, tenant_id=tenant_id)
    expected = doc.version if expected_version is None else expected_version
    if expected < 0:
        raise ValueError(f"expected_version must be >= 0, not {expected}")
    if fact_ids:
        check_fact_ids(scope, doc)
    return scope, expected


def check_fact_ids(scope: Scope, doc: MemoryDocument) -> None:
    """Raise ``ValueError`` naming the first fact id of ``doc`` that appears twice."""
    if len(set(map(_ID, doc.facts))) != len(doc.facts):
        ids = list(map(_ID, doc.facts))
        repeated = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"memory {scope}: fact id {repeated!r} appears twice")


@dataclass
class Changes:
    """What a save must write to turn the stored document ``base`` into ``doc``."""

    inserted: list[Fact] = field(default_factory=list)
    updated: list[Fact] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    sections: dict[str, Section] = field(default_factory=dict)
    rekeyed: set[str] = field(default_factory=set)
    """Ids of updated facts whose casefold key changed."""
    removed: dict[str, Fact] = field(default_factory=dict)
    """The deleted facts as they were, by id."""
    superseded: dict[str, str] = field(default_factory=dict)
    """Of the deleted facts, those another took the place of: its id, by theirs."""
    previous: dict[str, Fact] = field(default_factory=dict)
    """The updated facts as they were, by id."""
    archived: list[Fact] = field(default_factory=list)
    """The earlier text of facts whose text changed, as closed versions to insert (a past
    view shows them; the live fact keeps its id)."""
    positions: dict[str, int] = field(default_factory=dict)
    """Where each updated fact's id stands in the base document's facts."""
    redactions: dict[str, int] = field(default_factory=dict)
    """Secrets the write guard replaced in the new text, by kind (counted with the save)."""

    def __bool__(self) -> bool:
        return bool(self.inserted or self.updated or self.deleted or self.sections)


_FACT_FIELDS = (
    "content",
    "category",
    "confidence",
    "source_thread_id",
    "source_error",
    "expected_valid_days",
    "confirmed_at",
    "confirmation_count",
    "valid_from",
)


def _moved(base: list[Fact], facts: list[Fact]) -> tuple[list[int], list[int]]:
    """Where ``facts`` (a document loaded as ``base`` and then changed) stops holding the
    very objects of ``base`` position by position: the indexes of ``base`` and of ``facts``
    to compare by id. A fact changed in place, or one appended, leaves every other position
    alike, found at C speed rather than one fact at a time."""
    common = min(len(base), len(facts))
    differ = list(islice(compress(range(common), map(is_not, base, facts)), _FEW + 1))
    if len(differ) > _FEW:  # shifted (a fact taken out or put in early on): compare them all
        return list(range(len(base))), list(range(len(facts)))
    return differ + list(range(common, len(base))), differ + list(range(common, len(facts)))


_FEW = 8


def diff_documents(
    base: MemoryDocument,
    doc: MemoryDocument,
    now: datetime,
    guard: WriteGuard | None = None,
    scope: Scope | None = None,
) -> Changes:
    """The change set from ``base`` to ``doc``, with ``updated_at`` stamped ``now`` on new and
    changed facts and on changed sections whose ``updated_at`` the caller left as it was.
    New facts, facts whose text changed and changed sections go through ``guard`` (of
    ``scope``): what it returns is written, what it raises refuses the save.

    Facts are immutable: one that is the very object ``base`` holds is unchanged, and is
    not compared field by field."""
    base_facts, facts = base.facts, doc.facts
    old_at, new_at = _moved(base_facts, facts)
    stored = {base_facts[i].id: base_facts[i] for i in old_at}
    where = {base_facts[i].id: i for i in old_at}
    changes = Changes()
    for i in new_at:
        fact = facts[i]
        old = stored.pop(fact.id, None)
        if old is fact:
            continue
        if (
            guard is not None
            and scope is not None
            and (
                old is None or fact.content != old.content or fact.source_error != old.source_error
            )
        ):
            fact = guard.fact(scope, fact, changes.redactions)
        # Facts are frozen and their values valid: the copies need no validation.
        if old is None:
            if fact.valid_to is not None:
                raise ValueError(f"fact {fact.id} was closed at {fact.valid_to}: not saved as live")
            changes.inserted.append(copy_model(fact, updated_at=now))
        elif any(getattr(fact, name) != getattr(old, name) for name in _FACT_FIELDS):
            if fact.content != old.content:  # the old text stays readable as of its time
                changes.archived.append(
                    copy_model(
                        old,
                        id=new_fact_id(),
                        valid_from=old.since,
                        valid_to=now,
                        superseded_by=fact.id,
                    )
                )
                fact = copy_model(fact, valid_from=now)
            changes.updated.append(copy_model(fact, updated_at=now, created_at=old.created_at))
            changes.previous[fact.id] = old
            changes.positions[fact.id] = where[fact.id]
            if fact.content != old.content and fact.key != old.key:
                changes.rekeyed.add(fact.id)
    changes.deleted = list(stored)
    changes.removed = stored
    if doc.superseded and stored:
        changes.superseded = {i: doc.superseded[i] for i in stored if i in doc.superseded}
    base_sections = base.sections()
    for name, section in doc.sections().items():
        before = base_sections[name]
        # Sections hold plain values: equal fields (and class) are equal sections, as
        # pydantic's ``==`` would find at several times the cost.
        if section is not before and (
            section.__class__ is not before.__class__ or section.__dict__ != before.__dict__
        ):
            stamp = section.updated_at if section.updated_at != before.updated_at else now
            if guard is not None and scope is not None and section.summary != before.summary:
                section = guard.section(scope, name, section, changes.redactions)
            changes.sections[name] = section.model_copy(update={"updated_at": stamp})
    return changes


def check_duplicates(scope: Scope, doc: MemoryDocument) -> None:
    duplicate = doc.duplicate_fact()
    if duplicate is not None:
        raise DuplicateFactError(str(scope), duplicate.content)


def apply_changes(
    base: MemoryDocument,
    changes: Changes,
    version: int,
    last_updated: datetime | None = None,
) -> MemoryDocument:
    """``base`` with ``changes`` applied, at ``version`` (and ``last_updated``, if given):
    what the store now holds. ``base`` is left as it was; the result shares with it the
    (immutable) facts and the sections the changes leave alone, as cached documents may
    (they are never handed out, only their :meth:`~MemoryDocument.clone`)."""
    inserted = sort_facts(changes.inserted)
    if not changes.deleted and not changes.updated and _all_after(base.facts, inserted):
        facts = [*base.facts, *inserted]  # new facts, all newer: still in order
    elif not changes.deleted and not inserted:  # an update keeps its creation time: in place
        facts = list(base.facts)
        updated = {fact.id: fact for fact in changes.updated}
        for i in _positions(facts, updated, changes.positions):
            facts[i] = updated[facts[i].id]
    elif not changes.updated and not inserted:  # removals alone: the rest keep their order
        gone = set(changes.deleted)
        facts = [fact for fact in base.facts if fact.id not in gone]
    else:
        by_id = {fact.id: fact for fact in base.facts}
        for fact_id in changes.deleted:
            del by_id[fact_id]
        for fact in (*changes.updated, *inserted):
            by_id[fact.id] = fact
        facts = sort_facts(by_id.values())
    stamped: dict[str, object] = {"version": version, "facts": facts}
    if last_updated is not None:
        stamped["last_updated"] = last_updated
    if changes.sections:
        user, history = copy_model(base.user), copy_model(base.history)
        for name, section in changes.sections.items():
            setattr(user if hasattr(user, name) else history, name, section)
        stamped.update(user=user, history=history)
    return copy_model(base, **stamped)


def _positions(
    facts: list[Fact], ids: dict[str, Fact], known: dict[str, int] | None = None
) -> list[int]:
    """The indexes in ``facts`` of the facts whose ids are keys of ``ids`` (``known``: where
    :func:`diff_documents` found them, used when right)."""
    if known and len(known) == len(ids):
        at = [known.get(fact_id, -1) for fact_id in ids]
        if all(0 <= i < len(facts) and facts[i].id == f for f, i in zip(ids, at, strict=True)):
            return at
    if len(ids) == 1:
        return [list(map(_ID, facts)).index(next(iter(ids)))]
    return [i for i, fact_id in enumerate(map(_ID, facts)) if fact_id in ids]


_ID = attrgetter("id")


def _all_after(facts: list[Fact], later: list[Fact]) -> bool:
    if not facts or not later:
        return True
    last, first = facts[-1], later[0]
    return (last.created_at, last.id) < (first.created_at, first.id)


def _fact_order(fact: Fact) -> tuple[datetime, str]:
    return (fact.created_at, fact.id)


def sort_facts(facts: Iterable[Fact]) -> list[Fact]:
    return sorted(facts, key=_fact_order)
