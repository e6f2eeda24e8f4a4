"""Keeping file uploads out of long-term memory.

An upload belongs to one conversation, not to the user: the agent host wraps uploaded file
lists in ``<uploaded_files>…</uploaded_files>`` or ``<current_uploads>…</current_uploads>``
blocks inside the user's message and stores the files under ``/mnt/user-data/uploads/``.
Intake removes the blocks from user text (:func:`strip_upload_blocks`); after an update,
:func:`strip_upload_mentions` removes what the LLM still wrote about uploads.

Every function here runs in time linear in the length of its input, whatever the text: a
user message is untrusted, and a pattern that backtracks over a 1 MB paste would hold a
worker for minutes.
"""

from __future__ import annotations

import re

from ..models import MemoryDocument

UPLOAD_TAGS = ("uploaded_files", "current_uploads")
"""The tags of the upload blocks the agent host writes (matched ignoring ASCII case)."""
_TAG_FLAGS = re.IGNORECASE | re.ASCII
# Opening tags of each set of kinds still looked for, and each kind's closing tag with the
# newlines after it. (DeerFlow's single pattern, <(tag)>[\s\S]*?</(?P=tag)>\n*, rescans the
# rest of the text from every opening tag that has no closing one: quadratic.)
_OPENING = {
    frozenset(kinds): re.compile(rf"<({'|'.join(kinds)})>", _TAG_FLAGS)
    for kinds in (UPLOAD_TAGS, *((kind,) for kind in UPLOAD_TAGS))
}
_CLOSING = {kind: re.compile(rf"</{kind}>\n*", _TAG_FLAGS) for kind in UPLOAD_TAGS}

_FILE_WORDS = (
    r"(?:files?|documents?|attachments?|images?|photos?|pictures?|screenshots?|pdfs?"
    r"|spreadsheets?)"
)
_ZH_FILE_WORDS = r"(?:文件|文档|附件|图片|照片|截图|表格|pdf)"
_ZH_CLAUSE_CHAR = r"[^。！？.!?\s]"


def _run(name: str, chars: str) -> str:
    """A maximal run of ``chars`` that is never given back: ``(?=(?P<n>…+))(?P=n)`` is an
    atomic group, which Python 3.10's ``re`` lacks. Runs of ``\\s`` and ``\\w`` share no
    character, so giving back part of one never helps a match; it only costs time (four times
    as much on a long paste of "upload" and spaces)."""
    return f"(?=(?P<{name}>{chars}+))(?P={name})"


_EN_UPLOADED = r"upload(?:s|ed|ing)?"
_SPACE, _WORD = r"\s", r"\w"
# "upload" … up to three words … a file word, or a file word … up to two words … "upload".
_EN_UPLOAD_THEN_FILE = (
    rf"\b{_EN_UPLOADED}(?:{_run('s1', _SPACE)}{_run('w1', _WORD)}){{0,3}}?"
    rf"{_run('s2', _SPACE)}{_FILE_WORDS}\b"
)
_EN_FILE_THEN_UPLOAD = (
    rf"\b{_FILE_WORDS}(?:{_run('s3', _SPACE)}{_run('w2', _WORD)}){{0,2}}?"
    rf"{_run('s4', _SPACE)}{_EN_UPLOADED}\b"
)

UPLOAD_MENTION = re.compile(
    rf"{_EN_UPLOAD_THEN_FILE}|{_EN_FILE_THEN_UPLOAD}"
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
    """``text`` without its upload blocks, stripped (``""`` when nothing else was there).

    A block runs from an opening tag (``<uploaded_files>`` or ``<current_uploads>``, any ASCII
    case) to the first closing tag of the same kind after it, and takes the newlines that
    follow with it; blocks do not nest, so tags inside a block go with it. This removes what
    DeerFlow's pattern removes. An opening tag without a closing tag of its kind later in the
    text is not a block: it and the text after it stay, as in DeerFlow. It may be the user
    writing about the tag, and cutting to the end of the message could drop their question;
    should the LLM still record it, the tag and any upload path are upload mentions, which
    :func:`strip_upload_mentions` removes after the update.
    """
    if "<" not in text:
        return text.strip()
    kept: list[str] = []
    copied = searched = 0  # text[:copied] is handled; no block starts before `searched`
    kinds = frozenset(UPLOAD_TAGS)  # the kinds that may still have a closing tag
    while kinds:
        opening = _OPENING[kinds].search(text, searched)
        if opening is None:
            break
        kind = opening.group(1).lower()
        closing = _CLOSING[kind].search(text, opening.end())
        if closing is None:
            # No later opening tag of this kind can be closed either: stop looking for it.
            kinds -= {kind}
            searched = opening.end()
            continue
        kept.append(text[copied : opening.start()])
        copied = searched = closing.end()
    kept.append(text[copied:])
    return "".join(kept).strip()


def mentions_upload(text: str) -> bool:
    """Whether ``text`` talks about uploaded files (see :data:`UPLOAD_MENTION`)."""
    # Every match of UPLOAD_MENTION contains "upload" (in any case) or 上传: testing that
    # first is much cheaper than the pattern and is false for nearly every text.
    if "upload" not in text.casefold() and "上传" not in text:
        return False
    return UPLOAD_MENTION.search(text) is not None


def scrub_upload_sentences(text: str) -> str:
    """``text`` without the sentences that mention uploads; unchanged when none does."""
    if not mentions_upload(text):
        return text
    kept = "".join(
        piece for piece in _PIECE.findall(text) if piece == "\n" or not mentions_upload(piece)
    )
    # Line by line: the pattern [ \t]+\n would backtrack over every long run of spaces.
    kept = "\n".join(line.rstrip(" \t") for line in kept.split("\n"))
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
