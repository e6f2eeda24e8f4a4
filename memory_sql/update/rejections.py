"""What part of a memory-LLM reply was refused, and why: the closed set of reasons.

A reply is read item by item (:mod:`memory_sql.update.parser`): a fact, a removal or a section
that cannot be stored is dropped with one of these reasons, and the rest of the reply is
applied. The scope gate (:func:`memory_sql.update.updater.gate_reason`) and the removal of ids
the memory does not hold add their own. Every refusal is counted by reason in
``UpdateResult.rejected``, logged at INFO, shown by ``status()``, the Prometheus metric
``memory_sql_reply_items_rejected`` and the view ``memory_report_llm_rejections``.

Parsing:

- ``malformed``: not the shape asked for (a fact that is not an object, ``shouldUpdate`` not a
  boolean, a summary that is not text, a NUL byte);
- ``empty``: a fact, removal, summary or aging item (a stale removal or extension, a
  confirmation, a replaced id, a consolidation) with no text;
- ``placeholder``: the prompt's example echoed (``"<one sentence about the user>"``), a template
  word (``"..."``, ``"fact_id"``, ``"string"``), or text without a letter or digit;
- ``too_long``: text over the limit the JSON Schema states;
- ``too_many``: facts, removals or aging items past the schema's ``maxItems`` (the first ones
  are kept);
- ``confidence_out_of_range``: outside [0, 1] by more than
  :data:`~memory_sql.update.parser.CONFIDENCE_TOLERANCE` (within it, the value is clamped);
- ``confidence_invalid``: a confidence missing, or not a number (``"high"``, ``true``, NaN);
- ``category_invalid``: a category that is not a short label (``"pref erence!"``);
- ``instruction``: a fact or summary worded as an instruction or a role marker aimed at the
  assistant (:mod:`memory_sql.intake.instructions`): memory is data, never instructions.

Applying:

- ``unknown_id``: a removal naming an id the memory does not hold (or that cannot be an id);
- ``label_missing``, ``label_unknown``: a scope-gate label left out, or not one of its values;
- ``thread_scope``, ``project_scope``, ``temporary``, ``transactional``: the gate's verdicts;
- ``one_off``: labelled durable, but written as a rule for the task at hand ("for this
  report …", "today …");
- ``replacement_refused``: a removal held back because a new fact of the same reply was
  refused (by the parser, for any reason above, or by the scope gate): a removal is applied
  only with what replaces it, so the old fact stays live (``docs/security.md``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

PARSE_REASONS = (
    "malformed",
    "empty",
    "placeholder",
    "too_long",
    "too_many",
    "confidence_out_of_range",
    "confidence_invalid",
    "category_invalid",
    "instruction",
)
APPLY_REASONS = (
    "unknown_id",
    "label_missing",
    "label_unknown",
    "thread_scope",
    "project_scope",
    "temporary",
    "transactional",
    "one_off",
    "replacement_refused",
)
REASONS = PARSE_REASONS + APPLY_REASONS
"""Every reason a part of a reply is refused (a closed set: metric labels come from it)."""

KINDS = (
    "fact",
    "section",
    "removal",
    "replacement",
    "reinforcement",
    "stale_removal",
    "stale_extension",
    "consolidation",
)


@dataclass(frozen=True)
class Rejection:
    """One refused part of a reply: its ``kind`` (one of :data:`KINDS`), the
    ``reason`` (one of :data:`REASONS`) and its text, shortened, for the log."""

    kind: str
    reason: str
    text: str

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"unknown rejection reason {self.reason!r}")


def count(rejections: Iterable[Rejection]) -> dict[str, int]:
    """How many of ``rejections`` there are of each reason, most frequent first."""
    return dict(Counter(item.reason for item in rejections).most_common())


def describe(counts: dict[str, int]) -> str:
    """``"placeholder ×2, empty ×1"``: counts for a log line or an error."""
    return ", ".join(f"{reason} ×{number}" for reason, number in counts.items())
