"""The README's HTTP service walkthrough runs as written: the ```console block that starts the
service (`db upgrade`, then `serve`, run in the background here) and the session block after
it, each ``$`` command in one bash session, in a fresh folder, with the installed
``memory-sql`` on ``PATH`` (as after ``source .venv/bin/activate``). Each command's output must
match the one the README shows, where ``…`` stands for any text and a date for any date. Only
the port differs: the README's 8080 becomes a free one."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from pg_cluster import free_port

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = ("source .venv/bin/activate",)  # done by the test: the installed command on PATH


def console_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## HTTP service") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"^```console\n(.*?)^```$", section, flags=re.M | re.S)


def commands(block: str) -> list[tuple[str, str]]:
    """Each ``$`` command of ``block`` (continuation lines and quoted newlines joined as the
    shell joins them) with the output shown under it."""
    found: list[tuple[str, list[str]]] = []
    lines = block.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        assert line.startswith("$ "), f"output before any command: {line!r}"
        command = line[2:]
        while command.endswith("\\") or not _complete(command):
            index += 1
            command += "\n" + lines[index]
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        found.append((command, output))
    return [(command, "\n".join(output)) for command, output in found]


def _complete(command: str) -> bool:
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def without_comment(command: str) -> str:
    """``command`` without its trailing comment (two spaces or more, then ``#``)."""
    return re.split(r"\s{2,}#", command, maxsplit=1)[0].rstrip()


def pattern(shown: str) -> re.Pattern[str]:
    text = re.escape(shown)
    text = text.replace("…", ".*?")
    text = re.sub(r"\d{4}\\-\d{2}\\-\d{2},\\ \w+day", r"\\d{4}-\\d{2}-\\d{2}, \\w+day", text)
    text = re.sub(r"fact_[0-9a-f]{12}", "fact_[0-9a-f]{12}", text)
    text = re.sub(r'"cursor":"[A-Za-z0-9_-]+"', '"cursor":"[A-Za-z0-9_-]+"', text)
    return re.compile(text, re.S)


def test_the_http_walkthrough_runs_as_written(tmp_path):
    blocks = console_blocks()
    (start,) = [b for b in blocks if "memory-sql serve --url" in b and "curl" not in b]
    (session,) = [b for b in blocks if b.startswith("$ KEY=$(memory-sql keys create")]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whatever is installed

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    server = None
    try:
        for command, _shown in commands(start):
            command = without_comment(command).replace("8080", str(port))
            if command.strip() in SKIPPED:
                continue
            if command.startswith("memory-sql serve"):
                log = (tmp_path / "serve.log").open("wb")
                server = subprocess.Popen(
                    [*shlex.split(command), "--port", str(port)],
                    cwd=tmp_path,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                _wait_for(f"http://127.0.0.1:{port}/readyz", server, tmp_path / "serve.log")
                continue
            done = run(command)
            assert done.returncode == 0, (command, done.stdout, done.stderr)

        # The session: one bash, so that $KEY and $FACT carry from one command to the next;
        # each command's output goes to a file of its own.
        script = []
        steps = commands(session)
        for number, (command, _shown) in enumerate(steps):
            command = command.replace("8080", str(port))
            script.append(f"{{ {command}\n}} > out.{number} 2> err.{number}; echo $? > rc.{number}")
        done = run("\n".join(script))
        assert done.returncode == 0, done.stderr
        for number, (command, shown) in enumerate(steps):
            output = (tmp_path / f"out.{number}").read_text(encoding="utf-8").strip()
            errors = (tmp_path / f"err.{number}").read_text(encoding="utf-8")
            code = (tmp_path / f"rc.{number}").read_text().strip()
            assert code == "0", (command, output, errors)
            if shown:
                assert pattern(shown).fullmatch(output), (command, shown, output)
            else:
                assert output == "", (command, output)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    assert server.returncode == 0, (tmp_path / "serve.log").read_text()
    assert (tmp_path / "memory.db").exists()  # the README's own file, in the working folder


def _wait_for(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"memory-sql serve did not answer: {log.read_text()}")
