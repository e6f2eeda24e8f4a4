# `make demo` and `make test` set everything up from a fresh clone (a virtualenv in .venv).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test quick lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,langchain,server]'
	touch $@

demo: $(VENV)/.installed  ## store and show a sample memory on the embedded SQLite default
	$(BIN)/memory-sql demo

# Three test processes on two cores: most tests wait on servers, subprocesses and databases.
test: lint  ## lint and the docs build, then the whole suite (SQLite, PostgreSQL on 127.0.0.1:5432, files)
	$(BIN)/pytest -n 3 --dist worksteal

quick: lint  ## the edit-test loop: the suite without the slow fault tests and the HTTP service
	$(BIN)/pytest -n 3 -q -m "not slow" --ignore=tests/server

# The documentation site (mkdocs.yml, docs/) is built with warnings as errors: a broken link or
# anchor fails. Offline: no web fonts, no plugin that downloads. Read it with `$(BIN)/mkdocs serve`.
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# The benchmarks' peers (LangGraph's PostgresStore and SqliteStore) come with the `bench` extra.
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,langchain,server,bench]'
	touch $@

bench: $(VENV)/.bench-installed  ## side-by-side benchmarks; they print ratios, recorded in docs/results.md
	for b in benchmarks/bench_*.py; do $(BIN)/python benchmarks/make_results.py run $$b || exit 1; done
	$(BIN)/python benchmarks/make_results.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site memory_sql_demo.db*
