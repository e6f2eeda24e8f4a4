"""The searchable form of a fact's text, and of a query: one tokenizer for every backend.

The databases index what :func:`search_text` makes of a fact's content (stored beside it in
``memory_facts.search_text``: PostgreSQL keeps a ``tsvector`` of it, SQLite an FTS5 index), and
a query is cut into terms by :func:`query_terms`, so both sides agree on every backend:

- case and width folded as duplicates are (:func:`memory_sql.fact_key`: NFKC, ``casefold``), so
  ``strasse`` finds "Straße" and ``python`` finds "ＰＹＴＨＯＮ";
- accents folded (:func:`fold`): the diacritics of the Latin, Greek and Cyrillic alphabets are
  dropped and a few letters without a decomposition spelled plainly (ø, ł, đ, æ, œ, …), so
  ``cafe`` finds "Café" and ``café`` finds "cafe", and so are the optional vowel points of
  Hebrew and Arabic; the marks of other scripts (kana's voicing, Indic vowel signs, Thai tone
  marks) are letters of their words and stay;
- words are runs of letters and digits; punctuation and symbols separate them and are never
  terms, so no user text can carry FTS5 or ``tsquery`` syntax into a query;
- Chinese, Japanese and Korean characters are a term each (those scripts do not put spaces
  between words), so "咖啡" finds "我每天早上喝咖啡" through 咖 and 啡;
- Thai, Lao, Khmer and Myanmar, alphabets written without spaces between words, are cut into
  overlapping pairs of characters (each with its marks), so "กาแฟ" finds "ฉันชอบกาแฟเย็น"
  through กา, าแ and แฟ;
- Latin words are cut to a light stem (``deploys``, ``deploying``, ``deployed`` → ``deploy``)
  so that a question's inflection still meets the fact's.

:func:`query_terms` also leaves out a short list of function words ("the", "what", "是", …)
that would otherwise match nearly every fact.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata


def _ranges(*spans: tuple[int, int], category: str) -> str:
    """A regular expression class body of the code points in ``spans`` whose Unicode category
    starts with ``category``."""
    points = [
        point
        for low, high in spans
        for point in range(low, high + 1)
        if unicodedata.category(chr(point)).startswith(category)
    ]
    runs: list[list[int]] = []
    for point in points:
        if runs and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])
    return "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in runs)


# Alphabets written without spaces between words: Thai, Lao, Myanmar, Khmer.
_UNSPACED_SPANS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF))
_UNSPACED = "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in _UNSPACED_SPANS)
# Combining marks (vowel signs, viramas, tone marks, …) belong to the word they are in; Python's
# ``\\w`` leaves them out, which cut "हिन्दी" into ह, न, द. Their blocks, not all of Unicode: the
# classes are built at import.
_MARKS = _ranges(
    (0x0300, 0x0DFF),
    (0x0F00, 0x0FFF),
    (0x10A0, 0x177F),
    (0x1800, 0x1DFF),
    (0x20D0, 0x20FF),
    (0xA670, 0xABFF),
    (0xFE20, 0xFE2F),
    (0x11000, 0x11FFF),
    category="M",
)
_UNSPACED_MARKS = _ranges(*_UNSPACED_SPANS, category="M")
_CLUSTER = re.compile(f".[{_UNSPACED_MARKS}]*", re.DOTALL)
# The diacritics :func:`fold` drops: the general-purpose combining blocks (Latin, Greek,
# Cyrillic), and the optional vowel points of Hebrew and Arabic (niqqud, harakat).
_DIACRITICS = re.compile(
    "[\\u0300-\\u036f\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f"
    "\\u0591-\\u05bd\\u05bf\\u05c1\\u05c2\\u05c4\\u05c5\\u05c7"
    "\\u064b-\\u065f\\u0670\\u06d6-\\u06dc\\u06df-\\u06e4\\u06e7\\u06e8\\u06ea-\\u06ed]"
)
_PLAIN_LETTERS = str.maketrans(
    {
        "ø": "o",
        "đ": "d",
        "ð": "d",
        "ł": "l",
        "ħ": "h",
        "ŧ": "t",
        "ı": "i",
        "æ": "ae",
        "œ": "oe",
        "þ": "th",
    }
)

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
_TOKEN = re.compile(
    rf"[{_CJK}]|(?P<unspaced>[{_UNSPACED}]+)|(?:[^\W_{_CJK}{_UNSPACED}]|[{_MARKS}])+"
)
_WORD = re.compile(r"[^\W_]+")
# What :data:`_TOKEN` finds in a text with no mark and no unspaced script.
_WORD_OR_CJK = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
# The blocks of :data:`_UNSPACED` and :data:`_MARKS` (a class of five ranges is searched far
# faster than one of every mark).
_CLUSTERED = re.compile(
    "[\u0300-\u1dff\u20d0-\u20ff\ua670-\uabff\ufe20-\ufe2f\U00011000-\U00011fff]"
)
# Where every character :func:`fold` changes after ``casefold`` lies (Latin, Greek, Cyrillic,
# Hebrew, Arabic and the combining blocks): a text with none of them is folded already.
_FOLDABLE = re.compile("[\u0080-\u2fff\ufb00-\ufe2f]")
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


def fold(text: str) -> str:
    """``text`` folded for search: NFKC, ``casefold``, then the diacritics of the Latin, Greek
    and Cyrillic alphabets and the vowel points of Hebrew and Arabic dropped (NFD, those
    combining marks removed, NFC again) and ø, đ, ð, ł, ħ, ŧ, ı, æ, œ, þ spelled o, d, d, l,
    h, t, i, ae, oe, th."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii() or _FOLDABLE.search(folded) is None:
        return folded
    return _without_diacritics(folded)


def _without_diacritics(folded: str) -> str:
    plain = _DIACRITICS.sub("", unicodedata.normalize("NFD", folded))
    return unicodedata.normalize("NFC", plain.translate(_PLAIN_LETTERS))


def _terms(text: str) -> list[str]:
    folded = fold(text)
    if not folded or max(folded) < "\u0300":  # no mark, CJK or unspaced script: words only
        return [stem(token[:MAX_TERM_CHARS]) for token in _WORD.findall(folded)]
    if _CLUSTERED.search(folded) is None:  # no mark, no unspaced script: words and CJK
        return [stem(token[:MAX_TERM_CHARS]) for token in _WORD_OR_CJK.findall(folded)]
    return _clustered_terms(folded)


def _clustered_terms(folded: str) -> list[str]:
    """The terms of any folded text, unspaced scripts cut into pairs of clusters."""
    terms = []
    for match in _TOKEN.finditer(folded):
        token = match.group()
        if match.group("unspaced") is None:
            terms.append(stem(token[:MAX_TERM_CHARS]))
            continue
        clusters = _CLUSTER.findall(token)
        if len(clusters) == 1:
            terms.append(token)
        else:
            terms.extend(a + b for a, b in itertools.pairwise(clusters))
    return terms


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
