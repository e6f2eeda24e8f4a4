"""Message normalisation and the memory filter: every rule, in English, Chinese and mixed text."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_sql.errors import InvalidMessageError
from memory_sql.intake.filter import filter_messages_for_memory, has_minimum_dialogue, is_trivial
from memory_sql.intake.messages import Message, normalize_message, normalize_messages
from memory_sql.intake.signals import detect_correction, detect_reinforcement, detect_signals
from memory_sql.pattern_files import load_patterns


@dataclass
class LCMessage:
    """Shaped like a langchain_core message object (attributes, not a dict)."""

    type: str
    content: Any
    additional_kwargs: dict[str, Any] = field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    id: str | None = None


def user(text: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def bot(text: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


CALL = [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]
UPLOAD = "<uploaded_files>\n- /mnt/user-data/uploads/cv.pdf (12 KB)\n</uploaded_files>\n"
CLARIFICATION = {
    "version": 1,
    "kind": "human_input_response",
    "source": "ask_clarification",
    "request_id": "r1",
    "value": "PostgreSQL",
    "response_kind": "text",
}


# Normalisation ---------------------------------------------------------------------------

NORMALISE_CASES = [
    ("openai user", user("hi"), Message("user", "hi")),
    ("openai system", {"role": "system", "content": "be brief"}, Message("system", "be brief")),
    ("openai developer", {"role": "developer", "content": "x"}, Message("system", "x")),
    ("openai tool", {"role": "tool", "content": "42", "tool_call_id": "c1"}, Message("tool", "42")),
    ("openai tool call", bot(None, tool_calls=CALL), Message("assistant", "", True)),
    ("openai empty tool_calls", bot("done", tool_calls=[]), Message("assistant", "done")),
    (
        "openai function_call",
        bot(None, function_call={"name": "f", "arguments": "{}"}),
        Message("assistant", "", True),
    ),
    ("missing content", {"role": "assistant", "tool_calls": CALL}, Message("assistant", "", True)),
    (
        "parts",
        user([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}, "这张图"]),
        Message("user", "look\n这张图"),
    ),
    (
        "tool_use part",
        bot(
            [{"type": "text", "text": "let me check"}, {"type": "tool_use", "id": "t", "input": {}}]
        ),
        Message("assistant", "let me check", True),
    ),
    (
        "reasoning part skipped",
        bot([{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "答案"}]),
        Message("assistant", "答案"),
    ),
    (
        "langchain dict",
        {"type": "human", "content": "你好", "id": "m1", "additional_kwargs": {}},
        Message("user", "你好", id="m1"),
    ),
    (
        "langchain message_to_dict",
        {"type": "ai", "data": {"type": "ai", "content": "ok then", "tool_calls": []}},
        Message("assistant", "ok then"),
    ),
    ("langchain object", LCMessage("human", "hello", id="7"), Message("user", "hello", id="7")),
    (
        "langchain ai tool_calls",
        LCMessage("ai", "", tool_calls=[{"name": "x", "args": {}, "id": "1"}]),
        Message("assistant", "", True),
    ),
    (
        "langchain kwargs tool_calls",
        LCMessage("ai", "", additional_kwargs={"tool_calls": CALL}),
        Message("assistant", "", True),
    ),
    ("langchain chunk", LCMessage("AIMessageChunk", "part"), Message("assistant", "part")),
    (
        "langchain hidden",
        LCMessage("human", "todo reminder", additional_kwargs={"hide_from_ui": True}),
        Message("user", "todo reminder", hidden=True),
    ),
    (
        "clarification answer is visible",
        LCMessage(
            "human",
            "PostgreSQL",
            additional_kwargs={"hide_from_ui": True, "human_input_response": CLARIFICATION},
        ),
        Message("user", "PostgreSQL"),
    ),
    (
        "malformed clarification stays hidden",
        LCMessage(
            "human",
            "x",
            additional_kwargs={
                "hide_from_ui": True,
                "human_input_response": {**CLARIFICATION, "response_kind": "option"},
            },
        ),
        Message("user", "x", hidden=True),
    ),
    ("top-level hide_from_ui", user("x", hide_from_ui=True), Message("user", "x", hidden=True)),
    ("integer id", {"type": "human", "content": "x", "id": 5}, Message("user", "x", id="5")),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in NORMALISE_CASES], ids=[c[0] for c in NORMALISE_CASES]
)
def test_normalize_message(raw: Any, expected: Message) -> None:
    assert normalize_message(raw) == expected


INVALID_CASES = [
    ("string", "hello", "message 0: expected a chat message"),
    ("none", None, "message 0: expected a chat message"),
    ("no role", {"content": "hi"}, "message 0: expected a chat message"),
    ("object without type", object(), "message 0: expected a chat message"),
    ("unknown role", {"role": "wizard", "content": "x"}, "unknown message role/type 'wizard'"),
    ("role not a string", {"role": 3, "content": "x"}, "role/type must be a string"),
    ("content a dict", user({"text": "x"}), "content must be a string or a list"),
    ("bad part", user(["ok", 3]), "content part 1 must be a string or a dict"),
    ("text part without text", user([{"type": "text"}]), "content part 0 has no string 'text'"),
    (
        "part type a list",
        user([{"type": [], "text": "x"}]),
        "content part 0: type must be a string",
    ),
    ("tool_calls not a list", bot("x", tool_calls="yes"), "tool_calls must be a list"),
    ("kwargs not a dict", {"type": "ai", "content": "", "additional_kwargs": []}, "must be a dict"),
    ("id a list", user("x", id=[1]), "id must be a string"),
]


@pytest.mark.parametrize(
    ("raw", "fragment"), [c[1:] for c in INVALID_CASES], ids=[c[0] for c in INVALID_CASES]
)
def test_invalid_message_names_index_and_problem(raw: Any, fragment: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        filter_messages_for_memory([raw])
    assert fragment in str(info.value)
    assert info.value.index == 0


def test_invalid_message_index_is_its_position() -> None:
    with pytest.raises(InvalidMessageError, match=r"^message 2: ") as info:
        normalize_messages([user("a"), bot("b"), 42])
    assert info.value.index == 2


@pytest.mark.parametrize("messages", ["hello", {"role": "user"}, None, 5])
def test_messages_must_be_a_list(messages: Any) -> None:
    with pytest.raises(InvalidMessageError, match=r"^messages: expected a list"):
        filter_messages_for_memory(messages)


def test_message_json_round_trip() -> None:
    message = Message("assistant", "答案 <b>", has_tool_calls=True, hidden=False, id="m-1")
    assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message
    with pytest.raises(InvalidMessageError, match="role must be one of"):
        Message.from_dict({"role": "human", "text": "x"})


# Filtering ---------------------------------------------------------------------------------

FILTER_CASES = [
    (
        "keeps user and final reply",
        [user("I use Python 3.12"), bot("Noted, 3.12 it is.")],
        [("user", "I use Python 3.12"), ("assistant", "Noted, 3.12 it is.")],
    ),
    (
        "drops system, tool call and tool result",
        [
            {"role": "system", "content": "You are helpful"},
            user("天气怎么样?"),
            bot(None, tool_calls=CALL),
            {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "c1"},
            bot("今天 21 度。"),
        ],
        [("user", "天气怎么样?"), ("assistant", "今天 21 度。")],
    ),
    (
        "drops tool-call-only turn with text",
        [user("search it"), bot("Searching…", tool_calls=CALL), bot("Found it.")],
        [("user", "search it"), ("assistant", "Found it.")],
    ),
    (
        "drops hidden messages",
        [
            LCMessage("human", "<memory>old</memory>", additional_kwargs={"hide_from_ui": True}),
            LCMessage("human", "plan my week"),
            LCMessage("ai", "Here is a plan."),
        ],
        [("user", "plan my week"), ("assistant", "Here is a plan.")],
    ),
    (
        "upload block removed, text kept",
        [user(UPLOAD + "Summarise my CV please"), bot("Your CV shows…")],
        [("user", "Summarise my CV please"), ("assistant", "Your CV shows…")],
    ),
    (
        "upload-only turn dropped with its reply",
        [user(UPLOAD), bot("I see you uploaded cv.pdf."), user("我喜欢简洁的回答"), bot("好")],
        [("user", "我喜欢简洁的回答"), ("assistant", "好")],
    ),
    (
        "current_uploads block, upper case tag",
        [user("<CURRENT_UPLOADS>a.csv</CURRENT_UPLOADS>\n分析一下"), bot("分析如下")],
        [("user", "分析一下"), ("assistant", "分析如下")],
    ),
    (
        "upload-only in list parts",
        [user([{"type": "text", "text": UPLOAD}]), bot("Got the file.")],
        [],
    ),
    (
        "upload-only turn followed by a real question keeps its answer",
        [user(UPLOAD), user("what's in it?"), bot("A CV.")],
        [("user", "what's in it?"), ("assistant", "A CV.")],
    ),
    (
        "reply skip waits past tool calls",
        [user(UPLOAD), bot(None, tool_calls=CALL), {"role": "tool", "content": "x"}, bot("Read.")],
        [],
    ),
    (
        "trivial english ack dropped with reply",
        [user("Use tabs"), bot("OK, tabs."), user("thanks!"), bot("You're welcome!")],
        [("user", "Use tabs"), ("assistant", "OK, tabs.")],
    ),
    (
        "trivial chinese ack dropped with reply",
        [user("用 tabs"), bot("好的"), user("好的。"), bot("不客气")],
        [("user", "用 tabs"), ("assistant", "好的")],
    ),
    ("trivial 收到", [user("收到！"), bot("👍")], []),
    ("trivial got it", [user("Got it."), bot("Great")], []),
    ("trivial fullwidth ok", [user("ＯＫ"), bot("fine")], []),
    ("trivial combined", [user("ok, thanks"), bot("np")], []),
    (
        "ack with content is not trivial",
        [user("ok, but I prefer spaces"), bot("Spaces then.")],
        [("user", "ok, but I prefer spaces"), ("assistant", "Spaces then.")],
    ),
    (
        "好的 with content is not trivial",
        [user("好的，以后用中文回答"), bot("好的")],
        [("user", "好的，以后用中文回答"), ("assistant", "好的")],
    ),
    ("empty assistant text dropped", [user("hi there"), bot("   ")], [("user", "hi there")]),
    (
        "langchain object conversation",
        [
            LCMessage("system", "sys"),
            LCMessage("human", [{"type": "text", "text": "My name is Ada"}]),
            LCMessage("ai", "", tool_calls=[{"name": "save", "args": {}, "id": "1"}]),
            LCMessage("tool", "saved"),
            LCMessage("ai", "Nice to meet you, Ada."),
        ],
        [("user", "My name is Ada"), ("assistant", "Nice to meet you, Ada.")],
    ),
    (
        "clarification answer kept",
        [
            LCMessage(
                "human",
                "PostgreSQL",
                additional_kwargs={"hide_from_ui": True, "human_input_response": CLARIFICATION},
            ),
            LCMessage("ai", "Using PostgreSQL."),
        ],
        [("user", "PostgreSQL"), ("assistant", "Using PostgreSQL.")],
    ),
]


@pytest.mark.parametrize(
    ("messages", "expected"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter_messages_for_memory(messages: list[Any], expected: list[tuple[str, str]]) -> None:
    filtered = filter_messages_for_memory(messages)
    assert [(m.role, m.text) for m in filtered] == expected
    assert filter_messages_for_memory(filtered) == filtered


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ((), False),
        (("user",), False),
        (("assistant",), False),
        (("user", "user"), False),
        (("user", "assistant"), True),
        (("assistant", "user"), True),
    ],
)
def test_has_minimum_dialogue(roles: tuple[str, ...], expected: bool) -> None:
    assert has_minimum_dialogue([Message(role, "x") for role in roles]) is expected


def test_filter_does_not_change_its_input() -> None:
    messages = [user(UPLOAD + "hi"), bot("hello")]
    snapshot = json.dumps(messages)
    filter_messages_for_memory(messages)
    assert json.dumps(messages) == snapshot


# Property: arbitrary message-shaped data ------------------------------------------------

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
# Values of the wrong type, unhashable ones included, to put where a field is expected.
_odd = st.one_of(st.builds(list), st.builds(dict), st.sampled_from([None, 3, 2.5, True, b"x"]))
_roles = st.sampled_from(
    ["user", "assistant", "tool", "system", "human", "ai", "developer", "AIMessageChunk"]
)
_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["ok", "好的", "不对", "yes, exactly", UPLOAD, UPLOAD + "hi", "try again"]),
)
_part = st.one_of(
    _text,
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries({"type": st.sampled_from(["tool_use", "image_url", "reasoning"])}),
)
_good = {
    "content": st.one_of(_text, st.lists(_part, max_size=3), st.none()),
    "tool_calls": st.sampled_from([None, [], CALL]),
    "additional_kwargs": st.fixed_dictionaries(
        {},
        optional={
            "hide_from_ui": st.booleans(),
            "human_input_response": st.one_of(st.just(CLARIFICATION), _json),
        },
    ),
    "id": st.one_of(st.none(), st.text(max_size=5)),
}


@st.composite
def _message(draw: st.DrawFn) -> Any:
    """A well-formed message of either vocabulary, with one field spoilt now and then."""
    fields = {name: draw(strategy) for name, strategy in _good.items()}
    if draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from([*_good, "role", "part", "part type", "part text"]))
        bad = draw(st.one_of(_odd, _json))
        if name.startswith("part"):
            part = {"type": "text", "text": "x"} if name != "part" else bad
            if name == "part type":
                part["type"] = bad
            elif name == "part text":
                part["text"] = bad
            fields["content"] = ["ok", part]
        else:
            fields[name] = bad
    role = fields.pop("role", None) or draw(_roles)
    shape = draw(st.sampled_from(["openai", "langchain dict", "langchain object", "to_dict"]))
    if shape == "openai":
        return {"role": role, **fields}
    if shape == "langchain dict":
        return {"type": role, **fields}
    if shape == "to_dict":
        return {"type": role, "data": {"type": role, **fields}}
    return LCMessage(role, **{k: v for k, v in fields.items() if k != "tool_calls"})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(_message(), max_size=5), _json))
def test_arbitrary_input_returns_or_raises_invalid_message(messages: Any) -> None:
    detectors = (detect_correction, detect_reinforcement, detect_signals)
    try:
        filtered = filter_messages_for_memory(messages)
    except InvalidMessageError:
        for detect in detectors:
            with pytest.raises(InvalidMessageError):
                detect(messages)
        return
    assert all(m.role in ("user", "assistant") and not m.hidden for m in filtered)
    assert filter_messages_for_memory(filtered) == filtered
    for m in filtered:
        assert Message.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    signals = detect_signals(messages)
    assert signals == detect_signals(filtered)
    assert (detect_correction(messages), detect_reinforcement(messages)) == (
        signals.correction,
        signals.reinforcement,
    )


# Hostile input -------------------------------------------------------------------------

TURN = 180_000  # six user turns (the signal window) of this size make about 1 MB
# Each turn is shaped to make a backtracking pattern rescan the rest of its text.
HOSTILE_TURNS = [
    "<uploaded_files>" * (TURN // 16),
    "<current_uploads>x" * (TURN // 18),
    "<uploaded_files><current_uploads>" * (TURN // 33) + "</current_uploads>",
    "yes" + " " * TURN + "x",
    "ok" + " ," * (TURN // 2) + "x",
    "." * TURN,
    "a." * (TURN // 2),
    ("upload" + " " * 100) * (TURN // 106),
    "that's not " * (TURN // 11),
    "not quite " * (TURN // 10),
    "perfect" + " " * TURN,
    "对" + " " * TURN + "就",
    "不是" * (TURN // 2),
    "对，" * (TURN // 2),
]


def hostile_conversations() -> list[list[dict[str, Any]]]:
    """The turns, six to a conversation, each answered by the assistant."""
    turns = HOSTILE_TURNS
    return [
        [message for text in turns[i : i + 6] for message in (user(text), bot("r"))]
        for i in range(0, len(turns), 6)
    ]


def _time(function: Any, *args: Any) -> float:
    # CPU time, not wall time: other processes on a busy machine must not fail the test.
    start = time.process_time()
    function(*args)
    return time.process_time() - start


@pytest.mark.parametrize(
    "function",
    [
        normalize_messages,
        filter_messages_for_memory,
        lambda messages: has_minimum_dialogue(filter_messages_for_memory(messages)),
        detect_signals,
        detect_correction,
        detect_reinforcement,
    ],
    ids=lambda f: f.__name__.replace("<lambda>", "has_minimum_dialogue"),
)
def test_intake_is_linear_on_hostile_text(function: Any) -> None:
    # A guard against quadratic blow-up (minutes at this size), not a benchmark.
    for messages in hostile_conversations():
        assert _time(function, messages) < 2.0


def test_is_trivial_is_linear_on_hostile_text() -> None:
    trivial = load_patterns().trivial
    for text in HOSTILE_TURNS:
        assert _time(is_trivial, text * 5, trivial) < 2.0


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "a lone \ud800 surrogate"},
        {"role": "user", "content": [{"type": "text", "text": "\udfff"}]},
        {"role": "user", "content": "fine", "id": "id-\ud83d"},
    ],
)
def test_text_that_cannot_be_utf8_is_refused_naming_the_message(message):
    with pytest.raises(InvalidMessageError, match=r"message 1: .* is not valid Unicode"):
        normalize_messages([{"role": "user", "content": "ok"}, message])


def test_a_queued_message_with_a_lone_surrogate_does_not_read_back():
    with pytest.raises(InvalidMessageError, match="not valid Unicode"):
        Message.from_dict({"role": "user", "text": "\ud800"}, index=0)
