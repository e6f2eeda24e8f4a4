"""One side of ``bench_peers.py --before``: live-fact loads and saves of the memory_sql on
``sys.path`` (this tree, or the code before revision 0015 by PYTHONPATH), on a database of its
own; prints the medians (seconds) as one JSON line.

    python benchmarks/_live_facts_probe.py sqlite|postgresql CLOSED

``CLOSED`` closed versions are left in the measured memory first (only for code that keeps
them: the code before 0015 deletes what it removes, and is asked for 0).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_postgres, time_calls

from memory_sql import Fact, migrations
from memory_sql.storage import SQLStorage

FACTS = 200
CALLS = 300
SCOPE = {"user_id": "u1", "agent_name": "coder"}


def main() -> None:
    kind, closed = sys.argv[1], int(sys.argv[2])
    with ExitStack() as stack:
        if kind == "postgresql":
            url = stack.enter_context(scratch_postgres())
            if url is None:
                print(json.dumps({"skipped": "no PostgreSQL"}))
                return
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite:///{folder}/probe.db"
        migrations.upgrade(url)
        store = SQLStorage(url)
        stack.callback(store.close)
        doc = store.load(**SCOPE)
        doc.facts = [Fact(content=f"live fact {n}", confidence=0.8) for n in range(FACTS)]
        store.save(doc, **SCOPE)
        for batch in range(closed // FACTS):  # versions closed in the measured memory
            doc = store.load(**SCOPE)
            extra = [Fact(content=f"closed {batch} {n}", confidence=0.5) for n in range(FACTS)]
            doc.facts.extend(extra)
            store.save(doc, **SCOPE)
            doc = store.load(**SCOPE)
            doc.facts = doc.facts[:FACTS]
            store.save(doc, **SCOPE)
        counter = iter(range(10**9))

        def cold() -> None:
            store._cache.clear()
            store.load(**SCOPE)

        def add() -> None:
            doc = store.load(**SCOPE)
            doc.facts.append(Fact(content=f"added {next(counter)}", confidence=0.9))
            store.save(doc, **SCOPE)

        def drop_added() -> None:
            doc = store.load(**SCOPE)
            doc.facts = doc.facts[:FACTS]
            store.save(doc, **SCOPE)

        def update() -> None:
            doc = store.load(**SCOPE)
            first = doc.facts[0]
            doc.facts[0] = first.replace(confidence=0.8 if first.confidence != 0.8 else 0.7)
            store.save(doc, **SCOPE)

        results = {}
        for name, run, after in (
            ("cold load", cold, None),
            ("cached load", lambda: store.load(**SCOPE), None),
            ("add one fact", add, None),
            ("update one fact", update, None),
        ):
            time_calls(run, number=20, after=after)
            results[name] = statistics.median(time_calls(run, number=CALLS, after=after))
            if name == "add one fact":
                drop_added()  # the memory back at 200 live facts (the removed ones closed)
        print(json.dumps(results))


if __name__ == "__main__":
    main()
