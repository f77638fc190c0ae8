# Tally: `make demo` runs the platform on the local stack; `make test` runs lint and every test.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install demo test lint unit bench clean

$(STAMP): pyproject.toml constraints.txt scripts/system-deps.sh
	./scripts/system-deps.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/tally demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest $(PYTEST_ARGS)

unit: install
	$(VENV)/bin/pytest -m "not slow" $(PYTEST_ARGS)

BENCHMARKS ?= speed_layer freshness batch_layer serving ingest soak bots regions

bench: install
	@for b in $(BENCHMARKS); do echo "== bench.$$b"; $(PY) -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
