"""Keeping uploads out of memory: upload blocks in user text, upload mentions in summaries/facts."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_sql.intake.uploads import (
    UPLOAD_MENTION,
    mentions_upload,
    scrub_upload_sentences,
    strip_upload_blocks,
    strip_upload_mentions,
)
from memory_sql.models import MAX_TEXT_CHARS, Fact, MemoryDocument

BLOCK_CASES = [
    ("<uploaded_files>\n- a.pdf\n</uploaded_files>", ""),
    ("<uploaded_files>a.pdf</uploaded_files>\n\nWhat is in it?", "What is in it?"),
    ("Compare <current_uploads>x.csv, y.csv</current_uploads> these", "Compare  these"),
    ("<Uploaded_Files>a</Uploaded_Files>帮我总结", "帮我总结"),
    (
        "<uploaded_files>a</uploaded_files>mid<current_uploads>b</current_uploads>end",
        "midend",
    ),
    (
        "<uploaded_files>a</current_uploads> mismatched",
        "<uploaded_files>a</current_uploads> mismatched",
    ),
    ("no uploads here <b>bold</b>", "no uploads here <b>bold</b>"),
    # Blocks do not nest: the first closing tag of the opening tag's kind ends the block.
    (
        "<current_uploads><uploaded_files>a</current_uploads>b</uploaded_files>",
        "b</uploaded_files>",
    ),
    ("<UPLOADED_FILES>a</uploaded_files>\n\n\nnext", "next"),
    # An opening tag without a closing one stays, with the text after it (as in DeerFlow)...
    ("What does <uploaded_files> do?", "What does <uploaded_files> do?"),
    ("<uploaded_files>a.pdf\nsummarise it", "<uploaded_files>a.pdf\nsummarise it"),
    # ...and does not stop the other kind, or an earlier block, from being removed.
    (
        "<uploaded_files>x<current_uploads>y</current_uploads>z",
        "<uploaded_files>xz",
    ),
    ("<uploaded_files>a</uploaded_files>keep<uploaded_files>b", "keep<uploaded_files>b"),
    ("<uploaded_files>" * 3 + "q", "<uploaded_files>" * 3 + "q"),
]


@pytest.mark.parametrize(("text", "expected"), BLOCK_CASES)
def test_strip_upload_blocks(text: str, expected: str) -> None:
    assert strip_upload_blocks(text) == expected


# DeerFlow's pattern, the reference for what a block is (it is quadratic on unclosed tags).
DEERFLOW_UPLOAD_BLOCK = re.compile(
    r"<(?P<tag>uploaded_files|current_uploads)>[\s\S]*?</(?P=tag)>\n*", re.IGNORECASE
)
TAG_SOUP = st.lists(
    st.sampled_from(
        [
            "<uploaded_files>",
            "</uploaded_files>",
            "<Current_Uploads>",
            "</current_uploads>",
            "</CURRENT_UPLOADS>",
            "<uploaded_files",
            "<",
            "\n",
            " ",
            "a",
            "上传",
        ]
    ),
    max_size=30,
).map("".join)


@given(TAG_SOUP)
def test_strip_upload_blocks_removes_what_deerflow_removes(text: str) -> None:
    assert strip_upload_blocks(text) == DEERFLOW_UPLOAD_BLOCK.sub("", text).strip()


SCRUB_CASES = [
    (
        "The user uploaded a PDF file about taxes. They prefer short answers.",
        "They prefer short answers.",
    ),
    (
        "Works in Berlin. Shared /mnt/user-data/uploads/report.v2.pdf for review. Likes tea.",
        "Works in Berlin. Likes tea.",
    ),
    ("User sent images via file upload today! Uses Vim.", "Uses Vim."),
    ("They uploaded three CSV files yesterday.", ""),
    ("Line one.\nThe user uploaded an image.\nLine three.", "Line one.\n\nLine three."),
    ("用户上传了一份简历文件。他是后端工程师。", "他是后端工程师。"),
    ("用户喜欢 Rust。附件已上传到系统。", "用户喜欢 Rust。"),
    # Near misses: nothing about uploaded files.
    ("The user downloaded files from S3. Uses Python 3.12.", None),
    ("Upload speed is slow in the office.", None),
    ("上传速度很慢。", None),
    ("Version 3.5 is current. Profile photo is blue.", None),
]


@pytest.mark.parametrize(("text", "expected"), SCRUB_CASES)
def test_scrub_upload_sentences(text: str, expected: str | None) -> None:
    assert scrub_upload_sentences(text) == (text if expected is None else expected)


def test_scrub_removes_trailing_spaces_of_kept_lines() -> None:
    text = "Likes tea. \t \nThe user uploaded a file.  \nUses Vim.   "
    assert scrub_upload_sentences(text) == "Likes tea.\n\nUses Vim."


# The pattern as it was before its runs of spaces and words were made atomic: what it matches
# must not change.
_FILES = (
    r"(?:files?|documents?|attachments?|images?|photos?|pictures?|screenshots?|pdfs?"
    r"|spreadsheets?)"
)
_ZH_FILES = r"(?:文件|文档|附件|图片|照片|截图|表格|pdf)"
BACKTRACKING_UPLOAD_MENTION = re.compile(
    rf"\bupload(?:s|ed|ing)?(?:\s+\w+){{0,3}}?\s+{_FILES}\b"
    rf"|\b{_FILES}(?:\s+\w+){{0,2}}?\s+upload(?:s|ed|ing)?\b"
    r"|/mnt/user-data/uploads/"
    r"|<(?:uploaded_files|current_uploads)>"
    rf"|上传(?:了|的|过)?[^。！？.!?\s]{{0,8}}?{_ZH_FILES}"
    rf"|{_ZH_FILES}[^。！？.!?\s]{{0,4}}?上传",
    re.IGNORECASE,
)
MENTION_SOUP = st.lists(
    st.sampled_from(
        [
            "upload",
            "Uploaded",
            "UPLOADS",
            "uploading",
            "file",
            "files",
            "PDF",
            "filesystem",
            "the",
            "x_1",
            " ",
            "  ",
            "\t",
            "\n",
            ".",
            "上传",
            "了",
            "文件",
            "。",
            "/mnt/user-data/uploads/",
            "<current_uploads>",
        ]
    ),
    max_size=14,
).map("".join)


@given(st.one_of(MENTION_SOUP, st.text(max_size=60)))
def test_mentions_upload_matches_like_the_backtracking_pattern(text: str) -> None:
    expected = BACKTRACKING_UPLOAD_MENTION.search(text) is not None
    assert (UPLOAD_MENTION.search(text) is not None) == expected
    assert mentions_upload(text) == expected  # the "upload"/上传 pre-check loses nothing


@given(st.text(alphabet=st.characters(blacklist_characters="/<"), max_size=200))
def test_scrub_leaves_text_without_mentions_unchanged(text: str) -> None:
    if not mentions_upload(text):
        assert scrub_upload_sentences(text) == text
    else:
        assert not mentions_upload(scrub_upload_sentences(text))


def _doc() -> MemoryDocument:
    return MemoryDocument.model_validate(
        {
            "user": {
                "workContext": {"summary": "Backend engineer. Uploaded a resume file today."},
                "topOfMind": {"summary": "Planning a trip to Kyoto."},
            },
            "history": {"recentMonths": {"summary": "用户上传了一张图片。在学日语。"}},
            "facts": [
                {"content": "Prefers concise answers", "confidence": 0.9},
                {"content": "User uploaded files named cv.pdf", "confidence": 0.8},
                {"content": "Keeps notes in /mnt/user-data/uploads/notes.md", "confidence": 0.8},
                {"content": "用户上传了文件", "confidence": 0.8},
            ],
            "version": 3,
        }
    )


def test_strip_upload_mentions_returns_a_scrubbed_copy() -> None:
    original = _doc()
    before = original.model_dump()
    cleaned = strip_upload_mentions(original)

    assert original.model_dump() == before  # input untouched
    assert cleaned is not original
    assert cleaned.user.work_context.summary == "Backend engineer."
    assert cleaned.user.work_context.updated_at == original.user.work_context.updated_at
    assert cleaned.user.top_of_mind.summary == "Planning a trip to Kyoto."
    assert cleaned.history.recent_months.summary == "在学日语。"
    assert [f.content for f in cleaned.facts] == ["Prefers concise answers"]
    assert cleaned.facts[0].id == original.facts[0].id
    assert cleaned.version == 3


def test_strip_upload_mentions_without_mentions_is_equal() -> None:
    doc = MemoryDocument(facts=[Fact(content="Likes Go")])
    assert strip_upload_mentions(doc) == doc


# Hostile input -------------------------------------------------------------------------

MB = 1 << 20
# About 1 MB each, shaped to make a backtracking pattern rescan the rest of the text.
ADVERSARIAL = {
    "unclosed tags": "<uploaded_files>" * (MB // 16),
    "unclosed tags and text": "<current_uploads>x" * (MB // 18),
    "nested unclosed tags": "<uploaded_files><current_uploads>" * (MB // 33),
    "mismatched closers": "<uploaded_files>a</current_uploads>" * (MB // 35),
    "spaces": "uploaded files. a" + " " * MB + "b",
    "tabs and spaces": "upload a file. " + " \t" * (MB // 2) + "\nx",
    "dots": "uploaded files" + "." * MB,
    "dotted words": "uploaded files " + "a." * (MB // 2),
    "upload and spaces": ("upload" + " " * 1000) * (MB // 1006),
    "upload words": "upload " * (MB // 7),
    "upload then one long word": "upload " + "a" * MB,
    "files and spaces": ("files" + " " * 100) * (MB // 105),
    "chinese": "上传了" + "这" * MB,
    "chinese uploads": "上传" * (MB // 2),
}


def assert_fast(function: Callable[[str], object], text: str) -> None:
    # A guard against quadratic blow-up (minutes at this size), not a benchmark. CPU time, not
    # wall time: other processes on a busy machine must not fail the test.
    start = time.process_time()
    function(text)
    assert time.process_time() - start < 2.0


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
@pytest.mark.parametrize(
    "function",
    [strip_upload_blocks, mentions_upload, scrub_upload_sentences],
    ids=lambda f: f.__name__,
)
def test_upload_functions_are_linear_on_hostile_text(
    function: Callable[[str], object], text: str
) -> None:
    assert_fast(function, text)


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_strip_upload_mentions_is_linear_on_hostile_text(text: str) -> None:
    # Stored text is at most MAX_TEXT_CHARS long: spread the text over sections and facts.
    chunks = [text[i : i + MAX_TEXT_CHARS] for i in range(0, len(text), MAX_TEXT_CHARS)]
    chunks = [chunk for chunk in chunks if chunk.strip()]
    doc = MemoryDocument(facts=[Fact(content=chunk) for chunk in chunks[6:]])
    for section, chunk in zip(doc.sections().values(), chunks, strict=False):
        section.summary = chunk

    def strip(_: str) -> None:
        strip_upload_mentions(doc)

    assert_fast(strip, text)
