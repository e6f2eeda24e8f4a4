"""A chat-completions endpoint that answers at once for as little CPU as it can: the LLM
stand-in of ``bench_queue.py --concurrent --lean-llm``.

The tests' ``ScriptedLLM`` (``tests/llm_server.py``) is a ``ThreadingHTTPServer`` that keeps
every request and parses every header with the standard library's e-mail parser: 0.8–1.1 ms of
CPU a call, on the cores the worker being measured shares. A real model server's CPU is not
the worker machine's. This one reads the request line, the ``Content-Length`` and the JSON
body, answers what ``responder`` computes from the body in the schema the ``openai`` client
parses, and keeps the connection open (HTTP/1.1), on one asyncio loop.

    serve(responder, port_queue, stop_event)   # in a process of its own
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from llm_server import completion_body  # tests/ (bench_queue puts it on the path)

Responder = Callable[[dict[str, Any]], str]


def _answer(responder: Responder, raw: bytes) -> bytes:
    request = json.loads(raw)
    content = responder(request)
    model = request.get("model", "unknown")
    body = completion_body(content, model, len(raw) // 4, len(content) // 4)
    payload = json.dumps(body).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(payload) + payload


def serve(responder: Responder, ready: Any, stop: Any) -> None:
    """Answer on 127.0.0.1 (a free port, put on ``ready`` as the base URL) until ``stop``
    (an event) is set."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                writer.write(_answer(responder, await reader.readexactly(length)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client hung up, or the loop is ending (stop was set)
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ready.put(f"http://127.0.0.1:{port}/v1")
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(done.set))).start()
        async with server:
            await done.wait()

    asyncio.run(main())
