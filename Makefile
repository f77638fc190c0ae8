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

# The tests run on both cores (pytest-xdist; a test file stays on one worker, with its module's
# fixtures), then those marked `serial` (timing, rates, benchmarks) alone. Both phases run; the
# target fails if either fails (pytest's 5, nothing selected, is a failure only in both).
test: lint
	$(VENV)/bin/pytest -n 2 --dist loadfile -m "not serial" $(PYTEST_ARGS); parallel=$$?; \
	$(VENV)/bin/pytest -m serial $(PYTEST_ARGS); serial=$$?; \
	echo "make test: pytest exited $$parallel on both cores, $$serial alone (serial)"; \
	case "$$parallel $$serial" in "5 5") exit 5;; [05]" "[05]) exit 0;; *) exit 1;; esac

unit: install
	$(VENV)/bin/pytest -m "not slow" $(PYTEST_ARGS)

BENCHMARKS ?= speed_layer freshness batch_layer serving ingest soak bots regions

bench: install
	@for b in $(BENCHMARKS); do echo "== bench.$$b"; $(PY) -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
