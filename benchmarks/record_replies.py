"""Record a real model's replies to the update prompt, as a fixture ``bench_models.py`` (and the
tests) replay.

For each case of a fixture (its conversation and memory), the update prompt is built as the
updater builds it and sent to an OpenAI-compatible server, once per ``--mode``
(``llm_structured_output``: ``auto`` sends the update's JSON Schema as the endpoint accepts,
``off`` sends none); the raw reply, its ``finish_reason`` and token counts are written with the
case, one recorded case per (case, mode)::

    python benchmarks/record_replies.py --base-url http://127.0.0.1:8080/v1 --model smollm2 \\
        --out benchmarks/model_replies/smollm2_135m.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_models import FIXTURE

from memory_sql import Fact, MemoryConfig, MemoryDocument
from memory_sql.intake import take_conversation
from memory_sql.update.llm import LLMClient
from memory_sql.update.parser import update_json_schema
from memory_sql.update.prompt import build_update_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--mode", action="append", choices=["auto", "off"])
    parser.add_argument("--cases", type=int, default=0, help="only the first N cases")
    args = parser.parse_args()
    source = json.loads(args.fixture.read_text(encoding="utf-8"))
    cases = source["cases"][: args.cases or None]
    recorded = []
    for mode in args.mode or ["auto", "off"]:
        config = MemoryConfig(
            model_name=args.model,
            llm_base_url=args.base_url,
            llm_structured_output=mode,
            llm_timeout_seconds=600,
            llm_max_retries=0,
        )
        client = LLMClient.from_config(config, env={})
        for case in cases:
            memory = MemoryDocument(facts=[Fact(**fact) for fact in case["memory"]])
            turns = take_conversation(case["conversation"]).turns
            prompt = build_update_prompt(memory, turns, correction=False, reinforcement=False)
            started = time.monotonic()
            completion = client.complete(prompt, schema=update_json_schema())
            seconds = round(time.monotonic() - started, 1)
            print(
                f"{mode:4} {case['id']:32} {completion.finish_reason:6} {seconds:6}s "
                f"{completion.text[:70]!r}",
                flush=True,
            )
            recorded.append(
                {
                    **case,
                    "id": f"{case['id']}@{mode}",
                    "kind": f"recorded ({'with' if mode == 'auto' else 'without'} response_format)",
                    "replies": [
                        {
                            "content": completion.text,
                            "finish_reason": completion.finish_reason or "stop",
                            "prompt_tokens": completion.prompt_tokens,
                            "completion_tokens": completion.completion_tokens,
                        }
                    ],
                    "response_format": client.response_format_in_use(),
                }
            )
            _write(args, recorded)  # after every reply: a slow model's work is kept
        client.close()


def _write(args: argparse.Namespace, recorded: list[dict]) -> None:
    args.out.write_text(
        json.dumps(
            {
                "about": f"Real replies of {args.model} ({args.base_url}) to the update prompt, "
                f"recorded by benchmarks/record_replies.py on {time.strftime('%Y-%m-%d')} for "
                f"the conversations of {args.fixture.name}; 'expect' is the correct memory.",
                "cases": recorded,
            },
            ensure_ascii=False,
            indent=1,
        ),
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
