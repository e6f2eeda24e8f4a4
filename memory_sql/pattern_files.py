"""The regular expressions conversation intake uses, read from pattern files.

Three files, bundled in ``memory_sql/patterns/``: ``correction.txt`` and ``reinforcement.txt``
(searched by :mod:`memory_sql.intake.signals`) and ``trivial.txt`` (whole-turn acknowledgements
dropped by :mod:`memory_sql.intake`). The file format is described at the top of ``correction.txt``:
one pattern per line, ``#`` comments, compiled with IGNORECASE, MULTILINE and ASCII, matched
against NFKC-normalised text.

A configured folder (``patterns_dir``) replaces the bundled files one by one: each of the three
names present there is used instead of the bundled file, a missing one falls back to it, and an
empty file switches its class off. Any other ``*.txt`` there is refused, so that a misspelt name
does not silently do nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import ConfigError

BUNDLED_DIR = Path(__file__).with_name("patterns")
PATTERN_FILES = ("correction.txt", "reinforcement.txt", "trivial.txt")
FLAGS = re.IGNORECASE | re.MULTILINE | re.ASCII
_BACKREFERENCE = re.compile(r"\\[1-9]|\(\?P=")


@dataclass(frozen=True, slots=True)
class PatternList:
    """The patterns of one file, also joined into one alternation for speed."""

    patterns: tuple[re.Pattern[str], ...]
    source: Path
    combined: re.Pattern[str] | None = None

    @classmethod
    def of(cls, patterns: tuple[re.Pattern[str], ...], source: Path) -> PatternList:
        # Numbered back-references would point at another pattern's group once joined, and
        # global inline flags cannot be joined: such files are matched one pattern at a time.
        if any(_BACKREFERENCE.search(p.pattern) for p in patterns):
            return cls(patterns, source)
        try:
            combined = re.compile("|".join(f"(?:{p.pattern})" for p in patterns) or "(?!)", FLAGS)
        except re.error:
            combined = None
        return cls(patterns, source, combined)

    def search(self, text: str) -> bool:
        """Whether any pattern occurs in ``text``."""
        if self.combined is not None:
            return self.combined.search(text) is not None
        return any(p.search(text) for p in self.patterns)

    def fullmatch(self, text: str) -> bool:
        """Whether any pattern matches the whole of ``text``."""
        if self.combined is not None:
            return self.combined.fullmatch(text) is not None
        return any(p.fullmatch(text) for p in self.patterns)

    def __len__(self) -> int:
        return len(self.patterns)


@dataclass(frozen=True, slots=True)
class PatternSet:
    """The patterns of each class."""

    correction: PatternList
    reinforcement: PatternList
    trivial: PatternList

    @property
    def sources(self) -> tuple[Path, ...]:
        return tuple(kind.source for kind in self)

    def __iter__(self) -> Iterator[PatternList]:
        return iter((self.correction, self.reinforcement, self.trivial))


def match_text(text: str) -> str:
    """``text`` as the patterns see it: NFKC-normalised and stripped."""
    return unicodedata.normalize("NFKC", text).strip()


def load_patterns(patterns_dir: str | Path | None = None) -> PatternSet:
    """The bundled patterns, or those of ``patterns_dir`` (see the module docstring).

    Loaded once per folder and cached: edits to the files are seen after a restart.

    Raises:
        ConfigError: the folder does not exist, holds an unknown ``*.txt`` file, or a file
            cannot be read or has a line that is not a valid regular expression (the error names
            the file and line).
    """
    folder = None if patterns_dir is None else Path(patterns_dir).expanduser().resolve()
    return _load(folder)


@lru_cache(maxsize=16)
def _load(folder: Path | None) -> PatternSet:
    if folder is not None:
        if not folder.is_dir():
            raise ConfigError(
                f"patterns_dir {folder} is not a directory", key="patterns_dir", path=str(folder)
            )
        unknown = sorted(p.name for p in folder.glob("*.txt") if p.name not in PATTERN_FILES)
        if unknown:
            raise ConfigError(
                f"patterns_dir {folder} holds {', '.join(unknown)}; pattern files are named "
                f"{', '.join(PATTERN_FILES)}",
                key="patterns_dir",
                path=str(folder / unknown[0]),
            )
    paths = []
    for name in PATTERN_FILES:
        override = folder / name if folder is not None else None
        paths.append(
            override if override is not None and override.is_file() else BUNDLED_DIR / name
        )
    correction, reinforcement, trivial = (PatternList.of(read_pattern_file(p), p) for p in paths)
    return PatternSet(correction, reinforcement, trivial)


def read_pattern_file(path: Path) -> tuple[re.Pattern[str], ...]:
    """Compile every pattern of one file.

    Raises:
        ConfigError: the file cannot be read as UTF-8, or a line is not a valid regex or
            matches empty text (a stray ``|`` would otherwise make every turn match).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read pattern file {path}: {exc}", path=str(path)) from None
    patterns = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            pattern = re.compile(line, FLAGS)
        except re.error as exc:
            problem = f"invalid regular expression {line!r}: {exc.msg}"
        else:
            if pattern.search("") is None:
                patterns.append(pattern)
                continue
            problem = f"pattern {line!r} matches empty text"
        raise ConfigError(f"{path}:{number}: {problem}", path=str(path), line=number)
    return tuple(patterns)
