"""What anyone can send without a key is bounded: metrics labels from a closed set, request
heads and bodies with deadlines (``/healthz`` answers while slow clients hold connections),
idle kept-alive connections closed, a limit of open connections (503 past it), queue gauges
read at most once per interval, refusals logged at a bounded rate, and a clean SIGTERM exits 0.
A real ``memory-sql serve`` on a SQLite database, raw sockets and httpx."""

from __future__ import annotations

import logging
import re
import select
import socket
import time

import httpx
import pytest
from llm_server import ScriptedLLM

from memory_sql import migrations
from memory_sql.server.logs import RateLimitFilter
from memory_sql.server.metrics import QUEUE_SAMPLE_SECONDS
from server.conftest import service_settings_for
from server.service_process import ServiceProcess


def settings_in(folder, llm) -> dict:
    url = f"sqlite:///{folder / 'service.db'}"
    migrations.upgrade(url)
    return {
        **service_settings_for(llm),
        "storage": url,
        "server_header_timeout_seconds": 1.5,
        "server_body_timeout_seconds": 2.0,
    }


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """One service for the tests that only send to it (each starts its own clients)."""
    folder = tmp_path_factory.mktemp("keyless")
    with ScriptedLLM() as llm, ServiceProcess(folder, settings_in(folder, llm)) as running:
        yield running


@pytest.fixture(scope="module")
def small_service(tmp_path_factory):
    """A service taking 4 connections at once and keeping an idle one alive for 1 s, its
    header deadline (5 s) well past that, so what closes an idle connection is keep-alive."""
    folder = tmp_path_factory.mktemp("small")
    with ScriptedLLM() as llm:
        settings = {
            **settings_in(folder, llm),
            "server_header_timeout_seconds": 5.0,
            "server_keep_alive_seconds": 1.0,
            "server_max_connections": 4,
        }
        with ServiceProcess(folder, settings) as running:
            yield running


def raw(service: ServiceProcess) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    return connection


def exchange(connection: socket.socket, path: str = "/healthz") -> bytes:
    """Send one whole GET on ``connection`` and read its whole answer (head and body)."""
    connection.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = connection.recv(4096)
        assert chunk, answer
        answer += chunk
    head, body = answer.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = connection.recv(4096)
        assert chunk, answer
        body += chunk
    return head + b"\r\n\r\n" + body


def test_made_up_methods_and_paths_become_no_new_metrics_labels(service):
    with service.client() as http:
        for n in range(200):
            http.request(f"FOO{n}", f"/made/up/{n}")
            http.get(f"/v1/users/user{n}/facts")  # 401, labelled by its template
        metrics = http.get("/metrics").text
    requests = [
        line for line in metrics.splitlines() if line.startswith("memory_sql_http_requests_total")
    ]
    assert 'method="other"' in metrics
    assert "FOO" not in metrics and "/made/up" not in metrics and "user17" not in metrics
    assert 'route="/v1/users/{user_id}/facts"' in metrics
    assert len(requests) < 10, requests


def test_connections_that_never_finish_their_headers_are_closed_and_healthz_answers(service):
    slow = []
    for n in range(100):
        connection = raw(service)
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * n)
        slow.append(connection)
    idle = [raw(service) for _ in range(100)]  # open, sending nothing
    started = time.monotonic()
    for _ in range(5):
        assert httpx.get(f"{service.base_url}/healthz", timeout=2).status_code == 200
    assert time.monotonic() - started < 5
    time.sleep(2.5)  # past server_header_timeout_seconds (1.5)
    for connection in slow + idle:
        connection.settimeout(2)
        assert connection.recv(100) == b""  # closed by the server
        connection.close()
    assert "closed a connection that sent no whole request head" in service.log


def test_a_body_sent_a_byte_at_a_time_is_cut_off_with_408(service):
    connection = raw(service)
    connection.sendall(
        b"POST /v1/conversations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    started = time.monotonic()
    answer = b""
    connection.settimeout(0.5)
    while time.monotonic() - started < 10 and b"\r\n\r\n" not in answer:
        try:
            connection.sendall(b" ")
            answer += connection.recv(4096)
        except TimeoutError:
            assert httpx.get(f"{service.base_url}/healthz", timeout=2).status_code == 200
        except OSError:
            break
    elapsed = time.monotonic() - started
    connection.settimeout(2)
    while chunk := connection.recv(4096):  # the rest of the answer, then the server closes
        answer += chunk
    connection.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"server_body_timeout_seconds" in answer
    assert 1.5 < elapsed < 5


def test_the_queue_gauges_are_read_once_per_interval_however_often_scraped(service):
    started = time.monotonic()
    with service.client() as http:
        for _ in range(30):
            metrics = http.get("/metrics").text
    elapsed = time.monotonic() - started
    reads = re.search(r"^memory_sql_queue_reads_total (\S+)$", metrics, re.M)
    assert reads is not None, metrics
    # One reading per QUEUE_SAMPLE_SECONDS (5 s) of scraping, not one per scrape (30).
    assert 1 <= float(reads.group(1)) <= 1 + elapsed // QUEUE_SAMPLE_SECONDS + 1
    assert "memory_sql_queue_rows" in metrics


def test_refused_requests_are_logged_at_a_bounded_rate(service):
    started = time.monotonic()
    with service.client("msk_0000000000000000_" + "A" * 43) as http:
        for n in range(300):
            assert http.get(f"/v1/users/u{n}/facts").status_code == 401
    # The filter's burst is 20 per 10 s window, and its windows need not start with this test:
    # a run shorter than one window can still meet two of them.
    windows = int((time.monotonic() - started) // 10) + 2
    logged = service.log.count('"status": 401')
    assert logged <= 20 * windows + 5, (logged, windows)


def test_the_rate_limit_lets_each_kind_through_up_to_its_burst_and_counts_the_rest():
    limit = RateLimitFilter(burst=3, window=60)

    def record(message: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", level, __file__, 1, message, None, None)

    passed = [limit.filter(record("Exceeded concurrency limit.")) for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    assert limit.filter(record("Invalid HTTP request received."))  # another kind
    assert limit.filter(record("routine", logging.INFO))  # below WARNING: untouched
    assert limit.suppressed == 7


def test_a_clean_sigterm_exits_0(tmp_path, llm):
    service = ServiceProcess(tmp_path, settings_in(tmp_path, llm))
    with service.client() as http:
        assert http.get("/healthz").status_code == 200
    assert service.stop() == 0, service.log


def test_past_server_max_connections_open_connections_the_answer_is_503(small_service):
    held = [raw(small_service) for _ in range(3)]  # open, sending nothing
    try:
        # The fourth connection is within server_max_connections (4): served.
        assert httpx.get(f"{small_service.base_url}/healthz", timeout=2).status_code == 200
        held.append(raw(small_service))
        refused = httpx.get(f"{small_service.base_url}/healthz", timeout=2)  # the fifth
        assert refused.status_code == 503, refused.text
        assert refused.headers["connection"] == "close"
    finally:
        for connection in held:
            connection.close()
    deadline = time.monotonic() + 3
    while True:  # the server sees the closes at once; allow it a moment on a loaded machine
        answer = httpx.get(f"{small_service.base_url}/healthz", timeout=2)
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert answer.status_code == 200
    assert "Exceeded concurrency limit." in small_service.log


def test_an_idle_kept_alive_connection_is_closed_after_server_keep_alive_seconds(small_service):
    idle, busy = raw(small_service), raw(small_service)
    try:
        assert exchange(idle).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        closed_after = None
        answers = []
        # For 3 s (three times server_keep_alive_seconds): a request on ``busy`` every 0.4 s,
        # ``idle`` watched for the server's close.
        while time.monotonic() - started < 3:
            answers.append(exchange(busy)[:12])
            if closed_after is None and select.select([idle], [], [], 0.4)[0]:
                assert idle.recv(100) == b""  # nothing but the close
                closed_after = time.monotonic() - started
            elif closed_after is not None:
                time.sleep(0.4)
        answers.append(exchange(busy)[:12])  # still open, still served
    finally:
        idle.close()
        busy.close()
    assert closed_after is not None and 0.7 < closed_after < 2.5, closed_after
    assert answers == [b"HTTP/1.1 200"] * len(answers) and len(answers) >= 6
