"""``memory-sql ingest | context | worker | demo`` end to end: Typer's runner (and a real worker
process) against SQLite and PostgreSQL, the real openai client against a scripted server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from llm_server import LABELS
from typer.testing import CliRunner

from memory_sql.cli import app
from memory_sql.database import create_engine
from memory_sql.demo import load_conversations
from memory_sql.demo.replay import ReplayLLM, fact_ids, load_recordings
from memory_sql.schema import memory_pending_updates as pending
from memory_sql.storage import open_storage

ROOT = Path(__file__).resolve().parent.parent
LIKES = re.compile(r"User: I like (\S+)")
# Nothing from the developer's environment may reach the commands: no real LLM, no other database.
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith(("OPENAI_", "MEMORY_SQL_"))
}
runner = CliRunner(env=CLEAN_ENV)


def learn(body: dict) -> str:
    """The scripted LLM's answer: a fact for every "I like X" of the conversation."""
    prompt = body["messages"][-1]["content"]
    conversation = prompt.split("<conversation>")[1].split("</conversation>")[0]
    facts = [
        {"content": f"Likes {thing}", "category": "preference", "confidence": 0.9, **LABELS}
        for thing in LIKES.findall(conversation)
    ]
    return json.dumps({"user": {}, "history": {}, "newFacts": facts, "factsToRemove": []})


def chat(thing: str) -> list[dict]:
    return [
        {"role": "user", "content": f"I like {thing}"},
        {"role": "assistant", "content": f"Noted: {thing}."},
    ]


@pytest.fixture(params=["sqlite", pytest.param("pg", id="postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    url = request.getfixturevalue(f"{request.param}_url")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.delete(pending))
    engine.dispose()
    return url


@pytest.fixture
def config_file(tmp_path: Path, llm) -> Path:
    """A --config file whose LLM is the scripted server, with no debounce."""
    llm.responder = learn
    path = tmp_path / "memory.yaml"
    path.write_text(
        "memory:\n"
        "  model_name: test-model\n"
        f"  llm_base_url: {llm.base_url}\n"
        "  llm_api_key: sk-test\n"
        "  llm_timeout_seconds: 5\n"
        "  llm_max_retries: 1\n"
        "  debounce_seconds: 0\n"
        "  sweep_interval_seconds: 1\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def user(scope: dict[str, str]) -> str:
    return scope["user_id"]


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


def rows_of(url: str, user: str) -> list[sa.Row]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(pending).where(pending.c.user_id == user)
            return list(conn.execute(query.order_by(pending.c.thread_id)))
    finally:
        engine.dispose()


def facts_of(url: str, user: str, agent: str | None = "coder") -> list[str]:
    with open_storage(url) as storage:
        return sorted(f.content for f in storage.load(user_id=user, agent_name=agent).facts)


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ingest and context -----------------------------------------------------------------------


def test_ingest_waits_for_the_update_and_context_shows_the_fact(
    db_url, config_file, llm, user, tmp_path
):
    conversation = write_json(tmp_path / "tea-chat.json", chat("tea"))
    common = ("--user", user, "--agent", "coder", "--url", db_url, "--config", config_file)

    result = invoke("ingest", conversation, *common)
    assert result.exit_code == 0, result.output
    assert "queued 1 conversation" in result.output
    assert "1 of 1 memory update done" in result.output
    assert facts_of(db_url, user) == ["Likes tea"]
    assert rows_of(db_url, user) == []
    assert len(llm.requests) == 1

    result = invoke("context", *common)
    assert result.exit_code == 0, result.output
    assert "<user_memory>" in result.stdout and "Likes tea" in result.stdout
    assert result.stdout.rstrip().endswith("</user_memory>")


def test_ingest_reads_langchain_messages_and_an_object_with_ids(
    db_url, config_file, user, tmp_path
):
    conversation = write_json(
        tmp_path / "lc.json",
        {
            "thread_id": "lc-thread",
            "user_id": user,
            "messages": [
                {"type": "human", "content": "I like chess"},
                {"type": "ai", "content": "Nice."},
            ],
        },
    )
    result = invoke(
        "ingest", conversation, "--agent", "coder", "--url", db_url, "--config", config_file
    )
    assert result.exit_code == 0, result.output
    assert facts_of(db_url, user) == ["Likes chess"]


def test_ingest_no_wait_leaves_a_pending_row(db_url, config_file, llm, user, tmp_path):
    conversation = write_json(tmp_path / "later.json", chat("tea"))
    result = invoke(
        "ingest",
        conversation,
        "--user",
        user,
        "--no-wait",
        "--url",
        db_url,
        "--config",
        config_file,
    )
    assert result.exit_code == 0, result.output
    assert "left pending (--no-wait)" in result.output
    (row,) = rows_of(db_url, user)
    assert (row.thread_id, row.agent_name, row.status) == ("later", "", "pending")
    assert row.lease_until is None
    assert llm.requests == []


def test_jsonl_with_a_malformed_line_queues_the_others(db_url, config_file, user, tmp_path):
    lines = [
        json.dumps(chat("tea")),
        '{"messages": [{"role": "user", "content": "I like',  # cut short
        json.dumps({"messages": chat("cake"), "thread_id": "named-thread"}),
        "",
        json.dumps([{"role": "wizard", "content": "abracadabra"}]),
        json.dumps({"messages": chat("jam"), "user_id": user}),  # the same user as --user
    ]
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke(
        "ingest", path, "--user", user, "--no-wait", "--url", db_url, "--config", config_file
    )
    assert result.exit_code == 1, result.output
    assert f"{path}:2: not valid JSON" in result.output
    assert f"{path}:5: message 0:" in result.output
    assert "queued 3 conversations, skipped 2 (2 invalid" in result.output
    assert "Traceback" not in result.output
    assert [r.thread_id for r in rows_of(db_url, user)] == ["chats:1", "chats:6", "named-thread"]


def test_a_file_naming_another_tenant_or_user_than_the_flags_is_refused(
    db_url, config_file, llm, user, tmp_path
):
    victim = f"{user}-victim"
    path = write_json(
        tmp_path / "planted.json",
        {"messages": chat("secrets"), "tenant_id": "victim", "user_id": victim},
    )
    result = invoke(
        "ingest", path, "--user", user, "--tenant", "acme", "--url", db_url, "--config", config_file
    )
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1, result.output
    assert str(path) in result.output and "refused" in result.output
    assert "'victim'" in result.output and "--tenant 'acme'" in result.output
    assert "Traceback" not in result.output
    assert rows_of(db_url, user) == [] and rows_of(db_url, victim) == []
    assert llm.requests == []


def test_a_jsonl_line_naming_another_scope_queues_nothing_of_the_ingest(
    db_url, config_file, user, tmp_path
):
    other = f"{user}-other"
    lines = [
        json.dumps(chat("tea")),
        json.dumps({"messages": chat("cake"), "user_id": user, "tenant_id": "acme"}),
        json.dumps({"messages": chat("jam"), "userId": other}),
        "{not json",
        json.dumps({"messages": chat("figs"), "agentName": "writer"}),
        json.dumps({"messages": chat("plums"), "tenant_id": "globex"}),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ("--user", user, "--tenant", "acme", "--agent", "Coder", "--no-wait")
    result = invoke("ingest", path, *flags, "--url", db_url, "--config", config_file)
    assert result.exit_code == 1, result.output
    refused = [line for line in result.output.splitlines() if line.startswith("refused:")]
    assert [line.split(": ")[1] for line in refused] == [f"{path}:{n}" for n in (3, 5, 6)]
    assert f"userId '{other}' is not --user '{user}'" in refused[0]
    assert "agentName 'writer' is not --agent 'Coder'" in refused[1]
    assert "tenant_id 'globex' is not --tenant 'acme'" in refused[2]
    assert f"{path}:4: not valid JSON" in result.output  # still reported
    assert "3 of 6 conversations name another user, tenant or agent" in result.output
    assert "nothing queued" in result.output and "queued 1" not in result.output
    assert rows_of(db_url, user) == [] and rows_of(db_url, other) == []


def test_a_file_naming_the_flags_values_or_a_scope_without_a_flag_is_queued(
    db_url, config_file, user, tmp_path
):
    same = write_json(
        tmp_path / "same.json",
        {"messages": chat("tea"), "user_id": user, "tenant_id": "acme", "agent_name": "CODER"},
    )
    flags = ("--user", user, "--tenant", "acme", "--agent", "coder", "--no-wait")
    result = invoke("ingest", same, *flags, "--url", db_url, "--config", config_file)
    assert result.exit_code == 0, result.output
    named = write_json(tmp_path / "named.json", {"messages": chat("cake"), "tenant_id": "globex"})
    result = invoke(
        "ingest", named, "--user", user, "--no-wait", "--url", db_url, "--config", config_file
    )
    assert result.exit_code == 0, result.output
    assert [(r.tenant_id, r.agent_name, r.thread_id) for r in rows_of(db_url, user)] == [
        ("globex", "", "named"),
        ("acme", "coder", "same"),
    ]


def test_a_folder_is_ingested_with_a_progress_bar_and_waited_for(
    db_url, config_file, user, tmp_path
):
    folder = tmp_path / "chats"
    folder.mkdir()
    for thing in ("tea", "cake", "jam"):
        write_json(folder / f"{thing}.json", chat(thing))
    (folder / "notes.txt").write_text("not a conversation", encoding="utf-8")
    (folder / "more.jsonl").write_text(json.dumps(chat("figs")) + "\n", encoding="utf-8")
    result = invoke(
        "ingest",
        folder,
        "--user",
        user,
        "--agent",
        "coder",
        "--url",
        db_url,
        "--config",
        config_file,
    )
    assert result.exit_code == 0, result.output
    assert (
        "queued 4 conversations" in result.output and "4 of 4 memory updates done" in result.output
    )
    assert facts_of(db_url, user) == ["Likes cake", "Likes figs", "Likes jam", "Likes tea"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "bad.json:1: not valid JSON"),
        ('{"foo": 1}', 'bad.json: an object needs a "messages" list'),
        ('"hello"', "bad.json: expected a list of messages"),
        ('[{"role": "user", "content": {"nested": 1}}]', "bad.json: message 0:"),
        (None, "bad.json: cannot read it"),
    ],
    ids=["not-json", "no-messages", "a-string", "bad-message", "missing"],
)
def test_a_bad_file_is_one_line_and_exit_1(
    db_url, config_file, llm, user, tmp_path, content, message
):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    result = invoke("ingest", path, "--user", user, "--url", db_url, "--config", config_file)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1, result.output
    assert message in result.output and "not queued" in result.output
    assert "Traceback" not in result.output
    assert rows_of(db_url, user) == []
    assert llm.requests == []


def test_a_bad_user_is_one_line_and_exit_1(db_url, config_file, tmp_path):
    path = write_json(tmp_path / "chat.json", chat("tea"))
    result = invoke("ingest", path, "--user", "../etc", "--url", db_url, "--config", config_file)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "user_id" in result.output


def test_a_failing_llm_is_reported_and_the_row_kept(db_url, config_file, llm, user, tmp_path):
    llm.responder = None  # every request answers HTTP 500
    path = write_json(tmp_path / "chat.json", chat("tea"))
    result = invoke("ingest", path, "--user", user, "--url", db_url, "--config", config_file)
    assert result.exit_code == 1
    assert "0 of 1 memory update done" in result.output
    assert "attempt 1 failed, will retry" in result.output and "HTTP 500" in result.output
    assert "Traceback" not in result.output
    (row,) = rows_of(db_url, user)
    assert row.attempts == 1 and row.lease_until is None


def test_context_of_an_empty_memory_is_a_note_on_stderr(db_url, config_file, user):
    result = invoke("context", "--user", user, "--url", db_url, "--config", config_file)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "is empty" in result.stderr


def test_context_on_an_old_schema_is_one_line(tmp_path):
    (tmp_path / "new.db").touch()  # an empty SQLite database
    url = f"sqlite:///{tmp_path / 'new.db'}"
    result = invoke("context", "--user", "alice", "--url", url)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "memory-sql db upgrade" in result.output


# demo -------------------------------------------------------------------------------------


def demo_facts(url: str) -> list[str]:
    return facts_of(url, "demo-user", "coder")


def test_demo_runs_offline_and_shows_the_correction(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    for _ in range(2):  # the file is recreated each run
        started = time.monotonic()
        result = invoke("demo", "--url", url)
        assert result.exit_code == 0, result.output
        assert time.monotonic() - started < 20
        assert "no LLM configured: replaying recorded responses" in result.output
        assert "correction detected" in result.output
        assert "Uses PostgreSQL, not MySQL" in result.output
        assert "(avoid: Assumed MySQL" in result.output
        assert "<user_memory>" in result.output and "</user_memory>" in result.output
        assert "团队在杭州" in result.output
    facts = demo_facts(url)
    assert "The billing reports run on MySQL" not in facts
    assert "The billing reports run on PostgreSQL 16" in facts
    assert "Uses SQLAlchemy 2.0" not in facts  # proposed at 0.6, below min_confidence
    with open_storage(url) as storage:
        assert storage.load(user_id="demo-user", agent_name="coder").version == 4


def test_demo_uses_a_configured_llm(tmp_path, llm):
    llm.responder = lambda body: json.dumps(
        {
            "user": {},
            "history": {},
            "newFacts": [
                {"content": "Likes demos", "category": "preference", "confidence": 0.9, **LABELS}
            ],
        }
    )
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    env = {"OPENAI_MODEL": "live-model", "OPENAI_BASE_URL": llm.base_url}
    result = runner.invoke(app, ["demo", "--url", url], env={**CLEAN_ENV, **env})
    assert result.exit_code == 0, result.output
    assert "replaying" not in result.output and "LLM: model live-model" in result.output
    assert len(llm.requests) == len(load_conversations())
    assert demo_facts(url) == ["Likes demos"]


def test_demo_goes_on_after_a_failed_update_and_reports_it(tmp_path, llm):
    """The model fails the first conversation's update (a CPU model timing out, say): the
    other conversations still run, and the end says which failed, exit 1."""
    answered = []

    def reply(body: dict) -> str:
        answered.append(body)
        if len(answered) == 1:
            return "not JSON at all"
        return json.dumps(
            {"user": {}, "history": {}, "newFacts": [
                {"content": f"Likes demo {len(answered)}", "category": "preference",
                 "confidence": 0.9, **LABELS}]}
        )  # fmt: skip

    llm.responder = reply
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    env = {
        "OPENAI_MODEL": "live-model",
        "OPENAI_BASE_URL": llm.base_url,
        "MEMORY_SQL_MAX_ATTEMPTS": "1",
        "MEMORY_SQL_LLM_REPAIR_ATTEMPTS": "0",
    }
    result = runner.invoke(app, ["demo", "--url", url], env={**CLEAN_ENV, **env})
    total = len(load_conversations())
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.output.count("! the update failed:") == 1
    assert f"1 of {total} updates failed" in result.output
    assert "llm_timeout_seconds" in result.output
    assert len(answered) == total  # every conversation was sent
    assert len(demo_facts(url)) >= 1  # the others' facts are stored


def test_demo_will_not_delete_a_database_of_real_users(sqlite_url):
    with open_storage(sqlite_url) as storage:
        doc = storage.load(user_id="alice")
        doc.user.work_context.summary = "Engineer."
        storage.save(doc, user_id="alice")
    result = invoke("demo", "--url", sqlite_url)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "other users (alice" in result.output
    with open_storage(sqlite_url) as storage:
        assert storage.load(user_id="alice").user.work_context.summary == "Engineer."


def test_the_replay_server_matches_by_conversation_not_by_order():
    recordings = load_recordings()
    with ReplayLLM(recordings) as replay:
        for recording in reversed(recordings):
            prompt = (
                "<current_memory>\nFacts (id | category | confidence | content):\n"
                "- fact_aaa | context | 0.75 | The billing reports run on MySQL\n"
                "- fact_bbb | context | 0.90 | Writes mostly Python\n</current_memory>\n\n"
                f"<conversation>\nUser: …{recording.match}…\n</conversation>"
            )
            status, body = replay.answer({"messages": [{"role": "user", "content": prompt}]})
            assert status == 200
            reply = json.loads(body["choices"][0]["message"]["content"])
            assert reply["newFacts"] == recording.reply["newFacts"]
            expected = ["fact_aaa"] if recording.remove_facts else []
            assert reply["factsToRemove"] == expected
        status, body = replay.answer(
            {"messages": [{"role": "user", "content": "<conversation>hi</conversation>"}]}
        )
        assert status == 404 and "no recorded response" in body["error"]["message"]
    assert replay.served == len(recordings) and replay.unmatched == 1


def test_fact_ids_read_escaped_and_correction_lines():
    memory = (
        "- fact_1 | correction | 0.97 | Uses a &lt;b&gt; tag (mistake to avoid: x)\n"
        "- fact_2 | context | 0.90 | Something else"
    )
    assert fact_ids(memory, ["uses a <b> TAG"]) == ["fact_1"]


# worker -----------------------------------------------------------------------------------


def worker_env(llm) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env.update(
        MEMORY_SQL_MODEL_NAME="test-model",
        MEMORY_SQL_LLM_BASE_URL=llm.base_url,
        MEMORY_SQL_LLM_API_KEY="sk-test",
        MEMORY_SQL_LLM_MAX_RETRIES="0",
        MEMORY_SQL_SWEEP_INTERVAL_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def start_worker(url: str, llm) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "memory_sql", "worker", "--url", url, "--status-every", "0.2"],
        cwd=ROOT,
        env=worker_env(llm),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def stop(process: subprocess.Popen[str], *, signalled: bool = False) -> tuple[int, float, str]:
    """SIGTERM (unless already sent), then the exit code, seconds to exit, and the output."""
    started = time.monotonic()
    if not signalled:
        process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"the worker ignored SIGTERM:\n{output}")
    return process.returncode, time.monotonic() - started, output


def leased_rows(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(sa.func.count()).where(pending.c.lease_until.is_not(None))
            return conn.execute(query).scalar_one()
    finally:
        engine.dispose()


@pytest.mark.slow
def test_worker_process_runs_the_queue_and_stops_cleanly_on_sigterm(
    db_url, config_file, llm, user, tmp_path
):
    path = write_json(tmp_path / "queued.json", chat("tea"))
    common = ("--user", user, "--agent", "coder", "--url", db_url, "--config", config_file)
    assert invoke("ingest", path, "--no-wait", *common).exit_code == 0
    process = start_worker(db_url, llm)
    try:
        assert wait_for(lambda: facts_of(db_url, user) == ["Likes tea"]), "not processed"
        assert wait_for(lambda: rows_of(db_url, user) == [])
    finally:
        code, took, output = stop(process)
    assert code == 0, output
    assert took < 5, output
    assert "worker started" in output and "SIGTERM: stopping" in output
    assert "worker stopped" in output and "Traceback" not in output
    assert leased_rows(db_url) == 0


@pytest.mark.slow
def test_sigterm_during_an_update_waits_for_it_and_leaves_no_lease(
    db_url, config_file, llm, user, tmp_path
):
    entered, release = threading.Event(), threading.Event()

    def slow_learn(body: dict) -> str:
        entered.set()
        release.wait(10)
        return learn(body)

    path = write_json(tmp_path / "queued.json", chat("cake"))
    common = ("--user", user, "--agent", "coder", "--url", db_url, "--config", config_file)
    assert invoke("ingest", path, "--no-wait", *common).exit_code == 0
    llm.responder = slow_learn
    process = start_worker(db_url, llm)
    signalled = False
    try:
        assert entered.wait(30), "the worker never called the LLM"
        assert leased_rows(db_url) == 1
        process.send_signal(signal.SIGTERM)
        signalled = True
        time.sleep(0.5)
        assert process.poll() is None  # still finishing the update in flight
    finally:
        release.set()
        code, took, output = stop(process, signalled=signalled)
    assert code == 0, output
    assert "1 update in flight" in output
    assert facts_of(db_url, user) == ["Likes cake"]
    assert rows_of(db_url, user) == []
    assert leased_rows(db_url) == 0
