"""Imperfect model replies: how many still yield the correct stored memory, before and after.

Each case of a fixture (default ``benchmarks/model_replies/imperfect_replies.json``) is a
conversation, the memory before it, the model's reply (or replies, served in turn; the last
one again if asked more) and the correct memory after it: the facts that must be stored (each
a list of words one new fact must all contain), no other new fact, the sections rewritten
(the others as they were) and the facts removed. Every case runs through the real updater on
a fresh SQLite file, the reply served by a local chat-completions server, in two
subprocesses: the code of ``--baseline`` (default ``main``, exported with ``git archive``) and
this checkout, in the same sitting. It prints, per case and in all, which memory came out
correct, what junk was stored, the LLM calls and tokens recorded, and the ratios.

With ``--base-url`` the same conversations go to a real OpenAI-compatible server instead of
the recorded replies (``--model``; ``--api-key`` if it needs one), judged the same way::

    python benchmarks/bench_models.py
    python benchmarks/bench_models.py --base-url http://127.0.0.1:8080/v1 --model smollm2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "model_replies" / "imperfect_replies.json"


# The worker: runs in a subprocess with the memory_sql under test on PYTHONPATH ---------------


class _Replay:
    """A chat-completions server answering one case's replies in turn (the last one again)."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = replies
        self.served = 0
        self.max_tokens: list[Any] = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                replay.max_tokens.append(body.get("max_tokens"))
                reply = replay.replies[min(replay.served, len(replay.replies) - 1)]
                replay.served += 1
                text = reply["content"]
                words = reply.get("completion_tokens") or max(1, len(text) // 4)
                prompt = reply.get("prompt_tokens") or 1500
                limit = body.get("max_tokens")
                finish = reply.get("finish_reason", "stop")
                if limit and words > limit:  # a server stops at max_tokens
                    text, words, finish = text[: limit * 4], limit, "length"
                payload = json.dumps(
                    {
                        "id": "replay",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": "replay",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": finish,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": words,
                            "total_tokens": prompt + words,
                        },
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _judge(case: dict[str, Any], doc: Any, before_ids: set[str]) -> tuple[bool, list[str]]:
    """Whether ``doc`` is the correct memory after ``case``, and the junk stored."""
    expect = case["expect"]
    new = [fact for fact in doc.facts if fact.id not in before_ids]
    junk = []
    wanted = [[word.casefold() for word in words] for words in expect["facts"]]
    for fact in new:
        text = fact.content.casefold()
        if not any(all(word in text for word in words) for words in wanted):
            junk.append(f"fact {fact.content[:60]!r}")
    found = all(
        any(all(word in fact.content.casefold() for word in words) for fact in doc.facts)
        for words in wanted
    )
    held = {fact.id for fact in doc.facts}
    removed_ok = all(fact_id not in held for fact_id in expect["removed"]) and all(
        fact_id in held for fact_id in before_ids - set(expect["removed"])
    )
    sections_ok = True
    for name, section in doc.sections().items():
        words = expect["sections"].get(name)
        if words is None:
            if section.summary:
                junk.append(f"{name} {section.summary[:60]!r}")
                sections_ok = False
        elif not all(word.casefold() in section.summary.casefold() for word in words):
            sections_ok = False
    return found and removed_ok and sections_ok and not junk, junk


def worker(fixture: Path, base_url: str | None, model: str, api_key: str | None) -> None:
    import logging

    import sqlalchemy as sa

    from memory_sql import Fact, MemoryConfig, MemoryDocument
    from memory_sql.storage import open_storage
    from memory_sql.update.updater import MemoryUpdater

    logging.disable(logging.CRITICAL)
    cases = json.loads(fixture.read_text(encoding="utf-8"))["cases"]
    known = set(MemoryConfig.model_fields)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for number, case in enumerate(cases):
            replay = None if base_url else _Replay(case["replies"])
            settings = {
                "model_name": model,
                "llm_base_url": base_url or replay.base_url,  # type: ignore[union-attr]
                "llm_api_key": api_key or "not-needed",
                "llm_timeout_seconds": 300.0,
                "llm_max_retries": 0,
            }
            config = MemoryConfig(**{k: v for k, v in settings.items() if k in known})
            url = f"sqlite:///{tmp}/case{number}.db"
            storage = open_storage(url)
            doc = MemoryDocument(facts=[Fact(**fact) for fact in case["memory"]])
            storage.save(doc, user_id="u", expected_version=0)
            updater = MemoryUpdater(config, storage)
            started = time.monotonic()
            try:
                result = updater.update_memory(case["conversation"], thread_id="t", user_id="u")
                after = storage.load(user_id="u")
                with storage.engine.connect() as conn:
                    rows = conn.execute(
                        sa.text("SELECT outcome, completion_tokens FROM memory_llm_calls")
                    ).all()
            finally:
                updater.close()
                storage.close()
                if replay is not None:
                    replay.close()
            correct, junk = _judge(case, after, {fact["id"] for fact in case["memory"]})
            results.append(
                {
                    "id": case["id"],
                    "kind": case["kind"],
                    "correct": correct,
                    "junk": junk,
                    "ok": result.ok,
                    "rejected": getattr(result, "rejected", {}),
                    "calls": [list(row) for row in rows],
                    "max_tokens": replay.max_tokens if replay is not None else None,
                    "seconds": round(time.monotonic() - started, 2),
                }
            )
    print(json.dumps(results))


# The driver ----------------------------------------------------------------------------------


def _export(ref: str, into: Path) -> Path:
    """The package and migrations of git ``ref``, unpacked into ``into``."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "memory_sql", "alembic", "alembic.ini"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return into


def _run(source: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    command = [sys.executable, __file__, "--worker", "--fixture", str(args.fixture)]
    command += ["--model", args.model]
    if args.base_url:
        command += ["--base-url", args.base_url]
    env = {**os.environ, "PYTHONPATH": str(source)}
    if args.api_key:
        env["OPENAI_API_KEY"] = args.api_key
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the worker on {source} failed:\n{done.stderr[-3000:]}")
    result: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _share(results: list[dict[str, Any]]) -> float:
    return sum(r["correct"] for r in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    parser.add_argument("--base-url", help="an OpenAI-compatible server instead of the replies")
    parser.add_argument("--model", default="replay")
    parser.add_argument("--api-key")
    parser.add_argument("--baseline", default="main", help="git ref of the code before")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.fixture, args.base_url, args.model, os.environ.get("OPENAI_API_KEY"))
        return
    source = f"model {args.model} at {args.base_url}" if args.base_url else "recorded replies"
    with tempfile.TemporaryDirectory() as tmp:
        before = _run(_export(args.baseline, Path(tmp)), args)
        after = _run(ROOT, args)
    cases = len(after)
    print(f"bench_models: {cases} cases of {args.fixture.name}, {source}")
    print(f"{'case':34} {'kind':24} {'before':>7} {'after':>6}  after: refused / calls")
    for old, new in zip(before, after, strict=True):
        refused = ", ".join(f"{k} ×{v}" for k, v in new["rejected"].items()) or "-"
        calls = " ".join(outcome for outcome, _ in new["calls"]) or "-"
        print(
            f"{new['id'][:34]:34} {new['kind'][:24]:24} {'yes' if old['correct'] else 'no':>7} "
            f"{'yes' if new['correct'] else 'no':>6}  {refused} / {calls}"
        )
    share_before, share_after = _share(before), _share(after)
    junk_before = sum(len(r["junk"]) for r in before)
    junk_after = sum(len(r["junk"]) for r in after)
    tokens_before = sum(t for r in before for _, t in r["calls"])
    tokens_after = sum(t for r in after for _, t in r["calls"])
    ratio = f"{share_after / share_before:.2f}x" if share_before else "n/a (before: 0)"
    print(
        f"correct memory: before {share_before:.0%} ({sum(r['correct'] for r in before)}/"
        f"{cases}), after {share_after:.0%} ({sum(r['correct'] for r in after)}/{cases}); "
        f"after/before {ratio}"
    )
    print(f"junk items stored: before {junk_before}, after {junk_after}")
    print(
        f"LLM calls recorded: before {sum(len(r['calls']) for r in before)}, after "
        f"{sum(len(r['calls']) for r in after)}; completion tokens recorded: before "
        f"{tokens_before}, after {tokens_after}"
    )
    sent = [r["max_tokens"] for r in after if r["max_tokens"]]
    if sent:
        print(f"max_tokens sent after: {sorted({m for ms in sent for m in ms if m})}")


if __name__ == "__main__":
    main()
