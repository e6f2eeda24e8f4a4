"""``memory-sql llm check``: does the configured memory LLM answer, and how are its replies held
to the update's JSON Schema."""

from __future__ import annotations

import math

import typer

from ..config import MemoryConfig
from ..database import redacted
from ..update.llm import LLMClient, probe
from ..update.parser import update_json_schema
from ._common import ConfigOption, app, command, err, group, lit, load_config, out

llm_app = group(help="The memory LLM: check the endpoint the configuration names.")
app.add_typer(llm_app, name="llm")

NO_STRUCTURED_OUTPUT = 3
"""The exit status of a check whose endpoint answers only without ``response_format``."""

REPLY_TOKENS = 600
"""The longest memory-LLM reply measured (``benchmarks/bench_reply_sizes.py``), in tokens: the
probe's 16-token answer time, scaled to it, is what an update's call may take."""
PROBE_TOKENS = 16

_MODES = {
    "json_schema": "json_schema (decoding held to the update's JSON Schema)",
    "json_object+schema": "json_object with the schema (llama.cpp's form)",
    "json_object": "json_object (JSON, not held to the schema)",
    "none": "none (no response_format accepted: JSON only because the prompt asks)",
}


@command(llm_app, "check")
def check(config: ConfigOption = None) -> None:
    """Ask the configured memory LLM one short question per structured-output mode.

    Sends the update's JSON Schema as response_format json_schema, then, if the
    endpoint refuses it, json_object with the schema, plain json_object, and
    none, as updates do; without the client's retries, each reply at most 16
    tokens. Prints the endpoint, the model and the first mode it accepts.

    Exit status: 0 the endpoint answers with structured output (json_schema or
    json_object); 3 it answers only without response_format; 1 it does not
    answer (no model configured, a refused connection, a timeout, an HTTP
    error such as 401 or 404).

    Example:
        memory-sql llm check --config config.yaml
        OPENAI_BASE_URL=http://127.0.0.1:11434/v1 OPENAI_MODEL=qwen2.5:3b memory-sql llm check
    """
    settings = load_config(config)
    client = LLMClient.from_config(settings)
    where = f"{lit(redacted(client.base_url))}, model {lit(client.model or '(none)')}"
    out.print(f"memory LLM: {where}", highlight=False, soft_wrap=True)
    try:
        steps = probe(client, update_json_schema())
    finally:
        client.close()
    for step in steps:
        if step.accepted:
            out.print(f"  {step.format}: answered in {step.seconds:.2f} s", highlight=False)
        else:
            assert step.error is not None
            out.print(f"  {step.format}: {lit(step.error)}", highlight=False, soft_wrap=True)
    last = steps[-1]
    if not last.accepted:
        err.print(
            f"[red]error:[/red] the memory LLM does not answer: {lit(last.error)}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)
    out.print(f"structured output: {_MODES[last.format]}", highlight=False, soft_wrap=True)
    _slow_model_advice(settings, last.seconds)
    configured = settings.llm.structured_output if settings.llm.json_mode else "off"
    out.print(f"llm_structured_output is {configured}", highlight=False)
    if last.format == "none":
        raise typer.Exit(NO_STRUCTURED_OUTPUT)


def _slow_model_advice(settings: MemoryConfig, seconds: float) -> None:
    """Say what a slow model (a small one on a CPU) needs when its ``seconds`` for a 16-token
    answer, scaled to a whole reply, come near ``llm_timeout_seconds``: else every update times
    out, its retries queue behind the request still running on the server, and a lease may end
    while the call runs (another worker then runs the update again)."""
    expected = seconds * REPLY_TOKENS / PROBE_TOKENS
    if expected <= settings.llm.timeout_seconds / 2:
        return
    timeout = min(600, math.ceil(expected * 1.5 / 10) * 10)
    lease = max(settings.queue.lease_seconds, timeout + 120)
    out.print(
        f"[yellow]note:[/yellow] a {PROBE_TOKENS}-token answer took {seconds:.1f} s: an "
        f"update's reply (up to about {REPLY_TOKENS} tokens) may take {expected:.0f} s, and "
        f"llm_timeout_seconds is {settings.llm.timeout_seconds:g}. For this model set:\n"
        f"  llm_timeout_seconds: {timeout}\n"
        "  llm_max_retries: 0     # a timed-out request keeps running on the server; a retry "
        "queues behind it\n"
        f"  lease_seconds: {lease:g}     # longer than one call may take",
        highlight=False,
        soft_wrap=True,
    )
