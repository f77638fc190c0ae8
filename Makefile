# Tally: `make demo` runs the platform on the local stack; `make test` runs lint, the docs build and
# every test; `make docs` builds the documentation site (mkdocs.yml) into data/site.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install demo test lint docs unit bench clean

# pip installs uv, and uv the project: the same pinned versions as pip resolves (constraints.txt),
# about 40 s from an empty venv against pip's 150 s, bytecode compiled as pip does.
$(STAMP): pyproject.toml constraints.txt scripts/system-deps.sh
	./scripts/system-deps.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt uv
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/tally demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# --strict: a broken link, a missing page or a page left out of the nav fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The tests run on TEST_WORKERS pytest-xdist workers (a test file stays on one worker with its
# module's fixtures; tests/conftest.py keeps the serving layer's files together), then those marked
# `serial` (they assert on timing or rates) alone. Both phases run; the target fails if either fails
# (5, nothing selected, fails only in both). Three workers on two cores: the tests wait on brokers,
# JVMs and subprocesses, so a third keeps the CPUs busy (first phase 15:28 against 17:15 on two,
# 2026-11-29). Once, on 2026-11-28, a Ctrl-C'd `tally airflow` took more than its 75 s to stop
# under that load (tests/dags/test_airflow_postgres.py); TEST_WORKERS=2 is the way back.
TEST_WORKERS ?= 3

# Each phase keeps a JUnit report (every test's time) under data/test-report/, for finding the
# slow ones beside the --durations list pytest prints; scripts/test-failures.py names the failed
# tests of both phases last, where the tail of a CI log shows them.
REPORTS := data/test-report

test: lint docs
	mkdir -p $(REPORTS)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" --junitxml=$(REPORTS)/parallel.xml $(PYTEST_ARGS); parallel=$$?; \
	$(VENV)/bin/pytest -m serial --junitxml=$(REPORTS)/serial.xml $(PYTEST_ARGS); serial=$$?; \
	$(PY) scripts/test-failures.py $(REPORTS)/parallel.xml $(REPORTS)/serial.xml; \
	echo "make test: pytest exited $$parallel on $(TEST_WORKERS) workers, $$serial alone (serial)"; \
	case "$$parallel $$serial" in "5 5") exit 5;; [05]" "[05]) exit 0;; *) exit 1;; esac

unit: install
	$(VENV)/bin/pytest -m "not slow" $(PYTEST_ARGS)

BENCHMARKS ?= speed_layer counter_cpu script_or_commands broker freshness batch_layer log_files interval_run serving ingest soak bots regions

bench: install
	@for b in $(BENCHMARKS); do echo "== bench.$$b"; $(PY) -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
