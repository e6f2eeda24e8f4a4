"""The searchable form of a fact's text, and of a query: one tokenizer for every backend.

The databases index what :func:`search_text` makes of a fact's content (stored beside it in
``memory_facts.search_text``: PostgreSQL keeps a ``tsvector`` of it, SQLite an FTS5 index), and
a query is cut into terms by :func:`query_terms`, so both sides agree on every backend:

- case and width folded as duplicates are (:func:`memory_sql.fact_key`: NFKC, ``casefold``), so
  ``strasse`` finds "Straße" and ``python`` finds "ＰＹＴＨＯＮ";
- words are runs of letters and digits; punctuation and symbols separate them and are never
  terms, so no user text can carry FTS5 or ``tsquery`` syntax into a query;
- Chinese, Japanese and Korean characters are a term each (those scripts do not put spaces
  between words), so "咖啡" finds "我每天早上喝咖啡" through 咖 and 啡;
- Latin words are cut to a light stem (``deploys``, ``deploying``, ``deployed`` → ``deploy``)
  so that a question's inflection still meets the fact's.

:func:`query_terms` also leaves out a short list of function words ("the", "what", "是", …)
that would otherwise match nearly every fact.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Han (with extensions and compatibility ideographs), kana, Hangul, CJK punctuation excluded.
_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u31f0-\u31ff"  # katakana extensions
    "\u3400-\u4dbf"  # Han extension A
    "\u4e00-\u9fff"  # Han
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # Han compatibility
    "\U00020000-\U0002fa1f"  # Han extensions B-F and supplement
)
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_ASCII_WORD = re.compile(r"[a-z]+")

MAX_QUERY_TERMS = 48
"""At most this many distinct terms of a query are looked up (the first ones)."""

MAX_TERM_CHARS = 64
"""A longer word is cut to its first 64 characters, in facts and queries alike (PostgreSQL
indexes no word of over 2 047 bytes, and no real word is that long)."""

_FUNCTION_WORDS = """
    a an and are as at be been but by can could did do does for from had has have he her him
    his how i if in into is it its me my of on or our she so than that the their them then there
    these they this to was we were what when where which who whom why will with would you your
    am about all also just no not yes please tell know remember some
    的 了 是 在 我 你 他 她 吗 呢 吧 和 与 也 都 就 么 什 那 这 个 有
    の は が を に で と も た す か な い る ま し"""


def search_text(content: str) -> str:
    """``content`` as the space-separated terms the full-text index holds."""
    return " ".join(_terms(content))


def query_terms(text: str) -> list[str]:
    """The distinct terms of ``text`` to look up, in order of first appearance, function words
    left out (all of them kept when nothing else is left), at most :data:`MAX_QUERY_TERMS`."""
    terms = list(dict.fromkeys(_terms(text)))
    content = [term for term in terms if term not in STOPWORDS]
    return (content or terms)[:MAX_QUERY_TERMS]


def _terms(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [stem(token[:MAX_TERM_CHARS]) for token in _TOKEN.findall(folded)]


@functools.lru_cache(maxsize=100_000)
def stem(word: str) -> str:
    """A light English stem of a lower-case word (other words are returned as they are)."""
    if len(word) < 4 or not _ASCII_WORD.fullmatch(word):
        return word
    for suffix, keep in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= keep:
            word = word[: -len(suffix)] + _REPLACE.get(suffix, "")
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running → runn → run
            break
    if len(word) > 3 and word[-1] == "e":
        word = word[:-1]  # like, likes, liked → lik
    return word


# (suffix, letters that must remain), tried in order; the first that applies is cut.
_SUFFIXES = (
    ("ational", 3),
    ("fulness", 3),
    ("iveness", 3),
    ("ations", 3),
    ("ation", 3),
    ("ments", 3),
    ("ment", 3),
    ("ness", 3),
    ("ings", 3),
    ("ing", 3),
    ("ies", 2),
    ("ied", 2),
    ("edly", 3),
    ("ed", 3),
    ("ers", 3),
    ("er", 3),
    ("ly", 3),
    ("s", 3),
)
_REPLACE = {"ational": "ate", "ations": "ate", "ation": "ate", "ies": "y", "ied": "y"}


STOPWORDS = frozenset(stem(word) for word in _FUNCTION_WORDS.split())
"""Terms a query does not look up (stemmed as the terms are)."""
