"""The documentation site holds together: it builds with warnings as errors (a broken link or
anchor fails, as in ``make lint``), its fenced blocks are ones MkDocs renders as code, the
README stays a front page that links into it, and the results page is the one
``benchmarks/make_results.py`` makes from the benchmarks' files."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from doc_pages import DOCS, ROOT, fenced, text

MKDOCS = Path(sys.executable).parent / "mkdocs"


def make_results():
    spec = importlib.util.spec_from_file_location(
        "make_results", ROOT / "benchmarks" / "make_results.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_pages() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    found: list[str] = []

    def walk(items) -> None:
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                walk(value)
            else:
                found.append(value)

    walk(config["nav"])
    return found


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis" not in html and "fonts.gstatic" not in html  # offline


def test_every_fenced_block_has_a_one_word_info_string():
    # "```python client" is no fence to MkDocs' superfences: the rest of the page became code
    for page in ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))]:
        for info, _body in fenced(page):
            assert re.fullmatch(r"[a-z]*", info), (page, info)


def test_the_nav_is_in_reading_order_and_the_readme_links_into_it():
    pages = nav_pages()
    assert pages[:2] == ["index.md", "getting-started.md"]
    order = ["python.md", "recall.md", "langchain.md", "deerflow.md", "postgresql.md"]
    order += ["http-service.md", "console.md", "mcp.md", "settings.md", "local-models.md"]
    order += ["cli.md", "tables.md", "how-it-works.md", "aging.md", "faults.md", "results.md"]
    order += ["layout.md"]
    assert [p for p in pages if p in order] == order
    readme = text("README.md")
    assert len(readme.splitlines()) <= 250
    linked = re.findall(r"\]\(docs/([^)#]+)", readme)
    assert set(pages) - {"index.md"} <= set(linked)
    for page in linked:
        assert (DOCS / page).exists(), page


def test_the_results_page_is_made_from_the_benchmarks_files():
    assert (DOCS / "results.md").read_text(encoding="utf-8") == make_results().page(), (
        "docs/results.md is generated: run .venv/bin/python benchmarks/make_results.py"
    )


def test_a_recorded_run_shows_its_command_output_and_status(tmp_path, monkeypatch):
    module = make_results()
    monkeypatch.setattr(module, "RESULTS", tmp_path / "results")
    bench = tmp_path / "bench_toy.py"
    bench.write_text('"""A toy."""\nprint("| arm | time |")\nraise SystemExit(3)\n')
    assert module.run(bench, ["--quick"]) == 3
    recorded = (tmp_path / "results" / "bench_toy.md").read_text(encoding="utf-8")
    assert recorded.startswith("`.venv/bin/python benchmarks/bench_toy.py --quick`, ")
    assert "load average" in recorded and "**exit status 3**" in recorded
    assert "```text\n| arm | time |\n```" in recorded


# The pages whose ```python blocks a test runs as written, and the test that runs them.
PYTHON_RUN_BY = {
    "getting-started.md": "tests/test_docs_getting_started.py",
    "python.md": "tests/test_readme_examples.py",
    "recall.md": "tests/test_readme_examples.py",
    "langchain.md": "tests/test_readme_examples.py",
    "http-service.md": "tests/test_readme_service.py",
}


def test_every_python_example_of_the_site_is_run_by_a_test():
    with_python = {p.name for p in DOCS.glob("*.md") if "```python\n" in p.read_text("utf-8")}
    assert with_python <= set(PYTHON_RUN_BY), (
        "a page's Python example runs in no test: add the page to a test that runs it as "
        f"written, then to PYTHON_RUN_BY: {sorted(with_python - set(PYTHON_RUN_BY))}"
    )
    for test in set(PYTHON_RUN_BY.values()):
        assert (ROOT / test).exists(), test
