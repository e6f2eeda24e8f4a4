"""The documentation as the tests read it: README.md and the pages of the MkDocs site under
docs/, their fenced code blocks, and the ``$`` commands of a ```console block with the output
each shows, where ``…`` stands for any text."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CLONE = "/home/alice/memory_sql"
"""The clone's folder, as the MCP page's stdio configs write it."""


def text(page: str) -> str:
    """The Markdown of ``page``: ``README.md``, or a page of the site (``python.md``)."""
    path = ROOT / page if page == "README.md" else DOCS / page
    return path.read_text(encoding="utf-8")


def blocks(info: str, *pages: str) -> list[str]:
    """The fenced blocks of ``pages``, in order, whose info string is exactly ``info``."""
    found: list[str] = []
    for page in pages:
        found += re.findall(rf"^```{info}\n(.*?)^```$", text(page), flags=re.M | re.S)
    return found


def mcp_configs() -> list[dict[str, Any]]:
    """The server of each MCP client config (a ```json block naming ``mcpServers``) of the MCP
    page, in order."""
    found = [json.loads(block) for block in blocks("json", "mcp.md") if '"mcpServers"' in block]
    return [config["mcpServers"]["memory"] for config in found]


def fenced(page: str) -> list[tuple[str, str]]:
    """Every fenced block of ``page`` in order, as (info string, body)."""
    return re.findall(r"^```([^\n]*)\n(.*?)^```$", text(page), flags=re.M | re.S)


def commands(block: str) -> list[tuple[str, str]]:
    """Each ``$`` command of ``block`` (continuation lines and quoted newlines joined as the
    shell joins them) with the output shown under it."""
    found: list[tuple[str, list[str]]] = []
    lines = block.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        assert line.startswith("$ "), f"output before any command: {line!r}"
        command = line[2:]
        while command.endswith("\\") or not _complete(command):
            index += 1
            command += "\n" + lines[index]
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        found.append((command, output))
    return [(command, "\n".join(output)) for command, output in found]


def _complete(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def without_comment(command: str) -> str:
    """``command`` without its trailing comment (two spaces or more, then ``#``)."""
    return re.split(r"\s{2,}#", command, maxsplit=1)[0].rstrip()


def pattern(shown: str) -> re.Pattern[str]:
    """What output ``shown`` stands for: ``…`` any text, a date any date, ids and cursors any."""
    text = re.escape(shown)
    text = text.replace("…", ".*?")
    text = re.sub(r"\d{4}\\-\d{2}\\-\d{2},\\ \w+day", r"\\d{4}-\\d{2}-\\d{2}, \\w+day", text)
    text = re.sub(r"fact_[0-9a-f]{12}", "fact_[0-9a-f]{12}", text)
    text = re.sub(r'"cursor":"[A-Za-z0-9_-]+"', '"cursor":"[A-Za-z0-9_-]+"', text)
    return re.compile(text, re.S)


PROBLEM = re.compile(r"error|traceback|exception|warning|failed|refused", re.I)
NO_PROBLEM = re.compile(r"\b0 (failed|errors?)\b|(failed|refused|errors?)\b[^:]*: none$", re.I)


def _problem(line: str) -> bool:
    if line.lstrip()[:1] in ("│", "┃"):  # a table's row or header: a column named "failed"
        return False
    return bool(PROBLEM.search(NO_PROBLEM.sub("", line)))


def unexpected_problems(output: str, shown: str) -> list[str]:
    """The lines of ``output`` that read like a problem (an error, a warning, a failure) and
        that the documentation did not show: each must match a line ``shown`` shows. "0 failed" and
    "refused (not stored): none", and the cells of a table, are not problems."""
    told = [pattern(line) for line in shown.splitlines() if _problem(line)]
    return [
        line
        for line in output.splitlines()
        if _problem(line) and not any(p.fullmatch(line) for p in told)
    ]
