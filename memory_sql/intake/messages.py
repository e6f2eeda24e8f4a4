"""Conversation messages, read from whatever shape the agent framework hands over.

Two vocabularies are understood, as dicts or as objects with attributes (no framework import):

- OpenAI chat messages: ``role`` (``user``, ``assistant``, ``tool``, ``system``; also
  ``developer`` → system and ``function`` → tool), ``content``, ``tool_calls``, ``function_call``.
- LangChain messages: ``type`` (``human``, ``ai``, ``tool``, ``system``, ``function``, their
  ``…MessageChunk`` forms, and ``chat`` with its own ``role``), ``content``, ``tool_calls``,
  ``invalid_tool_calls``, ``additional_kwargs`` and ``id``; ``{"type": …, "data": {…}}`` from
  ``langchain_core.messages.message_to_dict`` too.

``content`` is a string, ``None`` (or missing) or a list of parts: strings and
``{"type": "text", "text": …}`` dicts become text (parts joined by a newline); images, files and
reasoning parts are skipped; ``tool_use``/``tool_call``/``function_call`` parts count as tool
calls.

A message is *hidden* when ``hide_from_ui`` is set in ``additional_kwargs`` (or at the top level
of a dict), unless it carries a well-formed answer to a clarification question
(``additional_kwargs.human_input_response``): the user typed that, so it is kept.

Anything else raises :class:`~memory_sql.errors.InvalidMessageError` naming the message's index,
and so does text that cannot be encoded as UTF-8 (a lone surrogate such as ``"\ud800"``): no
LLM request or database row could carry it.

Memory never needs more of one message than :data:`MAX_MESSAGE_CHARS`: :func:`shorten` keeps
the head and the tail of a longer text around a marker. Intake cuts every kept turn so
(:func:`memory_sql.intake.filter.filter_messages_for_memory`), and the update prompt shows each
message at most so long (:mod:`memory_sql.update.prompt`), so the cut loses nothing the LLM would
have seen, and a 5 MB paste costs the agent's turn no more than a 2 kB one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidMessageError

ROLES = ("user", "assistant", "tool", "system")

MAX_MESSAGE_CHARS = 2000
"""The most of one message's text memory keeps and shows the LLM: a longer text keeps its first
and last ``MAX_MESSAGE_CHARS // 2`` characters around a marker (:func:`shorten`)."""
_SHORTENED = "\n...[{} characters omitted]...\n"
_SHORTENED_MARK = re.compile(r"\n\.\.\.\[\d+ characters omitted\]\.\.\.\n")


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text``, or its first and last ``limit // 2`` characters around a marker saying how
    many were left out. A text it shortened already is returned as it is, so the marker keeps
    the count of the original: ``shorten(shorten(t)) == shorten(t)``."""
    if len(text) <= limit:
        return text
    half = limit // 2
    if _SHORTENED_MARK.fullmatch(text, half, len(text) - half):
        return text
    return text[:half] + _SHORTENED.format(len(text) - 2 * half) + text[-half:]


_ROLE_NAMES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "tool": "tool",
    "function": "tool",
    "system": "system",
    "developer": "system",
    "humanmessagechunk": "user",
    "aimessagechunk": "assistant",
    "toolmessagechunk": "tool",
    "functionmessagechunk": "tool",
    "systemmessagechunk": "system",
}
_CHAT_TYPES = frozenset({"chat", "chatmessagechunk"})
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_TOOL_PART_TYPES = frozenset({"tool_use", "tool_call", "function_call", "server_tool_use"})


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn, reduced to what memory needs.

    ``role`` is one of :data:`ROLES`; ``text`` is the readable text; ``has_tool_calls`` is true
    for an assistant turn that asks for tools (not a final reply); ``hidden`` marks a message the
    user never saw; ``id`` is the framework's message id, if any.
    """

    role: str
    text: str
    has_tool_calls: bool = False
    hidden: bool = False
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` reads it back to an equal message."""
        return {
            "role": self.role,
            "text": self.text,
            "has_tool_calls": self.has_tool_calls,
            "hidden": self.hidden,
            "id": self.id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, index: int | None = None) -> Message:
        """Read what :meth:`to_dict` wrote.

        Raises:
            InvalidMessageError: a key is missing or has the wrong type.
        """
        if not isinstance(data, Mapping):
            raise InvalidMessageError(index, f"expected a dict, got {type(data).__name__}")
        role, text = data.get("role"), data.get("text")
        if role not in ROLES:
            raise InvalidMessageError(index, f"role must be one of {', '.join(ROLES)}")
        if not isinstance(text, str):
            raise InvalidMessageError(index, "text must be a string")
        _check_encodable(text, "text", index)
        flags = [data.get("has_tool_calls", False), data.get("hidden", False)]
        if not all(isinstance(flag, bool) for flag in flags):
            raise InvalidMessageError(index, "has_tool_calls and hidden must be booleans")
        msg_id = data.get("id")
        if msg_id is not None and not isinstance(msg_id, str):
            raise InvalidMessageError(index, "id must be a string or null")
        return cls(role, text, flags[0], flags[1], msg_id)


def normalize_message(message: Any, index: int | None = None) -> Message:
    """One message of either vocabulary as a :class:`Message` (a Message is returned as is).

    Raises:
        InvalidMessageError: the message has neither shape, or a field has the wrong type.
    """
    if isinstance(message, Message):
        return message
    is_mapping = _is_mapping(message)
    if is_mapping:
        data = message.get("data")
        if _is_mapping(data) and "role" not in message and "content" not in message:
            message = {**data, "type": message.get("type", data.get("type"))}
        get = message.get
    elif isinstance(message, (str, bytes, int, float, list, tuple, set)) or message is None:
        raise InvalidMessageError(index, _shape_problem(message))
    else:

        def get(name: str) -> Any:
            return _attribute(message, name, index)

    raw_role = get("role")
    if raw_role is None:
        raw_role = get("type")
    if raw_role is None:
        raise InvalidMessageError(index, _shape_problem(message))
    role = _role(raw_role, get, index)

    kwargs = get("additional_kwargs")
    if kwargs is None:
        kwargs = {}
    elif not _is_mapping(kwargs):
        raise InvalidMessageError(index, "additional_kwargs must be a dict")
    text, has_tool_calls = _content(get("content"), index)
    for source in (get, kwargs.get):
        for name in ("tool_calls", "invalid_tool_calls", "function_call"):
            calls = source(name)
            if calls is not None and _non_empty_calls(calls, name, index):
                has_tool_calls = True
    hide = kwargs.get("hide_from_ui") or (is_mapping and message.get("hide_from_ui"))
    hidden = bool(hide) and not _is_clarification_answer(kwargs.get("human_input_response"))

    msg_id = get("id")
    if isinstance(msg_id, int) and not isinstance(msg_id, bool):
        msg_id = str(msg_id)
    if msg_id is not None and not isinstance(msg_id, str):
        raise InvalidMessageError(index, f"id must be a string, got {type(msg_id).__name__}")
    _check_encodable(text, "text", index)
    if msg_id:
        _check_encodable(msg_id, "id", index)
    return Message(role, text, has_tool_calls, hidden, msg_id or None)


def _check_encodable(value: str, what: str, index: int | None) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            index,
            f"{what} is not valid Unicode ({exc.reason} at character {exc.start}: "
            f"{value[exc.start]!r})",
        ) from None


def normalize_messages(messages: Iterable[Any]) -> list[Message]:
    """Every message of a conversation through :func:`normalize_message`, in order.

    Raises:
        InvalidMessageError: ``messages`` is not a list (or other iterable) of messages, or one
            of them is malformed (its index is named).
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            None, f"expected a list of messages, got {type(messages).__name__}"
        )
    return [normalize_message(message, index) for index, message in enumerate(messages)]


def _shape_problem(message: Any) -> str:
    return (
        "expected a chat message (a dict or object with a 'role' or 'type'), "
        f"got {type(message).__name__}"
    )


def _is_mapping(value: Any) -> bool:
    return isinstance(value, (dict, Mapping))


def _attribute(message: Any, name: str, index: int | None) -> Any:
    try:
        return getattr(message, name, None)
    except Exception as exc:  # a property of a foreign object failed
        raise InvalidMessageError(index, f"reading .{name} failed: {exc!r}") from exc


def _role(raw: Any, get: Callable[[str], Any], index: int | None) -> str:
    if not isinstance(raw, str):
        raise InvalidMessageError(index, f"role/type must be a string, got {type(raw).__name__}")
    name = raw.strip().lower()
    if name in _CHAT_TYPES:
        chat_role = get("role")
        name = chat_role.strip().lower() if isinstance(chat_role, str) else ""
    role = _ROLE_NAMES.get(name)
    if role is None:
        raise InvalidMessageError(index, f"unknown message role/type {raw[:40]!r}")
    return role


def _content(content: Any, index: int | None) -> tuple[str, bool]:
    """The text of a message's content, and whether any part is a tool call."""
    if content is None:
        return "", False
    if isinstance(content, str):
        return content, False
    if not isinstance(content, (list, tuple)):
        raise InvalidMessageError(
            index, f"content must be a string or a list of parts, got {type(content).__name__}"
        )
    texts: list[str] = []
    tool_call = False
    for number, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not _is_mapping(part):
            raise InvalidMessageError(
                index,
                f"content part {number} must be a string or a dict, not {type(part).__name__}",
            )
        kind = part.get("type")
        if kind is not None and not isinstance(kind, str):
            raise InvalidMessageError(index, f"content part {number}: type must be a string")
        if kind in _TOOL_PART_TYPES:
            tool_call = True
        elif kind in _TEXT_PART_TYPES or (kind is None and "text" in part):
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidMessageError(index, f"content part {number} has no string 'text'")
            texts.append(text)
    return "\n".join(texts), tool_call


def _non_empty_calls(calls: Any, name: str, index: int | None) -> bool:
    if name == "function_call":
        if not _is_mapping(calls):
            raise InvalidMessageError(index, "function_call must be a dict or null")
        return bool(calls)
    if not isinstance(calls, (list, tuple)):
        raise InvalidMessageError(index, f"{name} must be a list or null")
    return len(calls) > 0


def _is_clarification_answer(answer: Any) -> bool:
    if not _is_mapping(answer):
        return False

    def filled(key: str) -> bool:
        value = answer.get(key)
        return isinstance(value, str) and bool(value.strip())

    version = answer.get("version")
    if type(version) is not int or version != 1 or answer.get("kind") != "human_input_response":
        return False
    if not all(filled(key) for key in ("source", "request_id", "value")):
        return False
    kind = answer.get("response_kind")
    return kind == "text" or (kind == "option" and filled("option_id"))
