"""A newcomer follows the README's tour and then the getting-started page, in order, in an
empty folder: every ``$`` command of their ```console blocks in one bash session (the
installed ``memory-sql`` on ``PATH``, as after ``source .venv/bin/activate``, and no model
configured), every ```python block as a script of its own. Each must exit 0, print what the
page shows (``…``: any text), and print no error, warning or failure the page did not show.

``make test`` and ``source .venv/bin/activate`` are what brought this checkout here; ``make
demo`` is run as the ``memory-sql demo`` its recipe is checked to be."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from doc_pages import (
    ROOT,
    blocks,
    commands,
    fenced,
    pattern,
    text,
    unexpected_problems,
    without_comment,
)
from pg_cluster import free_port

PAGES = ("README.md", "getting-started.md")
INSTALL = ("make test", "source .venv/bin/activate")
MAKE_DEMO = "memory-sql demo"


def steps() -> list[tuple[str, str, str]]:
    """(page, kind, code) in reading order: kind ``console`` (one command, with the output the
    page shows after a tab) or ``python`` (a script)."""
    found = []
    for page in PAGES:
        for info, body in fenced(page):
            if info == "python":
                found.append((page, "python", body))
            elif info == "console":
                for command, shown in commands(body):
                    command = without_comment(command)
                    if command == "make demo":
                        command, shown = MAKE_DEMO, ""
                    if command not in INSTALL:
                        found.append((page, "console", command + "\t" + shown))
    return found


def test_make_demo_is_the_memory_sql_demo_the_pages_run():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(r"^demo:.*\n\t(.*)$", makefile, re.M)
    assert recipe is not None and recipe.group(1) == "$(BIN)/memory-sql demo"


def test_the_pages_have_the_tour_and_a_python_example():
    kinds = [(page, kind) for page, kind, _ in steps()]
    assert ("README.md", "console") in kinds
    assert ("getting-started.md", "console") in kinds
    assert ("getting-started.md", "python") in kinds


def test_a_newcomer_following_the_pages_in_order_meets_no_unexpected_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whatever is installed
    env["COLUMNS"] = "80"
    for number, (page, kind, code) in enumerate(steps()):
        if kind == "python":
            script = tmp_path / f"step{number}.py"
            script.write_text(code, encoding="utf-8")
            argv, shown = [sys.executable, script.name], ""
        else:
            command, shown = code.split("\t", 1)
            argv = ["bash", "-c", without_comment(command)]
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
        where = f"{page}, step {number}: {argv[-1]}"
        assert done.returncode == 0, (where, done.stdout, done.stderr)
        output = done.stdout.strip()
        if shown:
            assert pattern(shown).fullmatch(output), (where, shown, output)
        if kind == "python":
            assert "<user_memory>" in output, (where, output)
        problems = unexpected_problems(done.stdout + done.stderr, shown)
        assert problems == [], (where, problems)


def test_the_python_pages_first_example_without_a_model_prints_only_what_its_note_says(tmp_path):
    """The next page: its first example, with the Configuration page's config.yaml, run as a
    newcomer would, with nothing listening at the config's ``llm_base_url``. It must end, and
    every problem it prints must be the one its note quotes."""
    note = " ".join(text("python.md").split("```python", 1)[0].split())
    quoted = re.search(r"\(`(LLM call to .*?)`\)", note)
    assert quoted is not None and "connection refused" in quoted.group(1), note
    told = quoted.group(1)
    config = blocks("yaml", "settings.md")[0]
    assert "llm_base_url: http://localhost:8000/v1" in config and told.startswith(
        "LLM call to http://localhost:8000/v1 (model gpt-4o-mini)"
    )
    port = free_port()  # nothing listens there: the refused connection the note tells of
    (tmp_path / "config.yaml").write_text(config.replace(":8000/", f":{port}/"), encoding="utf-8")
    (tmp_path / "example.py").write_text(blocks("python", "python.md")[0], encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    problems = unexpected_problems(done.stdout + done.stderr, "")
    assert problems, "the example met no model and said nothing"
    for line in problems:
        assert told.replace(":8000/", f":{port}/") in line, line
