"""Very long messages are cut at intake, before the trivial check and the signals, to what the
update prompt shows of a message anyway (``messages.MAX_MESSAGE_CHARS``, head and tail around a
marker): a 5 MB paste costs ``after_agent`` no more than a short message."""

from __future__ import annotations

import json

import sqlalchemy as sa

import memory_sql.intake.conversation
from memory_sql import MemoryConfig, MemoryService, filter_messages_for_memory
from memory_sql.intake.messages import MAX_MESSAGE_CHARS, Message, shorten
from memory_sql.intake.signals import detect_signals, signals_of_kept
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.update.prompt import format_conversation

PASTE = "SELECT * FROM orders WHERE id = 42; -- a log line of the paste\n" * 80_000  # ~5 MB
BOUND = MAX_MESSAGE_CHARS + len("\n...[5000000 characters omitted]...\n")


def test_a_long_user_message_keeps_its_head_and_tail_around_a_marker():
    text = "No, that's wrong: we use PostgreSQL.\n" + PASTE + "Thanks, exactly right."
    (user, reply) = filter_messages_for_memory(
        [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]
    )
    assert len(user.text) <= BOUND
    half = MAX_MESSAGE_CHARS // 2
    assert (
        user.text
        == text[:half] + f"\n...[{len(text) - 2 * half} characters omitted]...\n" + (text[-half:])
    )
    assert reply.text == "Noted."
    signals = detect_signals([user, reply])
    assert signals.correction  # found in the head, as in the whole text


def test_a_long_assistant_reply_is_cut_too():
    reply = "  Here is the whole log back:\n" + PASTE + "Done.  "
    (_, kept) = filter_messages_for_memory(
        [{"role": "user", "content": "Echo my log"}, {"role": "assistant", "content": reply}]
    )
    assert len(kept.text) <= BOUND
    assert kept.text.startswith("Here is the whole log back:") and kept.text.endswith("Done.")


def test_the_prompt_shows_a_cut_message_as_it_would_the_whole_one():
    text = "I deploy with pnpm. " + PASTE + " That is all."
    whole = format_conversation([Message("user", text)])
    (cut,) = filter_messages_for_memory([{"role": "user", "content": text}])
    assert format_conversation([cut]) == whole  # the original count of omitted characters
    assert shorten(shorten(text)) == shorten(text)


def test_an_upload_block_longer_than_the_cut_is_still_removed():
    files = "".join(f"- /mnt/user-data/uploads/part{n}.csv (4 KB)\n" for n in range(200))
    text = f"<uploaded_files>\n{files}</uploaded_files>\nWhich of these has the March totals?"
    assert len(files) > MAX_MESSAGE_CHARS
    (user,) = filter_messages_for_memory([{"role": "user", "content": text}])
    assert user.text == "Which of these has the March totals?"


def test_after_agent_queues_and_looks_for_signals_only_in_the_cut_text(tmp_path, monkeypatch):
    seen: list[int] = []

    def recording(messages, *args):
        seen.extend(len(m.text) for m in messages)
        return signals_of_kept(messages, *args)

    monkeypatch.setattr(memory_sql.intake.conversation, "signals_of_kept", recording)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    chat = [{"role": "user", "content": PASTE}, {"role": "assistant", "content": PASTE}]
    with MemoryService(MemoryConfig(storage=url, model_name="m"), start=False) as service:
        assert service.after_agent(chat, thread_id="t1", user_id="u")
        with service.queue.engine.connect() as conn:
            stored = json.loads(conn.execute(sa.select(pending.c.messages)).scalar_one())
    assert seen and max(seen) <= BOUND
    assert [len(m["text"]) <= BOUND for m in stored] == [True, True]
