"""One queued update through the update stage: :class:`UpdateRun`, what the worker runs per row.

For a row of the queue (:class:`~memory_sql.queue.PendingUpdate`) it

1. checks the tenant's daily LLM budget (:mod:`memory_sql.update.budget`) and, when it is used
   up, gives the row back to wait (a stored reply needs no LLM call, so it is not held);
2. cuts the conversation at the thread's watermark (:mod:`memory_sql.update.watermark`): only
   what follows it is new, and the last exchange before it goes along as marked context;
3. splits a flush too long for one prompt into parts (:func:`~memory_sql.update.prompt.
   split_conversation`), each learned from by its own call;
4. runs the updater (:class:`~memory_sql.update.updater.MemoryUpdater`) on each part; the last
   part's save moves the watermark and completes the queue row in its own transaction when the
   memory and the queue share a database (each conversation takes effect once);
5. counts the LLM's usage and the replies' rejected items, spends the budget, and hands each
   :class:`~memory_sql.update.updater.UpdateResult` to ``on_result``.

What becomes of the row is the :class:`~memory_sql.queue.RunOutcome` returned.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence

from ..config import MemoryConfig
from ..errors import LeaseLostError, MemorySQLError
from ..intake.messages import Message
from ..queue import PendingUpdate, RunOutcome, UpdateQueue
from ..storage.base import MemoryStorage
from ..storage.capabilities import Capability, has, sql_engine
from ..tenancy import acting_for
from ..tokens import TokenCounter, make_token_counter
from . import watermark
from .budget import LLMBudget
from .llm import LLMClient
from .parser import MemoryUpdate
from .prompt import split_conversation
from .updater import MemoryUpdater, UpdateResult

logger = logging.getLogger(__name__)

WAITING_FOR_MODEL = (
    "no memory LLM model is configured (set model_name in the config, MEMORY_SQL_MODEL_NAME "
    "or OPENAI_MODEL): updates wait in the queue, not attempted, until a service started "
    "with a model runs them (`memory-sql queue list` shows them)"
)
NO_MODEL_WAIT_SECONDS = 60.0
"""How long a model-less service leaves an update before looking at it again."""

USAGE_COUNTERS = ("llm_calls", "prompt_tokens", "completion_tokens", "rejected_items")
"""The counters of :attr:`UpdateRun.usage`, in :meth:`memory_sql.MemoryService.status`."""


class UpdateRun:
    """Runs queued updates (call it with a row): budget, watermark cut, split, update, counts.

    ``completes_in_save``: the memory and the queue share one database, so the last save of a
    run completes the queue row in its transaction (else the worker completes it after).
    ``on_result`` gets every :class:`UpdateResult`, in the worker's thread; it must not raise.
    """

    def __init__(
        self,
        *,
        queue: UpdateQueue,
        updater: MemoryUpdater,
        budget: LLMBudget,
        counter: TokenCounter,
        completes_in_save: bool,
        on_result: Callable[[UpdateResult], None] | None = None,
    ) -> None:
        self.queue = queue
        self.updater = updater
        # The queue's worker logs each failed attempt (with the attempt and what comes next).
        updater.failure_log_level = logging.DEBUG
        self.budget = budget
        self.counter = counter
        self.completes_in_save = completes_in_save
        self.on_result = on_result
        self.has_watermarks: bool | None = None
        """None until the first cut looks; False: the database has no watermark table (an
        older schema), and every update sends its whole conversation."""
        self._lock = threading.Lock()
        self._usage = dict.fromkeys(USAGE_COUNTERS, 0)
        self._rejected: Counter[str] = Counter()

    @classmethod
    def for_storage(
        cls,
        config: MemoryConfig,
        storage: MemoryStorage,
        queue: UpdateQueue,
        *,
        llm: LLMClient | None = None,
        on_result: Callable[[UpdateResult], None] | None = None,
    ) -> UpdateRun:
        """The update stage over ``storage`` and ``queue`` as ``config`` sets it up: the
        updater (with ``llm``, else the configured one), the tenants' daily LLM budget (its
        usage rows in the storage's database; only this process's calls for a storage
        without ``llm_budgets``) and the token counter."""
        engine = sql_engine(storage)
        return cls(
            queue=queue,
            updater=MemoryUpdater(config, storage, llm),
            budget=LLMBudget(
                engine if has(storage, Capability.LLM_BUDGETS) else None,
                daily_calls=config.llm.daily_calls_per_tenant,
                daily_tokens=config.llm.daily_tokens_per_tenant,
            ),
            counter=make_token_counter(config.tokens.counting, config.tokens.encoding_file),
            # The save of an update completes its queue row in the same transaction.
            completes_in_save=has(storage, Capability.TRANSACTIONAL_SAVE)
            and engine is not None
            and engine is queue.engine,
            on_result=on_result,
        )

    @property
    def waiting_for_model(self) -> str | None:
        """Why updates wait (no memory LLM model configured), or None when they can run."""
        return None if self.updater.llm.model else WAITING_FOR_MODEL

    @property
    def usage(self) -> dict[str, int]:
        """The memory LLM's calls and tokens here since start (failed calls too), and the
        reply items refused (``rejected_items``)."""
        with self._lock:
            return dict(self._usage)

    def rejections(self) -> dict[str, int]:
        """The reply items refused here since start, by reason, most frequent first."""
        with self._lock:
            return dict(self._rejected.most_common())

    def __call__(self, item: PendingUpdate) -> RunOutcome:
        with acting_for(item.scope.tenant_id):
            return self._run(item)

    def _run(self, item: PendingUpdate) -> RunOutcome:
        # With no model, the LLM call would fail max_attempts times; the row waits instead
        # (the attempt not counted, no call recorded) until a model is configured.
        if item.reply is None and not self.updater.llm.model:
            return RunOutcome(False, WAITING_FOR_MODEL, wait_seconds=NO_MODEL_WAIT_SECONDS)
        held = self._held_by_budget(item)
        if held is not None:
            return held
        cut = self._cut(item)
        messages = cut.new if cut is not None else item.messages
        context = cut.context if cut is not None else ()
        # A flush whose messages do not hold the watermark (they come before it, or it was
        # never set) is sent whole; it moves the watermark only when it was not past it.
        mark = None if cut is None else cut.last
        if cut is not None and item.kind == "flush" and cut.whole and cut.previous is not None:
            mark = None
        # A turn's oldest messages were learned from in earlier runs; a flush's were not, so a
        # flush too long for one prompt is learned from part by part.
        parts: list[Sequence[Message]] = (
            [*split_conversation(messages)] if item.kind == "flush" else [messages]
        )
        parts = parts or [()]
        single = len(parts) == 1
        completed = False
        moved = False

        def completed_with_the_save() -> None:
            nonlocal completed, moved
            moved = mark is not None  # the watermark moves with the completion
            completed = True

        for number, part in enumerate(parts, 1):
            last = number == len(parts)
            moved = False
            try:
                result = self.updater.update_from(
                    part,
                    item.scope,
                    item.thread_id,
                    correction_detected=item.signals.correction,
                    reinforcement_detected=item.signals.reinforcement,
                    reply=_stored_reply(item) if single else None,
                    in_transaction=self.queue.completion(item, mark, completed_with_the_save)
                    if last and self.completes_in_save
                    else None,
                    context=context if number == 1 else (),
                    seen=item.memory if number == 1 else None,
                    attempt=item.attempts,
                )
            except LeaseLostError as exc:
                return RunOutcome(False, str(exc), lease_lost=True)
            self._count(item, result)
            if not result.ok:
                if result.conflicted and single and result.reply is not None:
                    return RunOutcome(
                        False, result.error, retry_reply=result.reply.model_dump_json()
                    )
                return RunOutcome(False, result.error)
        if mark is not None and not moved:
            # Nothing was saved (nothing new, or nothing to change): move it on its own.
            try:
                watermark.move(self.queue.engine, item.scope, item.thread_id, mark)
            except Exception as exc:
                logger.warning(
                    "memory %s, thread %s: cannot move the watermark: %s",
                    item.scope,
                    item.thread_id,
                    _one_line(exc),
                )
        return RunOutcome(True, completed=completed)

    def _held_by_budget(self, item: PendingUpdate) -> RunOutcome | None:
        """The outcome of a row held back because its tenant's LLM budget is used up."""
        if item.reply is not None or not self.budget.limited:  # a stored reply needs no call
            return None
        try:
            over = self.budget.over(item.scope.tenant_id)
        except MemorySQLError:
            return None  # the update meets the same database, and fails or not by itself
        if over is None:
            return None
        self.budget.hold(item.scope.tenant_id, over)
        return RunOutcome(False, over, wait_seconds=self.budget.wait_seconds())

    def _count(self, item: PendingUpdate, result: UpdateResult) -> None:
        if self.on_result is not None:
            self.on_result(result)
        if result.llm_called:
            self.budget.spent(
                item.scope.tenant_id, 1, result.prompt_tokens + result.completion_tokens
            )
            with self._lock:
                self._usage["llm_calls"] += result.llm_calls or 1
                self._usage["prompt_tokens"] += result.prompt_tokens
                self._usage["completion_tokens"] += result.completion_tokens
        if result.rejected:
            with self._lock:
                self._usage["rejected_items"] += sum(result.rejected.values())
                self._rejected.update(result.rejected)

    def _cut(self, item: PendingUpdate) -> watermark.Cut | None:
        """``item``'s conversation cut at its thread's watermark; None when the queue's
        database has no watermarks (an older schema) or cannot be read (all is sent)."""
        if self.has_watermarks is False:
            return None
        try:
            if self.has_watermarks is None:
                self.has_watermarks = watermark.has_table(self.queue.engine)
                if not self.has_watermarks:
                    logger.warning(
                        "memory_sql: the database has no memory_watermarks table (upgrade it: "
                        "memory-sql db upgrade); every update sends the whole conversation"
                    )
                    return None
            if item.mark_read:  # the claim read it
                previous = item.mark
            else:
                previous = watermark.load(self.queue.engine, item.scope, item.thread_id)
        except Exception as exc:
            logger.warning(
                "memory %s, thread %s: cannot read the watermark (%s); sending it all",
                item.scope,
                item.thread_id,
                _one_line(exc),
            )
            return None
        return watermark.split(item.messages, previous, self.counter)


def warn_if_lease_too_short(config: MemoryConfig) -> None:
    """Log when a lease may end before the LLM call it covers (the row would run twice)."""
    worst_llm_call = config.llm.timeout_seconds * (config.llm.max_retries + 1)
    if config.queue.lease_seconds <= worst_llm_call:
        logger.warning(
            "memory_sql: lease_seconds (%s) is not longer than an LLM call may take "
            "(llm_timeout_seconds × (llm_max_retries + 1) = %s): a slow update may be "
            "claimed and run again by another worker",
            config.queue.lease_seconds,
            worst_llm_call,
        )


def _stored_reply(item: PendingUpdate) -> MemoryUpdate | None:
    """The reply a run that lost to version conflicts left on the row, if it still reads."""
    if item.reply is None:
        return None
    try:
        return MemoryUpdate.model_validate_json(item.reply)
    except ValueError:
        logger.warning("memory %s: the stored reply is unreadable; asking the LLM", item.scope)
        return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
