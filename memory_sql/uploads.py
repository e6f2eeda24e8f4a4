"""Keeping file uploads out of long-term memory.

An upload belongs to one conversation, not to the user: the agent host wraps uploaded file
lists in ``<uploaded_files>…</uploaded_files>`` or ``<current_uploads>…</current_uploads>``
blocks inside the user's message and stores the files under ``/mnt/user-data/uploads/``.
Intake removes the blocks from user text (:func:`strip_upload_blocks`); after an update,
:func:`strip_upload_mentions` removes what the LLM still wrote about uploads.
"""

from __future__ import annotations

import re

from .models import MemoryDocument

UPLOAD_BLOCK = re.compile(
    r"<(?P<tag>uploaded_files|current_uploads)>[\s\S]*?</(?P=tag)>\n*", re.IGNORECASE
)

_FILE_WORDS = (
    r"(?:files?|documents?|attachments?|images?|photos?|pictures?|screenshots?|pdfs?"
    r"|spreadsheets?)"
)
_ZH_FILE_WORDS = r"(?:文件|文档|附件|图片|照片|截图|表格|pdf)"
_ZH_CLAUSE_CHAR = r"[^。！？.!?\s]"

UPLOAD_MENTION = re.compile(
    rf"\bupload(?:s|ed|ing)?(?:\s+\w+){{0,3}}?\s+{_FILE_WORDS}\b"
    rf"|\b{_FILE_WORDS}(?:\s+\w+){{0,2}}?\s+upload(?:s|ed|ing)?\b"
    r"|/mnt/user-data/uploads/"
    r"|<(?:uploaded_files|current_uploads)>"
    rf"|上传(?:了|的|过)?{_ZH_CLAUSE_CHAR}{{0,8}}?{_ZH_FILE_WORDS}"
    rf"|{_ZH_FILE_WORDS}{_ZH_CLAUSE_CHAR}{{0,4}}?上传",
    re.IGNORECASE,
)
"""Text that talks about uploaded files (English or Chinese), or an upload path or block."""

# A sentence runs to . ! ? 。 ！ ？ (a "." inside a path or a number such as 3.5 does not end
# it) or to the end of the line; newlines are pieces of their own so removal keeps the lines.
_PIECE = re.compile(
    r"\n"
    r"|(?:[^.!?。！？\n]|[.!?](?=[^\s.!?。！？]))+[.!?。！？]*[ \t]*"
    r"|[.!?。！？]+[ \t]*"
)


def strip_upload_blocks(text: str) -> str:
    """``text`` without its upload blocks, stripped (``""`` when nothing else was there)."""
    if "<" in text:
        text = UPLOAD_BLOCK.sub("", text)
    return text.strip()


def mentions_upload(text: str) -> bool:
    """Whether ``text`` talks about uploaded files (see :data:`UPLOAD_MENTION`)."""
    return UPLOAD_MENTION.search(text) is not None


def scrub_upload_sentences(text: str) -> str:
    """``text`` without the sentences that mention uploads; unchanged when none does."""
    if not mentions_upload(text):
        return text
    kept = "".join(
        piece for piece in _PIECE.findall(text) if piece == "\n" or not mentions_upload(piece)
    )
    kept = re.sub(r"[ \t]+\n", "\n", kept)
    kept = re.sub(r"\n{3,}", "\n\n", kept)
    return re.sub(r"[ \t]{2,}", " ", kept).strip()


def strip_upload_mentions(memory: MemoryDocument) -> MemoryDocument:
    """A copy of ``memory`` with upload mentions removed: every section summary loses the
    sentences that mention uploads (its ``updated_at`` is kept), and facts whose content
    mentions an upload are dropped. The input document is not changed.
    """
    doc = memory.model_copy(deep=True)
    for section in doc.sections().values():
        cleaned = scrub_upload_sentences(section.summary)
        if cleaned != section.summary:
            section.summary = cleaned
    if any(mentions_upload(fact.content) for fact in doc.facts):
        doc.facts = [fact for fact in doc.facts if not mentions_upload(fact.content)]
    return doc
