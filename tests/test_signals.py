"""Correction and reinforcement detection, and the pattern files behind it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_sql.errors import ConfigError
from memory_sql.intake.filter import filter_messages_for_memory
from memory_sql.intake.messages import Message
from memory_sql.intake.signals import (
    SIGNAL_WINDOW,
    Signals,
    detect_correction,
    detect_reinforcement,
    detect_signals,
)
from memory_sql.pattern_files import BUNDLED_DIR, PATTERN_FILES, load_patterns

NONE = Signals()
CORRECTION = Signals(correction=True)
REINFORCEMENT = Signals(reinforcement=True)

# (user text, expected signals). Near misses sit next to the pattern they must not trigger.
SIGNAL_CASES = [
    # English corrections
    ("No, that's wrong. The deadline is Friday.", CORRECTION),
    ("That is incorrect", CORRECTION),
    ("that’s not right, use UTC", CORRECTION),
    ("You misunderstood the question", CORRECTION),
    ("you got it wrong again", CORRECTION),
    ("That's not what I asked for", CORRECTION),
    ("No, I meant the other repo", CORRECTION),
    ("I don't think that's right", CORRECTION),
    ("Please try again with pandas", CORRECTION),
    ("Redo the table in markdown", CORRECTION),
    ("let's start over", CORRECTION),
    ("That's not wrong at all", NONE),
    ("this code is not wrong", NONE),
    ("that's wrongly labelled in the docs", NONE),
    ("add retry logic to the client", NONE),
    ("the redox reaction was redone", NONE),
    ("entry again in the ledger", NONE),
    ("No, that's not exactly right", CORRECTION),
    ("that is not quite correct", CORRECTION),
    ("That isn't quite right, the port is 8080", CORRECTION),
    ("That's not what I meant", CORRECTION),
    ("that is not exactly what I wanted", CORRECTION),
    ("It's not what I asked", CORRECTION),
    ("the logo is not quite right-aligned", NONE),
    ("is that what I wanted?", NONE),
    # Chinese corrections
    ("不对，应该是周五", CORRECTION),
    ("你理解错了我的意思", CORRECTION),
    ("你理解有误", CORRECTION),
    ("你搞错了", CORRECTION),
    ("我不是这个意思", CORRECTION),
    ("重试一下", CORRECTION),
    ("重新来", CORRECTION),
    ("换一种写法", CORRECTION),
    ("改用 PostgreSQL", CORRECTION),
    ("这个结论不正确", CORRECTION),
    ("这个矩阵不对称", NONE),
    ("这样对不对？", NONE),
    ("加一个自动重试机制", NONE),
    ("这不是我想要的", CORRECTION),
    ("但是不是我要的格式", CORRECTION),
    ("你说的不是这个意思", CORRECTION),
    ("我不确定这是不是我想要的", NONE),
    # English reinforcement
    ("Yes, exactly!", REINFORCEMENT),
    ("yes that's right", REINFORCEMENT),
    ("Perfect!", REINFORCEMENT),
    ("perfect", REINFORCEMENT),
    ("That's exactly right", REINFORCEMENT),
    ("that is exactly what I wanted", REINFORCEMENT),
    ("Exactly.", REINFORCEMENT),
    ("Keep doing that.", REINFORCEMENT),
    ("keep it up", REINFORCEMENT),
    ("Just like that!", REINFORCEMENT),
    ("This is great!", REINFORCEMENT),
    ("spot on", REINFORCEMENT),
    ("a perfectly fine answer", NONE),
    ("is 16 a perfect square", NONE),
    ("keep that in mind for later", NONE),
    ("that's right-aligned in the table", NONE),
    ("I want it to work exactly like grep", NONE),
    ("this is great news for the team", NONE),
    ("That's really perfect!", REINFORCEMENT),
    ("Well done.", REINFORCEMENT),
    # Negated reinforcement does not count.
    ("Not perfect.", NONE),
    ("It's far from perfect.", NONE),
    ("the draft is less than perfect.", NONE),
    ("It's not quite perfect, but ship it", NONE),
    ("this isn't exactly correct either", CORRECTION),
    ("it wasn't exactly right, but close", NONE),
    ("never exactly right, this tool", NONE),
    ("Please don't keep doing that.", NONE),
    ("the steak was not well done", NONE),
    ("you haven't nailed it", NONE),
    # Chinese reinforcement
    ("对，就是这样！", REINFORCEMENT),
    ("完全正确", REINFORCEMENT),
    ("就是这个意思。", REINFORCEMENT),
    ("这正是我想要的", REINFORCEMENT),
    ("继续保持！", REINFORCEMENT),
    ("以后都保持这样", REINFORCEMENT),
    ("这个很好", REINFORCEMENT),
    ("没错，就这么做", REINFORCEMENT),
    ("这不完全正确", CORRECTION),
    ("这个很好理解", NONE),
    ("代码没错误", NONE),
    ("不要继续保持。", NONE),
    # Mixed English and Chinese
    ("这个不对，try again吧", CORRECTION),
    ("请redo一下", CORRECTION),
    ("perfect，谢谢", REINFORCEMENT),
    ("对，就是这样, keep it up", REINFORCEMENT),
    ("ｔｈａｔ＇ｓ ｗｒｏｎｇ", CORRECTION),
    # Correction wins over reinforcement in one turn
    ("Perfect. Wait, no, that's wrong", CORRECTION),
    ("完全正确，不对，重新来", CORRECTION),
    # Neutral
    ("How do I reverse a list in Python?", NONE),
    ("帮我写一个排序函数", NONE),
]


def conversation(*user_texts: str) -> list[dict[str, Any]]:
    messages = []
    for number, text in enumerate(user_texts):
        messages += [
            {"role": "user", "content": text},
            {"role": "assistant", "content": f"r{number}"},
        ]
    return messages


@pytest.mark.parametrize(("text", "expected"), SIGNAL_CASES)
def test_signals(text: str, expected: Signals) -> None:
    messages = conversation("Let's talk about my project", text)
    assert detect_signals(messages) == expected
    assert detect_correction(messages) is expected.correction
    assert detect_reinforcement(messages) is expected.reinforcement


@pytest.mark.parametrize(
    ("position", "expected"),
    [(0, False), (1, True), (SIGNAL_WINDOW, True)],
    ids=["7th from last", "6th from last", "last"],
)
def test_window_is_the_last_six_user_turns(position: int, expected: bool) -> None:
    texts = [f"question number {n}" for n in range(SIGNAL_WINDOW + 1)]
    texts[position] = "that's wrong"
    assert detect_correction(conversation(*texts)) is expected


def test_window_counts_kept_turns_only() -> None:
    # Dropped turns (acknowledgements, upload-only) do not push a correction out of the window.
    messages = conversation("that's wrong", *["ok"] * 10, "<uploaded_files>a</uploaded_files>")
    assert detect_correction(messages)


def test_signals_ignore_assistant_tool_and_system_text() -> None:
    messages = [
        {"role": "system", "content": "If the user says that's wrong, apologise."},
        {"role": "user", "content": "fetch the page"},
        {"role": "assistant", "content": "try again", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "Error: that's wrong, try again"},
        {"role": "assistant", "content": "Perfect! That's wrong? Redo?"},
    ]
    assert detect_signals(messages) == NONE


def test_signals_ignore_upload_blocks() -> None:
    text = "<uploaded_files>notes-that's wrong.txt</uploaded_files>\nsummarise please"
    assert detect_signals(conversation(text)) == NONE


def test_detectors_accept_normalised_and_langchain_shaped_messages() -> None:
    filtered = [Message("user", "不对"), Message("assistant", "抱歉")]
    assert detect_correction(filtered)
    assert detect_correction([{"type": "human", "content": [{"type": "text", "text": "redo"}]}])


@pytest.mark.parametrize(
    ("left", "right", "merged"),
    [
        (NONE, NONE, NONE),
        (CORRECTION, NONE, CORRECTION),
        (NONE, REINFORCEMENT, REINFORCEMENT),
        (CORRECTION, REINFORCEMENT, CORRECTION),
        (REINFORCEMENT, REINFORCEMENT, REINFORCEMENT),
    ],
)
def test_signals_merge(left: Signals, right: Signals, merged: Signals) -> None:
    assert left | right == merged == right | left


# Pattern files -------------------------------------------------------------------------


def test_bundled_patterns_load_and_ship_inside_the_package() -> None:
    patterns = load_patterns()
    assert all(p.parent == BUNDLED_DIR for p in patterns.sources)
    assert BUNDLED_DIR.parent.name == "memory_sql"
    assert len(patterns.correction) >= 11 and len(patterns.reinforcement) >= 17
    assert patterns.trivial
    assert None not in (patterns.correction.combined, patterns.reinforcement.combined)


@given(st.one_of(st.sampled_from([text for text, _ in SIGNAL_CASES]), st.text(max_size=40)))
def test_joined_patterns_match_like_the_single_ones(text: str) -> None:
    for kind in load_patterns():
        assert kind.search(text) == any(p.search(text) for p in kind.patterns)
        assert kind.fullmatch(text) == any(p.fullmatch(text) for p in kind.patterns)


@pytest.mark.parametrize(
    "text",
    [
        "No, that's not exactly right",
        "Not perfect.",
        "It's far from perfect.",
        "It isn't perfect!",
        "That wasn't really spot on",
        "不要继续保持",
    ],
)
def test_negated_reinforcement_does_not_count_on_its_own(tmp_path: Path, text: str) -> None:
    # With the correction class switched off, the reinforcement patterns alone must refuse it.
    (tmp_path / "correction.txt").write_text("", encoding="utf-8")
    patterns = load_patterns(tmp_path)
    assert detect_signals(conversation(text), patterns=patterns) == NONE


def test_patterns_dir_replaces_bundled_files(tmp_path: Path) -> None:
    (tmp_path / "correction.txt").write_text("# only this one\n\\bnope\\b\n", encoding="utf-8")
    (tmp_path / "trivial.txt").write_text("", encoding="utf-8")
    patterns = load_patterns(tmp_path)
    assert patterns.sources[0] == (tmp_path / "correction.txt").resolve()
    assert patterns.sources[1].parent == BUNDLED_DIR  # reinforcement falls back
    assert detect_correction(conversation("nope, use tabs"), patterns=patterns)
    assert not detect_correction(conversation("that's wrong"), patterns=patterns)
    assert detect_reinforcement(conversation("perfect"), patterns=patterns)
    # With an empty trivial file, "ok" is an ordinary turn.
    assert len(filter_messages_for_memory(conversation("ok"), patterns=patterns)) == 2
    assert load_patterns(str(tmp_path)) is patterns  # cached per folder


@pytest.mark.parametrize(
    ("name", "content", "line", "fragment"),
    [
        ("correction.txt", "# ok\n\\bfine\\b\n(unclosed\n", 3, "invalid regular expression"),
        ("reinforcement.txt", "great\n\n[z-a]\n", 3, "invalid regular expression"),
        ("trivial.txt", "ok|\n", 1, "matches empty text"),
    ],
)
def test_broken_pattern_file_is_refused_with_path_and_line(
    tmp_path: Path, name: str, content: str, line: int, fragment: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=fragment) as info:
        load_patterns(tmp_path)
    assert info.value.path == str(path.resolve())
    assert info.value.line == line
    assert f"{path.resolve()}:{line}:" in str(info.value)


def test_unknown_pattern_file_and_missing_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "corection.txt").write_text("x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"corection\.txt; pattern files are named"):
        load_patterns(tmp_path)
    with pytest.raises(ConfigError, match="is not a directory"):
        load_patterns(tmp_path / "missing")


def test_pattern_file_must_be_utf8(tmp_path: Path) -> None:
    (tmp_path / PATTERN_FILES[0]).write_bytes(b"\xff\xfe bad")
    with pytest.raises(ConfigError, match="cannot read pattern file"):
        load_patterns(tmp_path)


@pytest.mark.parametrize(
    ("lines", "text"),
    [
        # Joined, \1 would point at the first pattern's group and "aaaa" would not match.
        (["(no)+ way", "(\\w)\\1{3}"], "aaaa"),
        # A global inline flag cannot be joined at all.
        (["(?i)nope", "x+y"], "NOPE"),
    ],
)
def test_patterns_that_cannot_be_joined_still_match(
    tmp_path: Path, lines: list[str], text: str
) -> None:
    (tmp_path / "correction.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    correction = load_patterns(tmp_path).correction
    assert correction.combined is None
    assert correction.search(text)
    assert not correction.search("abcd")
