"""A chat-completions server on 127.0.0.1 answering with recorded model replies.

``memory-sql demo`` runs the real pipeline with no model configured by pointing the real
``openai`` client at this server::

    with ReplayLLM(load_recordings()) as replay:
        config = config.replace(llm_base_url=replay.base_url, ...)

Each request is matched to a recording by what it asks about, never by arrival order: the
recording whose ``match`` phrase occurs in the ``<conversation>`` part of the prompt (the
longest such phrase wins). A request no recording matches gets HTTP 404 with a message saying
so, and the update fails as it would with a real model refusing.

Fact ids are new on every run, so a recording cannot name the facts to remove by id. It names
them by content (``removeFacts``); the server finds those facts in the request's
``<current_memory>`` block and answers with their ids in ``factsToRemove``, as the model would.
"""

from __future__ import annotations

import copy
import html
import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from . import RECORDINGS_FILE, read_data

MODEL = "memory-sql-demo-replay"
"""The model name the demo's configuration gives, and the server answers with."""

_QUIET_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


@dataclass(frozen=True)
class Recording:
    """A recorded model reply: the JSON object the model answered (``reply``) when asked about
    a conversation containing ``match``; ``remove_facts`` are contents of facts whose ids go in
    ``factsToRemove``."""

    match: str
    reply: Mapping[str, Any]
    remove_facts: tuple[str, ...] = ()
    conversation: str = ""


def load_recordings() -> list[Recording]:
    """The bundled recordings (``memory_sql/demo/recorded_responses.json``)."""
    return [
        Recording(
            match=item["match"],
            reply=item["reply"],
            remove_facts=tuple(item.get("removeFacts", ())),
            conversation=item.get("conversation", ""),
        )
        for item in read_data(RECORDINGS_FILE)["responses"]
    ]


class ReplayLLM:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint answering from ``recordings``.

    ``base_url`` is ``http://127.0.0.1:PORT/v1``; ``served`` counts the requests answered with
    a recording and ``unmatched`` those that matched none.
    """

    def __init__(self, recordings: Sequence[Recording]) -> None:
        self.recordings = list(recordings)
        self.served = 0
        self.unmatched = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="replay-llm", daemon=True
        )
        self._thread.start()
        host, port = str(self._server.server_address[0]), self._server.server_address[1]
        self.base_url = f"http://{host}:{port}/v1"

    def answer(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body answering the chat-completions request ``body``."""
        prompt = _last_user_message(body)
        conversation = _between(prompt, "<conversation>", "</conversation>")
        recording = self.find(conversation)
        if recording is None:
            with self._lock:
                self.unmatched += 1
            return 404, _error_body(
                "memory-sql demo replay: no recorded response matches this conversation"
            )
        reply = copy.deepcopy(dict(recording.reply))
        if recording.remove_facts:
            memory = _between(prompt, "<current_memory>", "</current_memory>")
            ids = fact_ids(memory, recording.remove_facts)
            reply["factsToRemove"] = [*reply.get("factsToRemove", []), *ids]
        with self._lock:
            self.served += 1
        content = json.dumps(reply, ensure_ascii=False, indent=2)
        return 200, _completion_body(content, len(json.dumps(body.get("messages", ""))) // 4)

    def find(self, conversation: str) -> Recording | None:
        """The recording for ``conversation`` (prompt text, HTML-escaped), or None."""
        text = html.unescape(conversation)
        found = [r for r in self.recordings if r.match and r.match in text]
        return max(found, key=lambda r: len(r.match)) if found else None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ReplayLLM:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def fact_ids(memory: str, contents: Iterable[str]) -> list[str]:
    """The ids of the facts of a prompt's ``<current_memory>`` text whose content is one of
    ``contents`` (compared casefolded). Fact lines read ``- id | category | 0.90 | content``,
    a correction adding `` (mistake to avoid: …)``."""
    wanted = {" ".join(c.split()).casefold() for c in contents}
    ids = []
    for line in memory.splitlines():
        parts = line.removeprefix("- ").split(" | ", 3)
        if not line.startswith("- ") or len(parts) != 4:
            continue
        content = html.unescape(parts[3]).split(" (mistake to avoid: ")[0]
        if content.casefold() in wanted:
            ids.append(parts[0])
    return ids


def _last_user_message(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


def _between(text: str, start: str, end: str) -> str:
    head, found, rest = text.partition(start)
    return rest.partition(end)[0] if found else ""


def _completion_body(content: str, prompt_tokens: int) -> dict[str, Any]:
    completion_tokens = len(content) // 4
    return {
        "id": f"chatcmpl-replay-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _error_body(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": "404"}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], _QUIET_ERRORS):
            super().handle_error(request, client_address)


def _handler_for(replay: ReplayLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, _error_body(f"memory-sql demo replay: no route {self.path}"))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, _error_body("memory-sql demo replay: the body is not JSON"))
                return
            self._send(*replay.answer(body if isinstance(body, dict) else {}))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
