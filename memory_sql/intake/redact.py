"""Credentials out of memory: find value-shaped secrets in text and put a typed placeholder
in their place (``[redacted: aws-secret]``), so that the sentence keeps its meaning ("deploys
with an AWS key" stays learnable) and the secret is never stored, sent or shown.

What is found (the *kinds*, a closed set: metric labels and the reporting view use them):

- ``openai-key`` (``sk-…``, ``sk-proj-…``), ``anthropic-key`` (``sk-ant-…``),
  ``aws-key-id`` (``AKIA…``/``ASIA…``), ``aws-secret`` (40 characters of base64 next to an AWS
  or secret key word), ``gcp-key`` (``AIza…``), ``azure-key`` (``AccountKey=…``,
  ``SharedAccessKey=…``, ``sig=…`` of a SAS URL, Entra client secrets ``…8Q~…``),
  ``github-token`` (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``, ``github_pat_``),
  ``gitlab-token`` (``glpat-`` and the other ``gl…-`` prefixes), ``slack-token``
  (``xoxb-``/``xoxp-``/… and incoming-webhook URLs), ``stripe-key`` (``sk_live_``,
  ``rk_test_``, ``whsec_``, …);
- ``jwt`` (three base64url parts, the first two JSON), ``bearer-token`` (the value after
  ``Bearer``/``Authorization: token``);
- ``private-key`` (a PEM ``-----BEGIN … PRIVATE KEY-----`` block, to its END line or, cut
  short, to its last base64 line);
- ``url-password`` (``scheme://user:PASSWORD@host``: the user and host stay),
  ``password`` (the value of ``password=``, ``passwd:``, ``secret:``, ``api_key=``,
  ``token:`` …, or "my password is X" when X has a digit or a symbol);
- ``card-number`` (13–19 digits ``0-9``, spaced or dashed in groups, with a card network's prefix,
  that pass the Luhn check);
- ``secret`` (a high-entropy string of 20+ characters within a few words after a key word:
  key, token, secret, credential, password, auth).

What stays: AWS's documented example keys (``AKIAIOSFODNN7EXAMPLE``,
``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY`` and any AWS-shaped value ending in ``EXAMPLE``/
``EXAMPLEKEY``), numbers that fail Luhn or lack a card prefix, git SHAs and other plain hex
digests, UUIDs, the placeholders this module writes, and values on the allow-list.

One compiled alternation finds every candidate in one pass; a candidate is checked (Luhn,
entropy, allow-list) only where the pattern alone cannot tell. Text holding nothing every match
of a built-in pattern holds (a key word, a prefix, a run of digits as long as a card number) is
not scanned at all: that check costs a few substring searches, the full regex several times
more. Extra patterns
(kind → regex, the whole match redacted, or its ``value`` group) come from settings, and are
searched after the built-in ones (they switch that quick check off).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..config import MemoryConfig

KINDS = (
    "openai-key",
    "anthropic-key",
    "aws-key-id",
    "aws-secret",
    "gcp-key",
    "azure-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "stripe-key",
    "jwt",
    "bearer-token",
    "private-key",
    "url-password",
    "password",
    "card-number",
    "secret",
)
"""The built-in kinds of secret, in the order their patterns are tried."""

PLACEHOLDER = "[redacted: {}]"
_PLACEHOLDER_RE = re.compile(r"\[redacted: [a-z0-9-]{1,40}\]")

DOCUMENTED_EXAMPLES = frozenset(
    {
        "AKIAIOSFODNN7EXAMPLE",
        "AKIAI44QH8DHBEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
    }
)
"""AWS's documented example credentials: they stay (and so does any AWS-shaped value ending in
``EXAMPLE`` or ``EXAMPLEKEY``)."""

# The value of a key word: what follows ``=``, ``:``, ``is`` (quoted or not).
_B64 = r"[A-Za-z0-9+/]"
_KEYWORD_SECRET = (
    r"(?:api[_ -]?key|apikey|access[_ -]?key|secret[_ -]?key|private[_ -]?key|client[_ -]?secret"
    r"|auth[_ -]?token|access[_ -]?token|refresh[_ -]?token|token|secret|credentials?|passphrase"
    r"|password|passwd|pwd)"
)

_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]{0,8000}?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:[\s\\n]*(?:[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment):[^\n]*))*)",
    ),
    ("anthropic-key", r"\bsk-ant-(?:api|admin|sid)\d{2}-[A-Za-z0-9_-]{20,}"),
    (
        "openai-key",
        r"\bsk-(?:(?:proj|svcacct|admin|None)-)?[A-Za-z0-9_-]{16,}T3BlbkFJ[A-Za-z0-9_-]{16,}"
        r"|\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|\bsk-[A-Za-z0-9]{32,}\b",
    ),
    ("aws-key-id", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),
    (
        "aws-secret",
        r"(?i:aws|amazon|secret|s3|iam)[\w .\"'-]{0,30}?[:=\s\"']\s*[\"']?"
        r"(?P<v_aws_secret>(?<![A-Za-z0-9+/])" + _B64 + r"{40}(?!" + _B64 + r"))",
    ),
    ("gcp-key", r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    (
        "azure-key",
        r"(?i:AccountKey|SharedAccessKey|PrimaryKey|SecondaryKey)=(?P<v_azure>"
        + _B64
        + r"{30,}={0,2})"
        r"|[?&]sig=(?P<v_azure_sig>[A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})"
        r"|(?<![\w~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])",
    ),
    (
        "github-token",
        r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b|\bgithub_pat_[A-Za-z0-9_]{60,255}\b",
    ),
    (
        "gitlab-token",
        r"\bgl(?:pat|dt|rt|ptt|ft|imt|agent|oas|cbt|soat|ffct)-[A-Za-z0-9_-]{20,}",
    ),
    (
        "slack-token",
        r"\bxox[abposre]-(?:\d+-)*[A-Za-z0-9-]{10,}"
        r"|https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]{20,}",
    ),
    (
        "stripe-key",
        r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}\b|\bwhsec_[A-Za-z0-9]{24,}\b",
    ),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    (
        "bearer-token",
        r"(?i:\bbearer|authorization:\s*(?:token|basic))\s+"
        r"(?P<v_bearer>[A-Za-z0-9._~+/-]{16,}=*)",
    ),
    (
        "url-password",
        r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/?#@\[\]]{1,64}:(?P<v_url>[^\s@/?#\[\]]{1,128})@"
        r"(?=[A-Za-z0-9\[])",
    ),
    (
        "password",
        r"(?i:(?:password|passwd|passphrase|(?<![A-Za-z])(?:pwd|pass|secret|api[_-]?key|apikey"
        r"|client[_-]?secret|auth[_-]?token|access[_-]?token|token))[\"']?)\s*(?:[:=]|=>)\s*"
        r"(?P<v_assign>\"[^\"\n]{3,200}\"|'[^'\n]{3,200}'|[^\s\"',;)}\]]{3,200})"
        r"|(?i:\b(?:password|passwd|passcode|passphrase|pin)\s+(?:is|was|=|:)\s+)"
        r"(?P<v_said>[\"']?[^\s\"',;]{4,100})",
    ),
    (
        "card-number",
        r"(?<![0-9.-])(?:[0-9][ -]?){12,18}[0-9](?![0-9])",
    ),
    (
        "secret",
        r"(?:(?i:(?<![A-Za-z])"
        + _KEYWORD_SECRET
        + r")\b[^\n]{0,24}?[\s:=\"'(]|(?i:\bkey)\s*[:=]\s*[\"']?)"
        r"(?P<v_secret>[A-Za-z0-9_+/=.~-]{19,199}[A-Za-z0-9_+/=~-])(?![A-Za-z0-9_+/=~-])",
    ),
)

_GENERIC = frozenset({"password", "secret", "bearer-token"})
_SPECIFIC_NAMES = (
    "anthropic-key",
    "openai-key",
    "aws-key-id",
    "gcp-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "stripe-key",
    "jwt",
    "azure-key",
)
_SPECIFIC = re.compile(
    "|".join(
        f"(?P<s{index}>{pattern})"
        for index, (kind, pattern) in enumerate(_PATTERNS)
        if kind in _SPECIFIC_NAMES
    )
)
_SPECIFIC_KINDS = {
    f"s{index}": kind for index, (kind, _) in enumerate(_PATTERNS) if kind in _SPECIFIC_NAMES
}
# What a built-in pattern's match always holds, in the text lowered (and ``ſ``, ``ı``, ``İ``
# folded as the patterns' case-insensitive parts fold them): a key word always looked for, or
# a prefix looked for only when its rarer mark is in the text; then ``pin`` and a space, an AWS
# key id's prefix (case kept), and for a card number (the one pattern of digits alone) a run of
# 13 or more digits, spaced or dashed as its pattern allows. Substring tests run at C speed,
# where one regex alternation of them all would try every branch at every position.
_ANCHOR_WORDS = (
    "key", "secret", "pass", "token", "pwd", "credential", "aws", "amazon", "iam", "aiza",
    "xox", "eyj", "bearer", "authorization",
)  # fmt: skip
_MARKED_ANCHORS = (
    ("-", ("sk-", "glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glimt-", "glagent-",
           "gloas-", "glcbt-", "glsoat-", "glffct-")),
    ("_", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "_live_", "_test_",
           "whsec_")),
    ("3", ("s3",)),
    ("~", ("q~",)),
    ("=", ("sig=",)),
    (":", ("://",)),
    (".", ("hooks.slack",)),
)  # fmt: skip
_FOLDED_BY_PATTERNS = ("ſ", "ı", "\u0307")
_FOLD = str.maketrans({"ſ": "s", "ı": "i", "\u0307": None})
_PIN = re.compile(r"pin\s")
_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")
_DIGITS = "0123456789"
_CARD_RUN = re.compile(r"(?:[0-9][ -]?){12,18}[0-9]")


def _might_hold_secret(text: str) -> bool:
    """Whether ``text`` holds an anchor a built-in pattern needs (see above): text without any
    has no secret, and costs a few substring scans instead of the full regex. (Plain loops:
    ``any()`` over a generator costs a third more here, on every kept turn.)"""
    low = text.lower()
    if not low.isascii() and any(map(low.__contains__, _FOLDED_BY_PATTERNS)):
        low = low.translate(_FOLD)
    for word in _ANCHOR_WORDS:
        if word in low:
            return True
    for mark, anchors in _MARKED_ANCHORS:
        if mark in low:
            for anchor in anchors:
                if anchor in low:
                    return True
    if "pin" in low and _PIN.search(low) is not None:
        return True
    if "A" in text:
        for prefix in _AWS_PREFIXES:
            if prefix in text:
                return True
    for digit in _DIGITS:
        if digit in text:
            return _CARD_RUN.search(text) is not None
    return False


_PASSWORD_WORD = re.compile(r"(?i)pass|pwd|pin")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?:0x)?[0-9a-fA-F]+")
_CARD_LENGTHS = (
    (re.compile(r"4"), (13, 16, 19)),
    (re.compile(r"5[1-5]|2[2-7]"), (16,)),
    (re.compile(r"3[47]"), (15,)),
    (re.compile(r"3[0689]"), (14,)),
    (re.compile(r"6(?:011|22|4[4-9]|5)|35"), (16, 17, 18, 19)),
)
"""Card networks: the prefix of their numbers, and the lengths those numbers have."""
_NOT_A_PASSWORD = frozenset(
    {
        "none",
        "null",
        "true",
        "false",
        "required",
        "optional",
        "redacted",
        "hidden",
        "masked",
        "changeme",
        "password",
        "secret",
        "token",
        "example",
        "xxxx",
        "xxxxxx",
        "xxxxxxxx",
        "****",
        "******",
        "********",
        "<password>",
        "<secret>",
        "<token>",
        "...",
        "str",
        "string",
        "env",
        "reset",
        "expired",
        "manager",
        "protected",
        "strong",
        "weak",
    }
)


def luhn_ok(digits: str) -> bool:
    """Whether ``digits`` (only digits) passes the Luhn check of card numbers."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character."""
    counts = Counter(text)
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


def _looks_random(value: str) -> bool:
    """A value that reads as generated, not as a word or a path: several character classes,
    high entropy, not a UUID nor plain hex (a git SHA, a digest), not a file path or a URL."""
    if _UUID.fullmatch(value) or _HEX.fullmatch(value):
        return False
    if value.count("/") >= 2 and not re.search(r"[0-9]", value.replace("/", "")[:8]):
        return False
    if "." in value and value.count(".") >= 2 and "_" not in value and value.islower():
        return False  # a host or a dotted name
    classes = (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
    )
    if classes < 2 or not any(c.isdigit() for c in value):
        return False
    return entropy(value) >= 3.5


@dataclass
class Redaction:
    """What :meth:`Redactor.redact` did to one text: the text with placeholders, and how many
    secrets of each kind it replaced."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def found(self) -> int:
        return sum(self.counts.values())


class Redactor:
    """Finds secrets (see the module docstring) and replaces them with typed placeholders.

    ``enabled=False`` returns every text as it is (redaction ``off``, an explicit setting).
    ``extra_patterns`` maps a kind name (``[a-z0-9-]+``) to a regex: its ``value`` group, else
    its whole match, is redacted. ``allow`` lists exact values never redacted (a test key the
    team uses in docs). Instances are immutable and safe to share between threads.

    Raises:
        ValueError: an extra pattern does not compile, or its kind is not a label.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        extra_patterns: Mapping[str, str] | None = None,
        allow: Iterable[str] = (),
    ) -> None:
        self.enabled = enabled
        self.allow = frozenset(allow) | DOCUMENTED_EXAMPLES
        parts = [f"(?P<k{index}>{pattern})" for index, (_, pattern) in enumerate(_PATTERNS)]
        self._kinds = {f"k{index}": kind for index, (kind, _) in enumerate(_PATTERNS)}
        for index, (kind, pattern) in enumerate((extra_patterns or {}).items()):
            if not re.fullmatch(r"[a-z0-9-]{1,40}", kind):
                raise ValueError(f"redaction pattern kind {kind!r} is not a label ([a-z0-9-]+)")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"redaction pattern {kind!r} does not compile: {exc}") from None
            group = f"x{index}"
            if "value" in compiled.groupindex:
                pattern = pattern.replace("(?P<value>", f"(?P<v_{group}>")
            parts.append(f"(?P<{group}>{pattern})")
            self._kinds[group] = kind
        self.kinds = tuple(dict.fromkeys(self._kinds.values()))
        self._pattern = re.compile("|".join(parts))
        self._prefilter = not extra_patterns
        self._value_groups = [
            (self._pattern.groupindex[name], name)
            for name in self._pattern.groupindex
            if name.startswith("v_")
        ]

    def redact(self, text: str) -> Redaction:
        """``text`` with each secret replaced by ``[redacted: <kind>]``, and the counts."""
        if not self.enabled or not text or (self._prefilter and not _might_hold_secret(text)):
            return Redaction(text)
        out: list[str] = []
        counts: dict[str, int] = {}
        last = pos = 0
        search = self._pattern.search
        while (match := search(text, pos)) is not None:
            group = match.lastgroup
            # typeshed: lastgroup is str | None; every alternative here is a named group.
            kind = self._kinds[group]  # type: ignore[index]
            start, end = match.span()
            valued = False
            for number, _ in self._value_groups:
                if match.start(number) >= 0:
                    start, end = match.span(number)
                    valued = True
                    break
            value = text[start:end]
            if valued and kind in _GENERIC:
                specific = _SPECIFIC.fullmatch(value.strip("\"'"))
                if specific is not None:  # its alternatives are all named groups too
                    kind = _SPECIFIC_KINDS[specific.lastgroup]  # type: ignore[index]
            if kind == "password" and not _PASSWORD_WORD.search(text, match.start(), start):
                kind = "secret"  # a token or key assigned, not a password
            if not self._is_secret(kind, value):
                pos = match.start() + 1 if valued else match.end()
                continue
            out.append(text[last:start])
            out.append(PLACEHOLDER.format(kind))
            counts[kind] = counts.get(kind, 0) + 1
            last = pos = end
        if not counts:
            return Redaction(text)
        out.append(text[last:])
        return Redaction("".join(out), counts)

    def __call__(self, text: str) -> str:
        return self.redact(text).text

    def _is_secret(self, kind: str, value: str) -> bool:
        bare = value.strip("\"'")
        if bare in self.allow or bare.startswith("[redacted") or _PLACEHOLDER_RE.search(bare):
            return False
        if kind in ("aws-key-id", "aws-secret") and (
            bare.endswith("EXAMPLE") or bare.endswith("EXAMPLEKEY")
        ):
            return False
        if kind == "card-number":
            digits = value.replace(" ", "").replace("-", "")
            if not any(p.match(digits) and len(digits) in n for p, n in _CARD_LENGTHS):
                return False
            if len(set(digits)) < 4 or not luhn_ok(digits):
                return False
            return _card_grouping(value)
        if kind == "aws-secret":
            return _looks_random(bare) or ("/" in bare or "+" in bare)
        if kind == "password":
            return _password_value(bare)
        if kind == "bearer-token":
            return any(c.isdigit() for c in bare) and entropy(bare) >= 3.0
        if kind == "secret":
            return _looks_random(bare)
        return True


def _card_grouping(value: str) -> bool:
    """Digits written as a card is: one run, or groups of 4 (Amex 4-6-5, Diners 4-6-4)."""
    if value.isdigit():
        return True
    groups = re.split(r"[ -]", value)
    if any(not g for g in groups):
        return False
    sizes = [len(g) for g in groups]
    return sizes in ([4, 6, 5], [4, 6, 4]) or all(s == 4 for s in sizes[:-1])


def _password_value(value: str) -> bool:
    low = value.lower().rstrip(".")
    if len(low) < 4 or low in _NOT_A_PASSWORD or _PLACEHOLDER_RE.fullmatch(value):
        return False
    if low.startswith(("${", "$", "%", "{{", "<", "os.environ", "env[", "process.env", "getenv")):
        return False  # a reference to a variable, not a value
    if low.replace("*", "").replace("x", "").replace("•", "") == "":
        return False  # masked already
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    has_upper = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return has_digit or has_symbol or has_upper or len(value) >= 12


# Redactions counted in this process, by (tenant, kind): what ``/metrics`` shows.
_counted: Counter[tuple[str, str]] = Counter()
_counted_lock = threading.Lock()


def count_redactions(tenant_id: str, counts: Mapping[str, int]) -> None:
    """Add ``counts`` (kind → secrets redacted) to this process's tally for ``tenant_id``."""
    if not counts:
        return
    with _counted_lock:
        for kind, number in counts.items():
            _counted[(tenant_id, kind)] += number


def counted_redactions() -> dict[tuple[str, str], int]:
    """This process's redactions so far, by (tenant, kind)."""
    with _counted_lock:
        return dict(_counted)


def redactor_of(config: MemoryConfig) -> Redactor:
    """The redactor ``config``'s settings describe (``redaction``, ``redaction_patterns``,
    ``redaction_allow``), compiled once per distinct settings."""
    return redactor_for(
        config.safety.redaction == "on",
        tuple(config.safety.patterns.items()),
        tuple(config.safety.allow),
    )


@functools.lru_cache(maxsize=32)
def redactor_for(
    enabled: bool, extra_patterns: tuple[tuple[str, str], ...], allow: tuple[str, ...]
) -> Redactor:
    """The redactor of these settings, compiled once."""
    if enabled and not extra_patterns and not allow:
        return DEFAULT
    return Redactor(enabled=enabled, extra_patterns=dict(extra_patterns), allow=allow)


DEFAULT = Redactor()
"""The redactor with the default settings (on, no extra patterns, the documented examples
allowed)."""
