"""The benchmark results page, docs/results.md, made from the benchmarks' own output.

    .venv/bin/python benchmarks/make_results.py run benchmarks/bench_intake.py [ARGS…]
    .venv/bin/python benchmarks/make_results.py            # docs/results.md from the files

``run`` runs one benchmark as it is run by hand (its output shown as it comes) and writes what
it printed, with the command, the date, the commit measured and the machine's load, to
``benchmarks/results/<bench>.md``; its exit status is the benchmark's. ``make bench`` runs
every benchmark this way, then assembles the page. Without arguments the page is assembled:
for each benchmark, the first line of its docstring, its latest recorded run, and the
figures kept from earlier runs (``benchmarks/results/history/<bench>.md``, written by hand:
what the README reported, each figure with the run it came from).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
HISTORY = RESULTS / "history"
PAGE = HERE.parent / "docs" / "results.md"

INTRO = """\
# Benchmark results

Each benchmark prints ratios against a baseline measured in the same run (these machines are
noisy: absolute times vary from run to run; the ratios are the point). `make bench` installs
the `bench` extra (LangGraph's stores, `rank_bm25`), runs every `benchmarks/bench_*.py`
through `benchmarks/make_results.py run`, which records what each printed, and assembles this
page. One benchmark by hand, recorded:

```console
$ .venv/bin/python benchmarks/make_results.py run benchmarks/bench_intake.py
$ .venv/bin/python benchmarks/make_results.py    # this page, from benchmarks/results/
```

This page is generated: edit `benchmarks/results/history/<bench>.md` (figures kept from
earlier runs, each with its run) or re-run a benchmark, never this file. Under each benchmark,
"Latest recorded run" is its own output; "Earlier figures" are those the README reported
before the documentation moved here (at commit be5d74e, 2026-12-03), with the runs they name.
"""


def bench_order() -> list[str]:
    """The benchmarks, in the order the page lists them: those with figures first."""
    names = sorted(p.stem for p in HERE.glob("bench_*.py"))
    first = [
        "bench_recall",
        "bench_peers",
        "bench_service",
        "bench_mcp",
        "bench_queue",
        "bench_faults",
        "bench_storage",
        "bench_updater",
        "bench_llm_cost",
        "bench_models",
        "bench_keys",
        "bench_injection",
        "bench_intake",
    ]
    return [n for n in first if n in names] + [n for n in names if n not in first]


def summary(bench: str) -> str:
    """The first line of the benchmark's docstring."""
    tree = ast.parse((HERE / f"{bench}.py").read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def page() -> str:
    """docs/results.md as the files under benchmarks/results/ make it."""
    parts = [INTRO]
    for bench in bench_order():
        latest, history = RESULTS / f"{bench}.md", HISTORY / f"{bench}.md"
        parts.append(f"## `{bench}.py`\n\n{summary(bench)}\n")
        if latest.exists():
            parts.append("### Latest recorded run\n\n" + latest.read_text(encoding="utf-8"))
        if history.exists():
            parts.append("### Earlier figures\n\n" + history.read_text(encoding="utf-8"))
        if not latest.exists() and not history.exists():
            parts.append("No run recorded yet.\n")
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)


def record(bench: Path, args: list[str], output: str, status: int, seconds: float) -> str:
    """The Markdown of one run: what was run, when, on what, then its output as printed."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join([".venv/bin/python", f"benchmarks/{bench.name}", *args])
    fence = "````" if "```" in output else "```"
    return (
        f"`{command}`, {when}, commit {commit()}, {os.cpu_count()} CPUs, load average "
        f"{load:.1f} at the end, {seconds:.0f} s"
        + ("" if status == 0 else f", **exit status {status}**")
        + f":\n\n{fence}text\n{output.rstrip()}\n{fence}\n"
    )


def commit() -> str:
    """The checkout's commit, with ``+changes`` when it has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HERE), "status", "--porcelain", "--", "memory_sql"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def run(bench: Path, args: list[str]) -> int:
    """Run ``bench`` with ``args``, showing and recording its output; its exit status."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, str(bench), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        lines.append(line)
    status = process.wait()
    RESULTS.mkdir(exist_ok=True)
    text = record(bench, args, "".join(lines), status, time.monotonic() - started)
    (RESULTS / f"{bench.stem}.md").write_text(text, encoding="utf-8")
    return status


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        if len(argv) < 2:
            print("usage: make_results.py run benchmarks/bench_NAME.py [ARGS…]", file=sys.stderr)
            return 2
        return run(Path(argv[1]).resolve(), argv[2:])
    if argv:
        print("usage: make_results.py [run benchmarks/bench_NAME.py [ARGS…]]", file=sys.stderr)
        return 2
    PAGE.write_text(page(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
