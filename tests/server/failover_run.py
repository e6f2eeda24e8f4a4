"""A failover under load, for ``tests/server/test_failover.py`` and
``benchmarks/bench_failover.py``: a real ``memory-sql serve`` (with its worker) on a libpq
multi-host URL (``target_session_attrs=read-write``), 16 clients posting conversations, the
primary SIGKILLed and the standby promoted (by :func:`run_failover`'s ``promote``, or by a
failover manager). Each conversation says "I like <its thread id>"; the scripted LLM answers a
fact "Likes <thread id> (call N)" per such line, so a conversation learned twice leaves two
facts. Figures: acknowledged (202), learned once, lost, learned twice, seconds from the
promotion to the first read answered again.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from llm_server import LABELS, ScriptedLLM

from memory_sql.database import create_engine
from memory_sql.schema import memory_facts
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.server.keys import create_key
from server.conftest import service_settings_for
from server.service_process import ServiceProcess

CLIENTS = 16
PAUSE_SECONDS = 0.1  # between one client's posts: the load is ~100 conversations a second
LIKES = re.compile(r"I like (c\d+-\d+)")
FACT = re.compile(r"Likes (c\d+-\d+) \(call \d+\)")


class Learner:
    """The scripted LLM's answer: a fact per "I like X" of the conversation, numbered by call
    so that the same conversation learned twice leaves two facts."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        with self._lock:
            self.calls += 1
            n = self.calls
        prompt = body["messages"][-1]["content"]
        conversation = prompt.split("<conversation>")[1].split("</conversation>")[0]
        facts = [
            {"content": f"Likes {thing} (call {n})", "category": "preference", "confidence": 0.9}
            | LABELS
            for thing in LIKES.findall(conversation)
        ]
        return json.dumps({"user": {}, "history": {}, "newFacts": facts, "factsToRemove": []})


class Load:
    """``CLIENTS`` threads posting conversations (each its own thread id) to ``base_url``;
    they record the ones answered 202."""

    def __init__(self, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.key = key
        self.acknowledged: set[str] = set()
        self.answers: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(CLIENTS)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _client(self, number: int) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=15.0) as client:
            sent = 0
            while not self._stop.is_set():
                thread = f"c{number}-{sent}"
                sent += 1
                messages = [
                    {"role": "user", "content": f"I like {thread} and green tea."},
                    {"role": "assistant", "content": "Noted."},
                ]
                try:
                    response = client.post(
                        "/v1/conversations",
                        json={"user_id": f"u{number}", "thread_id": thread, "messages": messages},
                    )
                except httpx.TransportError:
                    with self._lock:
                        self.answers["no answer"] += 1
                    self._stop.wait(PAUSE_SECONDS)
                    continue
                with self._lock:
                    self.answers[str(response.status_code)] += 1
                    if response.status_code == 202:
                        self.acknowledged.add(thread)
                self._stop.wait(PAUSE_SECONDS)

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)


def prepare(url: str) -> str:
    """A write key of tenant ``acme`` in the (migrated) database ``url``."""
    engine = create_engine(url)
    try:
        return create_key(engine, tenant_id="acme", role="write")[1]
    finally:
        engine.dispose()


def learned(url: str) -> Counter[str]:
    """How many facts each thread id left (2 or more: learned more than once)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            contents = conn.execute(
                sa.select(memory_facts.c.content).where(memory_facts.c.valid_to.is_(None))
            ).scalars()
            return Counter(m.group(1) for c in contents if (m := FACT.fullmatch(c)))
    finally:
        engine.dispose()


def queued(url: str) -> set[str]:
    """The thread ids of the queue's rows (waiting, or leased by a worker before the failover
    and taken again when the lease runs out)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.select(pending.c.thread_id)).scalars())
    finally:
        engine.dispose()


def run_failover(
    folder: Path,
    llm: ScriptedLLM,
    storage_url: str,
    check_url: Callable[[], str],
    fail: Callable[[], float],
    *,
    before_seconds: float = 3.0,
    after_seconds: float = 3.0,
    drain_seconds: float = 60.0,
) -> dict[str, Any]:
    """Load the service on ``storage_url``, call ``fail`` (kill the primary and promote a
    standby; returns the moment, ``time.monotonic()``, the new primary took writes), keep the
    load on, then wait until every acknowledged conversation is learned (or
    ``drain_seconds``) in the database ``check_url()`` names (the new primary's). An
    acknowledged conversation neither learned nor queued is lost; one still queued is not
    (a row leased before the failover waits for its lease, ``lease_seconds``, to run out)."""
    key = prepare(storage_url)
    llm.responder = Learner()
    settings = {
        **service_settings_for(llm),
        "storage": storage_url,
        "spool_retry_seconds": 0.5,
        "spool_dir": str(folder / "spool"),
        "max_facts": 10_000,
        "workers": 4,
        "lease_seconds": 10.0,  # a row leased on the old primary is taken again soon
    }
    figures: dict[str, Any] = {}
    with ServiceProcess(folder, settings) as service, Load(service.base_url, key) as load:
        time.sleep(before_seconds)
        figures["acknowledged before the kill"] = load.count()
        promoted = fail()
        with service.client(key) as http:
            while time.monotonic() - promoted < 60:
                try:
                    if http.get("/v1/users/u0/facts").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
        figures["promotion to reads answered (s)"] = round(time.monotonic() - promoted, 2)
        time.sleep(after_seconds)
        load.__exit__()
        acknowledged = set(load.acknowledged)
        url = check_url()
        deadline = time.monotonic() + drain_seconds
        counts = learned(url)
        while time.monotonic() < deadline and not acknowledged <= set(counts):
            time.sleep(0.5)
            counts = learned(url)
        time.sleep(1.0)  # anything learned twice has had time to show
        counts = learned(url)
        waiting = queued(url)
        figures["queue rows left"] = len(waiting)
        log = service.log
    figures.update(
        acknowledged=len(acknowledged),
        learned=sum(1 for t in acknowledged if counts[t] == 1),
        still_queued=sum(1 for t in acknowledged if counts[t] == 0 and t in waiting),
        lost=sum(1 for t in acknowledged if counts[t] == 0 and t not in waiting),
        twice=sum(1 for t in counts if counts[t] > 1),
        answers=dict(load.answers),
        llm_calls=llm.responder.calls,  # type: ignore[attr-defined]
        failover_logged=log.count("now connected to"),
        tracebacks=log.count("Traceback"),
    )
    return figures
