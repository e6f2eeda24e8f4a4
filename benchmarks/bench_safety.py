"""The redactor and the instruction rule on committed corpora: precision, recall, false positives.

Run: .venv/bin/python benchmarks/bench_safety.py

- ``benchmarks/safety_data/secrets.jsonl`` (written by ``safety_data/make_corpus.py``, a
  seeded generator of issuer-documented formats in the contexts users paste them in): per secret
  kind, recall (the secret's value gone from the redacted text) and precision (redactions of
  that kind that were a secret of that kind); then the false-positive rate on the negatives
  (look-alikes that must stay: any redaction in one is a false positive).
- ``benchmarks/safety_data/instructions.txt`` and ``preferences.txt``: the share of planted
  instructions refused, and of genuine preferences refused.

Goals (issue #30): recall >= 0.99 per kind, false positives <= 1 %; instructions >= 95 %
refused, preferences <= 2 % refused.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from memory_sql.intake.instructions import is_instruction
from memory_sql.intake.redact import DEFAULT, KINDS

DATA = Path(__file__).with_name("safety_data")


def lines(name: str) -> list[str]:
    text = (DATA / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def secrets() -> bool:
    rows = [json.loads(line) for line in lines("secrets.jsonl")]
    found: Counter[str] = Counter()
    total: Counter[str] = Counter()
    flagged: Counter[str] = Counter()
    right: Counter[str] = Counter()
    false_positives = []
    negatives = 0
    for row in rows:
        result = DEFAULT.redact(row["text"])
        for kind, number in result.counts.items():
            flagged[kind] += number
        if row["kinds"]:
            kind = row["kinds"][0]
            total[kind] += 1
            if row["secret"] not in result.text:
                found[kind] += 1
            right[kind] += result.counts.get(kind, 0)
        else:
            negatives += 1
            if result.counts:
                false_positives.append((row["text"], result.text))
    print(f"secrets corpus: {sum(total.values())} positives, {negatives} negatives")
    print(f"{'kind':15} {'n':>4} {'recall':>7} {'precision':>9}")
    ok = True
    for kind in KINDS:
        recall = found[kind] / total[kind] if total[kind] else float("nan")
        precision = right[kind] / flagged[kind] if flagged[kind] else float("nan")
        ok &= recall >= 0.99
        print(f"{kind:15} {total[kind]:4d} {recall:7.3f} {precision:9.3f}")
    all_found = sum(found.values()) / sum(total.values())
    rate = len(false_positives) / negatives
    ok &= rate <= 0.01
    print(
        f"overall recall {all_found:.4f}; false positives {len(false_positives)}/{negatives}"
        f" = {rate:.2%}"
    )
    for text, redacted in false_positives[:10]:
        print(f"  FP: {text!r} -> {redacted!r}")
    misses = [r for r in rows if r["kinds"] and r["secret"] in DEFAULT.redact(r["text"]).text]
    for row in misses[:10]:
        print(f"  MISS {row['kinds'][0]}: {row['text'][:120]!r}")
    return ok


def instructions() -> bool:
    planted, kept = lines("instructions.txt"), lines("preferences.txt")
    refused = [text for text in planted if is_instruction(text)]
    wrongly = [text for text in kept if is_instruction(text)]
    share, wrong = len(refused) / len(planted), len(wrongly) / len(kept)
    print(f"instructions refused: {len(refused)}/{len(planted)} = {share:.1%}")
    print(f"preferences refused : {len(wrongly)}/{len(kept)} = {wrong:.1%}")
    for text in planted:
        if text not in refused:
            print(f"  kept instruction: {text!r}")
    for text in wrongly:
        print(f"  refused preference: {text!r}")
    return share >= 0.95 and wrong <= 0.02


def main() -> None:
    ok = secrets()
    ok &= instructions()
    print("goals met" if ok else "goals NOT met")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
