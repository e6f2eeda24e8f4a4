"""Semantic dedupe: a new fact that says what a live fact already says is a confirmation.

The casefold key (:func:`~memory_sql.fact_key`) catches a fact said again in the same words;
:class:`SemanticDedupe` catches it said in other words. Before an update is applied, the new
facts' texts are embedded in one request (in the worker, after the LLM's reply, outside any
write transaction) and compared with the vectors of the memory's live facts; a new fact whose
cosine with one of them is at least ``dedupe_cosine`` (0.88 by default; docs/semantic-recall.md
has the measurement behind it) and whose particulars agree with it (:func:`particulars_agree`:
the same numbers, names and CJK characters) confirms that fact instead of being added, unless
the LLM said it replaces facts (a supersession). The particulars guard the cases a sentence
embedding cannot tell apart: "Watched Dune with Jonas on 3 May" and "... with Rui on 9 June"
are different events, "Sierra is written in Java" and "... in Kotlin" a change, and a model
that does not read Chinese or Japanese places all of their sentences together.
Without an embedding endpoint, or when the call fails, no
fact is held back this way (the failure is counted and logged).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from ..embeddings import Embedder, EmbeddingError
from ..errors import StorageError
from ..models import MemoryDocument
from ..scope import Scope
from ..storage.vectors import FactVectors

logger = logging.getLogger(__name__)

_WORD = re.compile(r"[^\W_]+")
_NUMBER = re.compile(r"\d+")


def _particulars(text: str) -> tuple[set[str], set[str]]:
    """The text's words (casefolded), and its particulars: numbers, capitalised words (names),
    and every letter outside ASCII (CJK and the like: a model that does not read them cannot
    be trusted with them)."""
    words = _WORD.findall(text)
    numbers = set(_NUMBER.findall(text))  # also inside CJK runs: 2026年10月18日
    letters = {char for char in text if char.isalpha() and not char.isascii()}
    folded = {word.casefold() for word in words} | numbers | letters
    # A capitalised first word is a name when the next is capitalised too ("Zara Kowalski"),
    # else the sentence's start ("Bought running shoes").
    first = 0 if len(words) > 1 and words[0][0].isupper() and words[1][0].isupper() else 1
    names = {word.casefold() for word in words[first:] if word[0].isupper()}
    return folded, numbers | letters | names


def particulars_agree(first: str, second: str) -> bool:
    """True when every particular of each text (numbers, names, non-Latin letters; see
    :func:`_particulars`) is found in the other."""
    words_a, special_a = _particulars(first)
    words_b, special_b = _particulars(second)
    return special_a <= words_b and special_b <= words_a


class SemanticDedupe:
    """Finds, for new facts' texts, the live fact of the memory each restates."""

    def __init__(self, embedder: Embedder, vectors: FactVectors, cosine: float) -> None:
        self.embedder = embedder
        self.vectors = vectors
        self.cosine = cosine

    def restated(
        self, memory: MemoryDocument, scope: Scope, texts: Sequence[str]
    ) -> dict[str, str]:
        """Text → id of the live fact of ``memory`` it restates (cosine ≥ the threshold), for
        the ``texts`` that restate one. Never raises: on failure, ``{}``."""
        if not texts or not memory.facts or self.cosine >= 1.0:
            return {}
        try:
            ids, rows = self.vectors.matrix(scope, memory.facts, memory.version)
            if not ids:
                return {}
            vectors = self.embedder.embed_batch(list(texts))
        except (EmbeddingError, StorageError) as exc:
            logger.warning("memory %s: semantic dedupe skipped: %s", scope, exc)
            return {}
        if vectors.shape[1] != rows.shape[1]:
            return {}
        cosines = vectors @ rows.T
        found = {}
        contents = {fact.id: fact.content for fact in memory.facts}
        for text, row in zip(texts, cosines, strict=True):
            best = int(row.argmax())
            if row[best] >= self.cosine and particulars_agree(text, contents[ids[best]]):
                found[text] = ids[best]
        return found
