"""Running due memory updates in the background: APScheduler 3 timing, a bounded thread pool.

The scheduler holds two jobs. ``wake`` is a one-shot ``date`` job moved to the next time a row
becomes claimable (a due time, or the end of another process's lease): the worker sleeps until
there is work, with no polling. ``sweep`` runs every ``sweep_interval`` seconds and catches what
no local wake-up covers: rows queued by other processes, leases left by dead ones. Both claim as
many due rows as the pool has free threads and hand them to the pool; a finished run claims
more. While runs are quick (under a second on average: an LLM that answers at once), a claim
also takes as many rows again to wait for a thread, so one claim serves a pool's worth of runs
instead of one, and a row claimed ahead waits here for about one run. Wake-ups never miss:
jobs have no misfire grace limit, and a wake-up asked for while one runs makes that one go round
again instead of being skipped. While a run goes on, its lease
is renewed every third of ``lease_seconds``, so a slow LLM never lets a second worker take it.

Work queued by other processes reaches the worker through a wake-up source
(:mod:`memory_sql.storage.wakeups`): PostgreSQL notifications carrying the due time, or, on
SQLite, a change of the file seen by a short poll, after which the next due time is read. The
worker then wakes when that row is due, as it does for its own process's rows.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from apscheduler.executors.pool import ThreadPoolExecutor as SchedulerThreadPool
from apscheduler.schedulers.background import BackgroundScheduler

from ..database import OutageLog
from ..errors import LeaseLostError, MemorySQLError
from ..models import utcnow
from ..storage.wakeups import ChangePoller, NotifyListener, wakeup_source
from .pending import PendingUpdate, UpdateQueue

logger = logging.getLogger(__name__)

Run = Callable[[PendingUpdate], "RunOutcome"]
RETRY_AFTER_ERROR_SECONDS = 5.0
CONFLICT_RETRY_SECONDS = (1.0, 5.0)
"""A run given back after version conflicts runs again after a random delay in this range."""
QUICK_RUN_SECONDS = 1.0
"""Runs taking less than this on average (a moving average) are claimed a pool ahead."""
GATHER_SECONDS = 0.02
"""A wake-up for work due now waits this long, so the notices of a burst of enqueues (and the
ends of runs) that arrive meanwhile share one claim rather than each making its own. Not while
the last claim found as many due rows as it asked for: more are waiting, and a thread that
finishes claims again at once."""


@dataclass(frozen=True)
class RunOutcome:
    """What running one item gave, and so what becomes of its row.

    ``ok``: the row is completed (deleted, or kept for a newer conversation), unless
    ``completed`` says the run already did that in its own save's transaction. Otherwise
    ``error`` is recorded and the row retried or given up; but a run that ``lease_lost`` leaves
    the row to the worker that took it, and one that lost to version conflicts gives the row
    back with its ``retry_reply`` (JSON), the attempt not counted; one that was not run
    (``wait_seconds``: the tenant's LLM budget is used up) gives the row back to wait that long,
    the attempt not counted and ``error`` recorded as the reason.
    """

    ok: bool
    error: str | None = None
    completed: bool = False
    lease_lost: bool = False
    retry_reply: str | None = None
    wait_seconds: float | None = None


class UpdateWorker:
    """Claims due rows of ``queue`` and runs ``run`` on each in a pool of ``workers`` threads."""

    def __init__(
        self,
        queue: UpdateQueue,
        run: Run,
        *,
        workers: int = 2,
        sweep_interval: float = 60.0,
        gather_seconds: float = GATHER_SECONDS,
    ) -> None:
        self.queue = queue
        self.gather = timedelta(seconds=gather_seconds)
        self.run = run
        self.workers = workers
        self.sweep_interval = sweep_interval
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memory-sql")
        self._scheduler = BackgroundScheduler(
            executors={"default": SchedulerThreadPool(2)},
            job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
            timezone=timezone.utc,
        )
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._run_seconds: float | None = None  # moving average of recent runs
        self._backlog = False  # the last claim got all it asked for: more rows may be due
        self._running: dict[int, PendingUpdate] = {}
        self._waiting: dict[int, tuple[Future[None], PendingUpdate]] = {}
        self._next_wake: datetime | None = None
        self._waking = False
        self._again = False
        self._stopping = False
        self.completed = 0
        self.failed = 0
        self.postponed = 0
        self.waited = 0  # runs given back unrun (over the LLM budget)
        self.claims = 0  # claims made (each one transaction on the queue)
        self._outage = OutageLog("memory update worker")
        self.wakeups: NotifyListener | ChangePoller | None = None
        """What tells this worker of rows other processes queue (None before start)."""

    @property
    def in_flight(self) -> int:
        """Updates claimed here and not finished (waiting for a thread, or running)."""
        with self._lock:
            return len(self._running) + len(self._waiting)

    def start(self) -> None:
        """Start the scheduler and look for work at once (rows a dead process left)."""
        self._scheduler.start()
        self._scheduler.add_job(
            self._wake, "interval", seconds=self.sweep_interval, id="sweep", name="sweep"
        )
        renew_every = max(self.queue.lease.total_seconds() / 3, 0.1)
        self._scheduler.add_job(
            self._renew, "interval", seconds=renew_every, id="renew", name="renew"
        )
        self.notify(utcnow())
        self.wakeups = wakeup_source(self.queue.engine, on_due=self.notify, on_change=self._look)
        if self.wakeups is not None:
            self.wakeups.start()

    def _look(self) -> None:
        """Something changed in the database, perhaps the queue: wake up when it is next due."""
        try:
            due = self.queue.next_due()
        except MemorySQLError as exc:
            self._outage.failed(exc)
            return
        if due is not None:
            self.notify(due)

    def every(self, seconds: float, job: Callable[[], object], name: str) -> None:
        """Run ``job`` every ``seconds`` on the scheduler (started) as housekeeping; its
        exceptions are the job's to handle."""
        self._scheduler.add_job(job, "interval", seconds=seconds, id=name, name=name)

    def _renew(self) -> None:
        """Keep the leases of runs still going (and of rows claimed to wait for a thread),
        however long the LLM takes."""
        with self._lock:
            running = [*self._running.values(), *(item for _, item in self._waiting.values())]
        try:
            self.queue.renew(running)
        except MemorySQLError as exc:
            self._outage.failed(exc)

    def notify(self, due: datetime, *, gather: bool = True) -> None:
        """A row becomes claimable at ``due``: wake up then (work due now: ``gather_seconds``
        from now, unless ``gather`` is False), unless already waking earlier."""
        due = max(due, utcnow() + self.gather) if gather else due
        with self._lock:
            if self._stopping:
                return
            if self._waking:
                self._again = True
                return
            upcoming = self._upcoming()
            if upcoming is not None and upcoming <= due:
                return
            self._schedule(due)

    def _upcoming(self) -> datetime | None:
        """The wake-up scheduled and not yet due. One whose time has passed is not counted:
        it fired, or fires in a moment, and may have met a wake-up running (which went round
        again without it), so nothing later may wait for it."""
        if self._next_wake is not None and self._next_wake > utcnow():
            return self._next_wake
        return None

    def _schedule(self, when: datetime) -> None:
        # A new job rather than moving the old one: APScheduler removes a date job itself
        # after firing it, and a job moved or removed by us meanwhile would be lost (or would
        # kill its thread with JobLookupError). A later wake-up left behind just finds less.
        if self._scheduler.running:  # before start(), start() itself looks for work
            self._next_wake = when
            self._scheduler.add_job(self._wake, "date", run_date=when, name="wake")

    def _wake(self) -> None:
        with self._lock:
            if self._waking:  # the sweep and a wake-up at once: the running one goes round again
                self._again = True
                return
            self._waking = True
            self._next_wake = None
        try:
            while True:
                with self._lock:
                    self._again = False
                free = self._drain()
                next_due = self.queue.next_due() if free else None
                self._outage.succeeded()
                with self._lock:
                    if self._again and not self._stopping:
                        continue
                    self._waking = False
                    self._idle.notify_all()
                    # With no free thread next_due is None: a finished run claims more instead.
                    upcoming = self._upcoming()
                    earlier = upcoming is None or (next_due is not None and next_due < upcoming)
                    if next_due is not None and earlier and not self._stopping:
                        self._schedule(next_due)
                    return
        except MemorySQLError as exc:
            self._outage.failed(exc)
            self._retry_soon()
        except Exception:
            logger.exception("memory update worker: unexpected error while claiming work")
            self._retry_soon()
        with self._lock:
            self._waking = False
            self._idle.notify_all()

    def _retry_soon(self) -> None:
        with self._lock:
            if not self._stopping:
                self._schedule(utcnow() + timedelta(seconds=RETRY_AFTER_ERROR_SECONDS))

    def _drain(self) -> int:
        """Claim due rows for the free threads (and, while runs are quick, as many again to
        wait for one) and start them; returns free threads left."""
        with self._lock:
            free = self.workers - self._in_flight
            if self._stopping or free <= 0:
                return max(free, 0)
            quick = self._run_seconds is not None and self._run_seconds < QUICK_RUN_SECONDS
            wanted = free + self.workers if quick else free
            self._in_flight += wanted  # reserved: stop() waits for this claim to end
            self.claims += 1
        try:
            items = self.queue.claim(wanted)
        except BaseException:
            with self._lock:
                self._in_flight -= wanted
                self._idle.notify_all()
            raise
        with self._lock:
            self._in_flight -= wanted - len(items)
            self._backlog = len(items) == wanted
            stopping = self._stopping
            if not stopping:
                for item in items:
                    self._waiting[id(item)] = (self._pool.submit(self._process, item), item)
            self._idle.notify_all()
        if stopping:  # stop() came during the claim: the rows go back unrun
            for item in items:
                self._give_back(item)
        return max(free - len(items), 0)

    def _process(self, item: PendingUpdate) -> None:
        with self._lock:
            self._waiting.pop(id(item), None)
            self._running[id(item)] = item
        started = time.monotonic()
        try:
            try:
                outcome = self.run(item)
            except Exception as exc:  # the run's own failure is recorded, never raised
                logger.exception(
                    "memory update of %s, thread %s crashed", item.scope, item.thread_id
                )
                outcome = RunOutcome(False, f"{type(exc).__name__}: {exc}")
            self._record_outcome(item, outcome)
        finally:
            took = time.monotonic() - started
            with self._lock:
                average = self._run_seconds
                self._run_seconds = took if average is None else 0.8 * average + 0.2 * took
                self._running.pop(id(item), None)
                self._in_flight -= 1
                self._idle.notify_all()
                backlog = self._backlog
            self.notify(utcnow(), gather=not backlog)

    def _record_outcome(self, item: PendingUpdate, outcome: RunOutcome) -> None:
        """Record ``outcome`` in the queue; while the database is down, try again (the lease
        is renewed meanwhile) until it answers, the worker stops, or a lease's time passed."""
        give_up = time.monotonic() + self.queue.lease.total_seconds()
        while True:
            try:
                self._record(item, outcome)
                self._outage.succeeded()
                return
            except LeaseLostError as exc:
                logger.warning("memory update of %s: %s", item.scope, exc)
                return
            except MemorySQLError as exc:
                self._outage.failed(exc)
                if self._stopping or time.monotonic() >= give_up:
                    logger.warning(
                        "memory update of %s, thread %s: cannot record the outcome: %s "
                        "(the lease expires and the row is run again)",
                        item.scope,
                        item.thread_id,
                        exc,
                    )
                    return
            with self._lock:
                self._idle.wait(RETRY_AFTER_ERROR_SECONDS)

    def _record(self, item: PendingUpdate, outcome: RunOutcome) -> None:
        if outcome.ok:
            if not outcome.completed:
                self.queue.complete(item)
            self.completed += 1
        elif outcome.lease_lost:
            logger.warning(
                "memory update of %s, thread %s: its lease ran out and another worker took "
                "the row; this run's changes were rolled back",
                item.scope,
                item.thread_id,
            )
        elif outcome.wait_seconds is not None:
            self.queue.postpone(item, item.reply, outcome.wait_seconds, outcome.error or "waiting")
            self.waited += 1
        elif outcome.retry_reply is not None:
            self.queue.postpone(
                item,
                outcome.retry_reply,
                random.uniform(*CONFLICT_RETRY_SECONDS),
                outcome.error or "version conflicts",
            )
            self.postponed += 1
            logger.info(
                "memory update of %s, thread %s lost to other writers; it runs again soon "
                "with the same reply",
                item.scope,
                item.thread_id,
            )
        else:
            what = self.queue.fail(item, outcome.error or "unknown error")
            self.failed += 1
            logger.warning(
                "memory update of %s, thread %s failed (attempt %d, %s): %s",
                item.scope,
                item.thread_id,
                item.attempts,
                what,
                outcome.error,
            )

    def flush(self, timeout: float) -> bool:
        """Make every pending row due and wait until none is pending, or ``timeout`` seconds.

        Returns False if rows are still pending then, or if what is left can only run later
        (a failed run waiting for its retry, or a row leased by another process)."""
        deadline = time.monotonic() + timeout
        self.queue.make_all_due()
        self.notify(utcnow())
        while True:
            counts = self.queue.counts()
            if counts["pending"] == 0:
                return True
            with self._lock:
                busy = self._in_flight > 0 or self._waking
            if not busy and counts["due"] == 0 and counts["leased"] == 0:
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not busy and counts["due"]:
                self.notify(utcnow())
            with self._lock:
                self._idle.wait(min(remaining, 0.05))

    def stop(self, timeout: float) -> bool:
        """Stop claiming, wait up to ``timeout`` seconds for runs in flight; True if all ended.

        Claimed rows not yet started are given back at once. Runs still going after
        ``timeout`` finish in the background with their leases no longer renewed: should the
        process exit first, their rows are claimed again when the lease runs out."""
        with self._lock:
            self._stopping = True
        if self.wakeups is not None:
            self.wakeups.stop()
        if self._scheduler.running:
            # APScheduler 3 marks itself stopped before taking its job-store lock, so a job
            # being fired at that moment fails to remove itself and kills the scheduler thread
            # with JobLookupError. Pausing under that lock first leaves nothing being fired.
            with self._scheduler._jobstores_lock:
                self._scheduler.pause()
            self._scheduler.shutdown(wait=False)
        with self._lock:
            waiting = list(self._waiting.values())
        for future, item in waiting:
            if future.cancel():
                self._give_back(item)
        deadline = time.monotonic() + timeout
        with self._lock:
            # Runs in flight, and a wake-up still reading the queue, end before the pool does.
            while (self._in_flight or self._waking) and (
                remaining := deadline - time.monotonic()
            ) > 0:
                self._idle.wait(remaining)
            finished = self._in_flight == 0
        self._pool.shutdown(wait=finished)
        return finished

    def _give_back(self, item: PendingUpdate) -> None:
        with self._lock:
            self._waiting.pop(id(item), None)
            self._in_flight -= 1
            self._idle.notify_all()
        try:
            self.queue.release(item)
        except MemorySQLError as exc:
            logger.warning("memory update worker: cannot give back %s: %s", item.scope, exc)
