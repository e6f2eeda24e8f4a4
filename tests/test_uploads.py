"""Keeping uploads out of memory: upload blocks in user text, upload mentions in summaries/facts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_sql.models import Fact, MemoryDocument
from memory_sql.uploads import (
    mentions_upload,
    scrub_upload_sentences,
    strip_upload_blocks,
    strip_upload_mentions,
)

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
]


@pytest.mark.parametrize(("text", "expected"), BLOCK_CASES)
def test_strip_upload_blocks(text: str, expected: str) -> None:
    assert strip_upload_blocks(text) == expected


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
