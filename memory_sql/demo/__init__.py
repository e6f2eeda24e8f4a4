"""The bundled demo: sample conversations, recorded model replies, and a server replaying them.

``memory-sql demo`` (:mod:`memory_sql.cli.demo`) feeds :func:`load_conversations` through the
real pipeline. With no LLM configured, :class:`~memory_sql.demo.replay.ReplayLLM` stands in for
the model, answering from :func:`~memory_sql.demo.replay.load_recordings`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

CONVERSATIONS_FILE = "conversations.json"
RECORDINGS_FILE = "recorded_responses.json"


@dataclass(frozen=True)
class SampleConversation:
    """One bundled conversation and the memory scope it belongs to."""

    id: str
    title: str
    language: str
    thread_id: str
    user_id: str
    agent_name: str | None
    messages: tuple[dict[str, Any], ...]


def read_data(name: str) -> Any:
    """The parsed JSON of the bundled data file ``name``."""
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return json.loads(text)


def load_conversations() -> list[SampleConversation]:
    """The bundled sample conversations, in the order the demo feeds them."""
    return [
        SampleConversation(
            id=item["id"],
            title=item["title"],
            language=item["language"],
            thread_id=item["thread_id"],
            user_id=item["user_id"],
            agent_name=item.get("agent_name"),
            messages=tuple(item["messages"]),
        )
        for item in read_data(CONVERSATIONS_FILE)["conversations"]
    ]
