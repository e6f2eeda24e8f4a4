"""The API-key check: the same work for a key id that exists (with a wrong secret) and one
that does not, so that timing does not tell which key ids exist.

    .venv/bin/python benchmarks/bench_keys.py [--tries 3000]

Both kinds are checked interleaved (ABAB…, so drift in the machine's speed hits both alike)
against a fresh PostgreSQL database and a SQLite file; printed: each kind's median and mean,
the difference of the means, and its z score (difference / its standard error). |z| below
about 3 means no difference this many tries can see.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_postgres

from memory_sql import migrations
from memory_sql.database import create_engine
from memory_sql.server.keys import KeyChecker, create_key


def measure(url: str, tries: int) -> None:
    migrations.upgrade(url)
    engine = create_engine(url)
    _key, text = create_key(engine, tenant_id="acme", role="write")
    prefix, key_id, _secret = text.split("_", 2)
    existing = f"{prefix}_{key_id}_{'A' * 43}"  # a real key id, a wrong secret
    unknown = f"{prefix}_{'0' * 16}_{'A' * 43}"
    checker = KeyChecker(engine)
    for _ in range(200):  # warm the pool and the statement cache
        checker.check(existing)
        checker.check(unknown)
    times: dict[str, list[float]] = {"existing id": [], "unknown id": []}
    for _ in range(tries):
        for name, token in (("existing id", existing), ("unknown id", unknown)):
            started = time.perf_counter()
            assert checker.check(token) is None
            times[name].append(time.perf_counter() - started)
    engine.dispose()
    a, b = times["existing id"], times["unknown id"]
    for name, values in times.items():
        print(
            f"  {name:12s} median {statistics.median(values) * 1e6:7.1f} µs"
            f"  mean {statistics.fmean(values) * 1e6:7.1f} µs"
        )
    difference = statistics.fmean(a) - statistics.fmean(b)
    error = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    print(f"  existing - unknown: {difference * 1e6:+.1f} µs, z = {difference / error:+.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3000)
    tries = parser.parse_args().tries
    with scratch_postgres() as url:
        if url is None:
            print("PostgreSQL: unreachable, skipped")
        else:
            print(f"PostgreSQL, {tries} tries of each:")
            measure(url, tries)
    with tempfile.TemporaryDirectory() as folder:
        print(f"SQLite, {tries} tries of each:")
        measure(f"sqlite:///{folder}/keys.db", tries)


if __name__ == "__main__":
    main()
