"""Stand-in for ``deerflow.models``: the host's default chat model.

DeerFlow's ``create_chat_model(name=None)`` builds a LangChain chat model of any provider.
Here it is :class:`ScriptedChatModel`, a small real object with LangChain's calling
convention: ``invoke(messages, config=None)`` with role/content dicts, answering a message
object with ``content`` (a string, or a list of content blocks), ``usage_metadata`` and
``response_metadata``, as LangChain's ``AIMessage`` has. It keeps every call it gets.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChatReply:
    """What ``invoke`` returns: LangChain's ``AIMessage`` attributes a backend reads."""

    content: Any
    usage_metadata: dict[str, int] | None = None
    response_metadata: dict[str, Any] = field(default_factory=dict)


class ScriptedChatModel:
    """A chat model answering scripted replies in order, then ``default`` (or failing)."""

    def __init__(self, *, model_name: str = "host-default-model", default: str | None = None):
        self.model_name = model_name
        self.default = default
        self.calls: list[dict[str, Any]] = []
        self._replies: deque[Any] = deque()
        self._lock = threading.Lock()

    def reply(self, content: Any) -> None:
        """Queue an answer; an exception instance is raised instead of answered."""
        with self._lock:
            self._replies.append(content)

    def invoke(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> ChatReply:
        with self._lock:
            self.calls.append({"input": input, "config": dict(config or {})})
            content = self._replies.popleft() if self._replies else self.default
        if isinstance(content, BaseException):
            raise content
        if content is None:
            raise RuntimeError("ScriptedChatModel: no reply scripted")
        text = content if isinstance(content, str) else str(content)
        return ChatReply(
            content=content,
            usage_metadata={
                "input_tokens": len(str(input)) // 4,
                "output_tokens": len(text) // 4,
                "total_tokens": len(str(input)) // 4 + len(text) // 4,
            },
            response_metadata={"model_name": self.model_name},
        )


_DEFAULT: list[ScriptedChatModel | None] = [None]


def set_default_chat_model(model: ScriptedChatModel | None) -> None:
    """What ``create_chat_model()`` returns from now on (None: no model configured)."""
    _DEFAULT[0] = model


def create_chat_model(name: str | None = None) -> ScriptedChatModel | None:
    """The host's default chat model (``name`` None), or None when none is configured."""
    return _DEFAULT[0]
