# Every target sets up what it needs: a virtualenv in .venv with the package installed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_QUIET ?= -q

.PHONY: demo test conformance lint format bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP_QUIET) --upgrade pip

# Everything (tests, lint, bench); the demo needs only the embedded server.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e '.[dev,embedded,prometheus,spark]'
	touch $@

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e '.[embedded]'
	touch $@

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_QUIET) -e '.[docs]'
	touch $@

## demo: producer + worker processes + cleaner (embedded server unless REDIS_URL is set)
demo: $(VENV)/.installed-demo
	$(BIN)/rwq demo

## test: the whole suite, on redis-server processes it starts itself (and on fakeredis);
## the Spark tests need Java 17 (PYTEST_ARGS='-m "not spark"' leaves them out), the Node.js
## interop tests node and npm (PYTEST_ARGS='-m "not node"')
test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## conformance: the conformance tests (conformance/) on the oldest and newest redis-py release of
## each major line the package allows, each installed on first use into .venv/redis-py/
## (CONFORMANCE_ARGS='--versions 5.0.0 8.1.0' to run some of them)
conformance: $(VENV)/.installed
	$(BIN)/python conformance/run.py --cache $(VENV)/redis-py $(CONFORMANCE_ARGS)

## lint: ruff on everything, mypy --strict on src/
lint: $(VENV)/.installed
	$(BIN)/ruff check src tests bench conformance
	$(BIN)/ruff format --check src
	$(BIN)/mypy --strict src
	$(BIN)/python -m redis_work_queue.lualint

format: $(VENV)/.installed
	$(BIN)/ruff format src tests bench conformance
	$(BIN)/ruff check --fix src tests bench conformance

## bench: figures and same-run ratios against the published baseline client and the peers
## (rq, BullMQ, Redis Streams; the bench extra), then the wire path against redis-py's own
## EVALSHA, Redis time per script call against minimal scripts, the import time, and fair
## groups under a worker of 8 threads against a queue without groups
bench: $(VENV)/.installed
	$(BIN)/pip install $(PIP_QUIET) -e '.[bench]'
	$(BIN)/python bench/run.py
	$(BIN)/python bench/wire_bench.py
	$(BIN)/python bench/script_time.py
	$(BIN)/python bench/import_time.py
	$(BIN)/python bench/fairness.py --check

## docs: the documentation site (MkDocs), warnings as errors, into site/
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) dist build site .pytest_cache .mypy_cache .ruff_cache
